"""The size-threshold finder: the integers a candidate compares sizes with, in many code styles,
traced to the input dims they are compared with; unrelated integers stay out."""

import textwrap

import pytest

from kgen.evals.problem.size_threshold import ThresholdAxis
from kgen.evals.static_rules.size_thresholds import MAX_FOUND, find_size_thresholds

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def found(body: str) -> dict[int, set[ThresholdAxis]]:
    """value -> the axes it was traced to (empty: unknown) for a candidate made of ``body``."""
    result: dict[int, set[ThresholdAxis]] = {}
    for t in find_size_thresholds(HEADER + textwrap.dedent(body)):
        result.setdefault(t.value, set()).update(t.axes)
    return result


COLS = ThresholdAxis(input=0, dim=1)
LAST = ThresholdAxis(input=0, dim=-1)
ROWS = ThresholdAxis(input=0, dim=0)


@pytest.mark.parametrize(
    "body, value, axis",
    [
        # host if on an unpacked shape
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 n_rows, n_cols = x.shape
                 if n_cols > 8192:
                     return x
                 return x
         """, 8192, COLS),
        # a threshold behind a named module constant, in a helper
        ("""
         SPLIT_AT = 16384
         def launch(t):
             n = t.shape[-1]
             return n > SPLIT_AT
         class ModelNew(nn.Module):
             def forward(self, x):
                 return launch(x)
         """, 16384, LAST),
        # a constexpr flag from a shifted literal, handed to a kernel
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 N = x.size(-1)
                 USE_SPLIT = N >= 1 << 14
                 return USE_SPLIT
         """, 16384, LAST),
        # min() capping a next_power_of_2 block
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 block = min(triton.next_power_of_2(x.shape[1]), 65536)
                 return block
         """, 65536, COLS),
        # next_power_of_2(n) compared: the threshold is on n itself
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 return 1 if triton.next_power_of_2(x.shape[1]) > 4096 else 2
         """, 4096, COLS),
        # a capped grid
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 rows = x.shape[0]
                 grid = (min(rows, 1024),)
                 return grid
         """, 1024, ROWS),
        # a constant factor moved across: bytes compared, elements crossed
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 n = x.shape[1]
                 if n * 4 > 65536:
                     return 1
                 return 2
         """, 16384, COLS),
        # a while loop on a size
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 splits = 1
                 while x.shape[1] // splits > 4096:
                     splits *= 2
                 return splits
         """, 4096, ThresholdAxis(input=0, dim=1)),
        # len() of an input is its first dim
        ("""
         class ModelNew(nn.Module):
             def forward(self, x):
                 return 2 if len(x) >= 2048 else 1
         """, 2048, ROWS),
    ],
)
def test_host_thresholds_are_found_with_their_axis(body, value, axis):
    thresholds = found(body)
    assert value in thresholds, thresholds
    if axis.input is not None:
        assert any(a.input == axis.input and (a.dim == axis.dim) for a in thresholds[value]), thresholds[value]


def test_jit_comparison_traces_to_the_launch_argument():
    thresholds = found("""
        BIG: tl.constexpr = 8192

        @triton.jit
        def kernel(X, n_cols, BLOCK: tl.constexpr):
            if n_cols > BIG:
                tl.store(X, 0.0)

        class ModelNew(nn.Module):
            def forward(self, x):
                kernel[(x.shape[0],)](x, x.shape[1], BLOCK=128)
                return x
        """)
    assert thresholds[8192] == {COLS}


def test_constexpr_flag_keyword_is_traced_through_the_launch():
    thresholds = found("""
        @triton.jit
        def kernel(X, N, SPLIT: tl.constexpr):
            pass

        class ModelNew(nn.Module):
            def forward(self, x):
                rows, cols = x.shape
                kernel[(rows,)](x, cols, SPLIT=cols > 4096)
                return x
        """)
    assert thresholds[4096] == {COLS}


def test_numel_threshold_is_a_product():
    thresholds = found("""
        class ModelNew(nn.Module):
            def forward(self, x):
                if x.numel() > (1 << 20):
                    return 1
                return 0
        """)
    assert thresholds[1 << 20] == {ThresholdAxis(input=0, product=True)}


def test_rows_times_cols_is_a_product():
    thresholds = found("""
        class ModelNew(nn.Module):
            def forward(self, x):
                M, N = x.shape
                return 1 if M * N >= 1 << 22 else 0
        """)
    assert all(a.product for a in thresholds[1 << 22])


def test_tables_of_size_ranges():
    thresholds = found("""
        LIMITS = {2048: 128, 16384: 512}

        def pick(n):
            for limit in sorted(LIMITS):
                if n <= limit:
                    return LIMITS[limit]
            return 1024

        class ModelNew(nn.Module):
            def forward(self, x):
                return pick(x.shape[-1])
        """)
    assert {2048, 16384} <= set(thresholds)


def test_bisect_over_a_table():
    thresholds = found("""
        import bisect
        BOUNDS = [1024, 8192, 65536]

        class ModelNew(nn.Module):
            def forward(self, x):
                return bisect.bisect_left(BOUNDS, x.shape[1])
        """)
    assert {1024, 8192, 65536} <= set(thresholds)


def test_programs_per_row_by_floor_division():
    thresholds = found("""
        class ModelNew(nn.Module):
            def forward(self, x):
                splits = max(1, x.shape[1] // 8192)
                return splits
        """)
    # one program up to 8192 columns, two from 16384 (``n // 8192 > 1`` is ``n > 16383``)
    assert 8192 in thresholds and {16383, 16384} & set(thresholds)


def test_heuristics_lambda_on_a_kernel_parameter():
    thresholds = found("""
        @triton.heuristics({"SPLIT": lambda args: args["n_cols"] > 32768})
        @triton.jit
        def kernel(X, n_cols, SPLIT: tl.constexpr):
            pass

        class ModelNew(nn.Module):
            def forward(self, x):
                kernel[(x.shape[0],)](x, x.shape[1])
                return x
        """)
    assert thresholds[32768] == {COLS}


def test_autotune_with_pruning_gives_its_config_sizes():
    thresholds = found("""
        def prune(configs, nargs, **kw):
            return [c for c in configs if c.kwargs["BLOCK"] <= nargs["N"]]

        @triton.autotune(
            configs=[triton.Config({"BLOCK": 1024}, num_warps=4), triton.Config({"BLOCK": 32768}, num_warps=8)],
            key=["N"],
            prune_configs_by={"early_config_prune": prune},
        )
        @triton.jit
        def kernel(X, N, BLOCK: tl.constexpr):
            pass

        class ModelNew(nn.Module):
            def forward(self, x):
                kernel[(1,)](x, x.shape[-1])
                return x
        """)
    assert {1024, 32768} <= set(thresholds)
    assert 8 not in thresholds and 4 not in thresholds


def test_program_id_comparison_is_an_unknown_size():
    thresholds = found("""
        @triton.jit
        def kernel(X):
            pid = tl.program_id(0)
            if pid >= 2048:
                return

        class ModelNew(nn.Module):
            def forward(self, x):
                kernel[(x.shape[0],)](x)
                return x
        """)
    assert thresholds[2048] == set()  # unknown: every size constant is a candidate


def test_unrelated_integers_are_not_thresholds():
    thresholds = found("""
        BLOCK = 128
        NUM_WARPS = 4

        @triton.jit
        def kernel(X, n, BLOCK: tl.constexpr):
            for i in range(64):
                if i == 32:
                    pass
            offs = tl.arange(0, BLOCK)
            tl.store(X + offs, 0.0, mask=offs < n)

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 1000

            def forward(self, x):
                if x.ndim > 2 or x.dtype == torch.float16 or x.element_size() * 4096 > 100000:
                    pass
                if x.stride(-1) != 1:
                    x = x.contiguous()
                kernel[(4,)](x, x.numel(), BLOCK=BLOCK, num_warps=NUM_WARPS, num_stages=3)
                return x * 1
        """)
    assert thresholds == {}, thresholds


def test_bounded_and_tolerant():
    many = "".join(f"        if x.shape[1] > {1000 + 37 * i}:\n            pass\n" for i in range(80))
    body = "class ModelNew(nn.Module):\n    def forward(self, x):\n" + many
    assert len(find_size_thresholds(HEADER + body)) == MAX_FOUND
    assert find_size_thresholds("def broken(:\n") == []
    assert find_size_thresholds("x = 1 << 70\nif x > 2 ** 40: pass\n") == []
