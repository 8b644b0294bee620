"""Size sets: defaults, extras and generated sets that move every constant; fixed sizes, axis
indices and derived constants respected."""

import math
import textwrap

import pytest
import torch

from kgen.evals.catalog import catalog
from kgen.evals.problem import ProblemError, load_problem, read_problem
from kgen.evals.size_sets import (
    CPU_BEYOND_CAP,
    fixed_sizes,
    free_size_names,
    grown_value,
    long_axes,
    movable_sizes,
    shrunk_value,
    verification_size_plan,
    verification_size_sets,
)

#: Catalog problems whose generated odd sets must keep some sizes (KGEN_FIXED_SIZES to add):
#: rope_forward's rotate-half splits the head dim in two halves (its reference raises on an
#: odd one); causal attention runs at any head dim, but real head dims are multiples of 16 and
#: an odd one (129 at the default sizes) forces a 256-wide tile on every kernel.
RECOMMENDED_FIXED = {"rope_forward": ["HEAD_DIM"], "causal_attention_forward": ["HEAD_DIM"]}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small tensors: thread start-up and contention cost more than the work on a busy CI box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _write(tmp_path, body: str, name="toy.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return read_problem(path)


TOY = """
    import torch
    import torch.nn as nn

    B = 8
    S = 64
    N = B * S
    D = 128
    K = 3
    KGEN_SMALL_SIZES = {"B": 2, "S": 32, "D": 24}
    KGEN_EXTRA_SIZES = [{"S": 1000}]
    KGEN_FIXED_SIZES = {fixed}

    class Model(nn.Module):
        def forward(self, x):
            assert x.shape == (N, D), (x.shape, N, D)
            return x * 2

    def get_inputs():
        return [torch.randn(B * S, D)]

    def get_init_inputs():
        return []
"""


def _is_power_of_two(v: int) -> bool:
    return v & (v - 1) == 0


def test_cpu_plan_moves_every_constant_up_down_to_one_and_past_its_default(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "[]"))
    plan = {s.origin: s for s in verification_size_plan(info, "cpu")}
    # N = B * S is derived: recomputed in every set (info.cpu_sizes() keeps N = 512)
    assert plan["small"].sizes == {"B": 2, "S": 32, "N": 64, "D": 24, "K": 3}
    assert plan["grown"].sizes == {"B": 3, "S": 33, "N": 99, "D": 25, "K": 5}  # K = 3 moves too now
    assert plan["shrunk"].sizes == {"B": 1, "S": 31, "N": 31, "D": 23, "K": 1}
    assert plan["ones"].sizes == {"B": 1, "S": 1, "N": 1, "D": 1, "K": 1}
    beyond = [s.sizes for s in verification_size_plan(info, "cpu") if s.origin == "beyond_default"]
    # every constant the small set shrank is taken past its default once, the others small
    assert {"B": 9, "S": 32, "N": 288, "D": 24, "K": 3} in beyond
    assert {"B": 2, "S": 65, "N": 130, "D": 24, "K": 3} in beyond
    assert {"B": 2, "S": 32, "N": 64, "D": 129, "K": 3} in beyond
    for size_set in verification_size_plan(info, "cpu"):
        problem = load_problem(info.path, size_set.sizes)
        assert problem.sizes == size_set.sizes
        problem.model_class()(*problem.get_inputs())  # consistent: the shape assertion holds
        assert size_set.generated == (size_set.origin != "small")
    # a combined move carries one-constant fallbacks, tried when the reference cannot run it
    assert {"B": 1, "S": 32, "N": 32, "D": 24, "K": 3} in plan["ones"].fallbacks


def test_cuda_sets_are_defaults_extras_and_generated_moves(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['D']"))
    sets = verification_size_sets(info, "cuda")
    assert sets[0] == {"B": 8, "S": 64, "N": 512, "D": 128, "K": 3}
    assert sets[1] == {"B": 8, "S": 1000, "N": 8000, "D": 128, "K": 3}
    assert sets[2] == {"B": 9, "S": 65, "N": 585, "D": 128, "K": 5}  # D fixed; the rest grow
    assert {"B": 1, "S": 1, "N": 1, "D": 128, "K": 1} in sets
    assert fixed_sizes(info) == ["D"]
    assert free_size_names(info) == ["B", "S", "D", "K"]


def test_a_fixed_size_that_is_not_a_size_constant_is_an_error(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['HEAD_DIM']"))
    with pytest.raises(ProblemError, match="KGEN_FIXED_SIZES names HEAD_DIM"):
        verification_size_sets(info, "cpu")


def test_axis_indices_are_never_moved(tmp_path):
    info = _write(tmp_path, """
        import torch
        import torch.nn as nn

        batch_size = 16
        dim1 = 256
        reduce_dim = 1

        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.dim = dim

            def forward(self, x):
                return torch.sum(x, dim=self.dim, keepdim=True)

        def get_inputs():
            return [torch.randn(batch_size, dim1, 8)]

        def get_init_inputs():
            return [reduce_dim]
    """)
    assert movable_sizes(info) == ["batch_size", "dim1"]
    for size_set in verification_size_plan(info, "cpu"):
        assert size_set.sizes["reduce_dim"] == 1
    assert long_axes(info, info.cpu_sizes(), movable_sizes(info)) == {"dim1"}  # the reduced axis


def test_nothing_to_move_gives_no_duplicate_set(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['B', 'S', 'D', 'K']"))
    assert [s.origin for s in verification_size_plan(info, "cpu")] == ["small"]


def test_moved_values_differ_and_grown_ones_are_odd():
    for value in [1, 2, 3, 15, 16, 17, 64, 127, 128, 4096]:
        assert grown_value(value) > value and grown_value(value) % 2 == 1
        if value > 1:
            assert 1 <= shrunk_value(value) < value
        assert grown_value(value) - value <= 2
    assert shrunk_value(1) == 1


def _numel(problem) -> int:
    torch.manual_seed(0)
    return sum(x.numel() for x in problem.get_inputs() if torch.is_tensor(x))


@pytest.mark.parametrize("info", catalog(), ids=lambda info: info.name)
def test_every_catalog_reference_runs_on_its_generated_cpu_sets(info):
    small = load_problem(info.path, info.cpu_sizes())
    for size_set in verification_size_plan(info, "cpu"):
        if size_set.origin in ("small", "beyond_default"):
            continue
        problem = load_problem(info.path, size_set.sizes)
        assert _numel(problem) <= 3 * _numel(small) + 1000, size_set
        torch.manual_seed(0)
        inputs = problem.get_inputs()
        model = problem.model_class(*problem.get_init_inputs()).double()
        up = [x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            outputs = model(*up)
        outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
        assert all(torch.isfinite(o).all() for o in outputs), size_set


def test_plan_uses_the_declared_fixed_sizes_once_the_catalog_has_them():
    for info in catalog():
        declared = fixed_sizes(info)
        for size_set in verification_size_plan(info, "cpu"):
            if size_set.generated:
                assert all(size_set.sizes[name] == info.cpu_sizes()[name] for name in declared)


def test_cpu_beyond_default_sets_stay_affordable_for_the_interpreter():
    for info in catalog():
        for size_set in verification_size_plan(info, "cpu"):
            if size_set.origin == "beyond_default":
                moved = [k for k in size_set.sizes if size_set.sizes[k] != info.cpu_sizes()[k]]
                assert len(moved) >= 1
                for name in moved:
                    assert size_set.sizes[name] > min(info.sizes[name], CPU_BEYOND_CAP) or name not in free_size_names(info)


def test_rope_needs_its_head_dim_fixed():
    """Why RECOMMENDED_FIXED names rope_forward: an odd head dim breaks rotate-half itself."""
    info = next(info for info in catalog() if info.name == "rope_forward")
    sizes = {**info.cpu_sizes(), "HEAD_DIM": grown_value(info.cpu_sizes()["HEAD_DIM"])}
    problem = load_problem(info.path, sizes)
    with pytest.raises(RuntimeError):
        problem.model_class()(*problem.get_inputs())


def test_cuda_grown_sets_stay_close_to_the_defaults():
    for info in catalog():
        grown = [s.sizes for s in verification_size_plan(info, "cuda") if s.origin == "grown"]
        for sizes in grown:
            growth = math.prod(sizes[k] / info.sizes[k] for k in sizes if info.sizes[k])
            assert 1.0 < growth < 2.5, (info.name, sizes)
