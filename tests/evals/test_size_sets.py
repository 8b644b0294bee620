"""Size sets: defaults, extras and a generated odd set; fixed sizes and derived constants respected."""

import math
import textwrap

import pytest
import torch

from kgen.evals.catalog import catalog
from kgen.evals.problem import ProblemError, load_problem, read_problem
from kgen.evals.size_sets import (
    MIN_PERTURBED,
    fixed_sizes,
    free_size_names,
    odd_sizes,
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


def test_cpu_sets_are_the_small_set_and_odd_ones_either_side(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "[]"))
    plan = verification_size_plan(info, "cpu")
    assert [s.origin for s in plan] == ["small", "odd", "odd"]
    small, odd, grown = plan[0].sizes, plan[1].sizes, plan[2].sizes
    assert grown == {"B": 2, "S": 33, "N": 66, "D": 25, "K": 3}  # one past the small set
    # N = B * S is derived: recomputed in every set (info.cpu_sizes() keeps N = 512)
    assert small == {"B": 2, "S": 32, "N": 64, "D": 24, "K": 3}
    # constants >= 16 move to a nearby odd value; small ones stay
    assert odd == {"B": 2, "S": 31, "N": 62, "D": 23, "K": 3}
    for sizes in (small, odd, grown):
        problem = load_problem(info.path, sizes)
        assert problem.sizes == sizes
        problem.model_class()(*problem.get_inputs())  # consistent: the shape assertion holds
    assert plan[1].generated and plan[2].generated and not plan[0].generated


def test_cuda_sets_are_defaults_extras_and_a_grown_odd_set(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['D']"))
    sets = verification_size_sets(info, "cuda")
    assert sets[0] == {"B": 8, "S": 64, "N": 512, "D": 128, "K": 3}
    assert sets[1] == {"B": 8, "S": 1000, "N": 8000, "D": 128, "K": 3}
    assert sets[2] == {"B": 8, "S": 65, "N": 520, "D": 128, "K": 3}  # D fixed; S grows past a block
    assert fixed_sizes(info) == ["D"]
    assert free_size_names(info) == ["B", "S", "D", "K"]


def test_a_fixed_size_that_is_not_a_size_constant_is_an_error(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['HEAD_DIM']"))
    with pytest.raises(ProblemError, match="KGEN_FIXED_SIZES names HEAD_DIM"):
        verification_size_sets(info, "cpu")


def test_nothing_to_move_gives_no_duplicate_set(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['S', 'D']").replace("KGEN_SMALL_SIZES", "_X"))
    # small sizes = defaults with S and D fixed and B, K < 16: the odd set would be the same
    assert [s.origin for s in verification_size_plan(info, "cpu")] == ["small"]


def test_odd_values_are_odd_and_never_powers_of_two():
    base = {name: v for name, v in zip("abcdefgh", [16, 17, 64, 96, 127, 128, 4096, 15], strict=True)}
    for grow in (True, False):
        odd = odd_sizes(base, base, grow=grow)
        for name, value in odd.items():
            if base[name] >= MIN_PERTURBED:
                assert value % 2 == 1 and not _is_power_of_two(value) and value != base[name]
                assert abs(value - base[name]) <= 2
            else:
                assert value == base[name]


def _numel(problem) -> int:
    torch.manual_seed(0)
    return sum(x.numel() for x in problem.get_inputs() if torch.is_tensor(x))


@pytest.mark.parametrize("info", catalog(), ids=lambda info: info.name)
def test_every_catalog_reference_runs_on_its_odd_cpu_set(info):
    fixed = set(fixed_sizes(info)) | set(RECOMMENDED_FIXED.get(info.name, []))
    small = info.cpu_sizes()
    odd = odd_sizes(small, free_size_names(info), fixed, grow=False)
    assert odd != {k: small[k] for k in odd}, "the odd set must differ from the small set"
    problem = load_problem(info.path, odd)
    assert _numel(problem) <= 1.5 * _numel(load_problem(info.path, small))
    for name, value in odd.items():
        if name not in fixed and small[name] >= MIN_PERTURBED:
            assert value % 2 == 1
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    model = problem.model_class(*problem.get_init_inputs()).double()
    up = [x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        outputs = model(*up)
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    assert all(torch.isfinite(o).all() and o.abs().sum() > 0 for o in outputs)


def test_plan_uses_the_declared_fixed_sizes_once_the_catalog_has_them():
    for info in catalog():
        odd = [s for s in verification_size_plan(info, "cpu") if s.generated]
        declared = fixed_sizes(info)
        for size_set in odd:
            assert all(size_set.sizes[name] == info.cpu_sizes()[name] for name in declared)


def test_rope_needs_its_head_dim_fixed():
    """Why RECOMMENDED_FIXED names rope_forward: an odd head dim breaks rotate-half itself."""
    info = next(info for info in catalog() if info.name == "rope_forward")
    odd = odd_sizes(info.cpu_sizes(), free_size_names(info), fixed=(), grow=False)
    assert odd["HEAD_DIM"] % 2 == 1
    problem = load_problem(info.path, odd)
    with pytest.raises(RuntimeError):
        problem.model_class()(*problem.get_inputs())


def test_cuda_odd_sets_stay_close_to_the_defaults():
    for info in catalog():
        odd = [s.sizes for s in verification_size_plan(info, "cuda") if s.generated]
        for sizes in odd:
            growth = math.prod(sizes[k] / info.sizes[k] for k in sizes)
            assert 1.0 < growth < 1.5, (info.name, sizes)
