"""Size sets: defaults, extras and generated sets that move every constant; fixed sizes, axis
indices and derived constants respected."""

import math
import textwrap
from pathlib import Path

import pytest
import torch

from kgen.backends.device import Device
from kgen.evals.problem.catalog import catalog
from kgen.evals.problem.format import ProblemError, load_problem, read_problem
from kgen.evals.problem.size_sets import (
    CPU_BEYOND_CAP,
    CPU_LONG_AXIS_CAP,
    CPU_TRIAL_BUDGET,
    cpu_small_set,
    fixed_sizes,
    free_size_names,
    grown_value,
    is_axis_index,
    long_axes,
    movable_sizes,
    shrunk_value,
    unmovable_reasons,
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
    plan = {s.origin: s for s in verification_size_plan(info, Device.CPU)}
    # N = B * S is derived: recomputed in every set (info.cpu_sizes() keeps N = 512)
    assert plan["small"].sizes == {"B": 2, "S": 32, "N": 64, "D": 24, "K": 3}
    assert plan["grown"].sizes == {"B": 3, "S": 33, "N": 99, "D": 25, "K": 5}  # K = 3 moves too now
    assert plan["shrunk"].sizes == {"B": 1, "S": 31, "N": 31, "D": 23, "K": 1}
    assert plan["ones"].sizes == {"B": 1, "S": 1, "N": 1, "D": 1, "K": 1}
    beyond = [s.sizes for s in verification_size_plan(info, Device.CPU) if s.origin == "beyond_default"]
    # every constant the small set shrank is taken past its default once, the others small
    assert {"B": 9, "S": 32, "N": 288, "D": 24, "K": 3} in beyond
    assert {"B": 2, "S": 65, "N": 130, "D": 24, "K": 3} in beyond
    assert {"B": 2, "S": 32, "N": 64, "D": 129, "K": 3} in beyond
    for size_set in verification_size_plan(info, Device.CPU):
        problem = load_problem(info.path, size_set.sizes)
        assert problem.sizes == size_set.sizes
        problem.model_class()(*problem.get_inputs())  # consistent: the shape assertion holds
        assert size_set.generated == (size_set.origin != "small")
    # a combined move carries one-constant fallbacks, tried when the reference cannot run it
    assert {"B": 1, "S": 32, "N": 32, "D": 24, "K": 3} in plan["ones"].fallbacks


def test_cuda_sets_are_defaults_extras_and_generated_moves(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['D']"))
    sets = verification_size_sets(info, Device.CUDA)
    assert sets[0] == {"B": 8, "S": 64, "N": 512, "D": 128, "K": 3}
    assert sets[1] == {"B": 8, "S": 1000, "N": 8000, "D": 128, "K": 3}
    assert sets[2] == {"B": 9, "S": 65, "N": 585, "D": 128, "K": 5}  # D fixed; the rest grow
    assert {"B": 1, "S": 1, "N": 1, "D": 128, "K": 1} in sets
    assert fixed_sizes(info) == ["D"]
    assert free_size_names(info) == ["B", "S", "D", "K"]


def test_a_fixed_size_that_is_not_a_size_constant_is_an_error(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['HEAD_DIM']"))
    with pytest.raises(ProblemError, match="KGEN_FIXED_SIZES names HEAD_DIM"):
        verification_size_sets(info, Device.CPU)


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
    for size_set in verification_size_plan(info, Device.CPU):
        assert size_set.sizes["reduce_dim"] == 1
    assert long_axes(info, info.cpu_sizes(), movable_sizes(info)) == {"dim1"}  # the reduced axis


def test_nothing_to_move_gives_no_duplicate_set(tmp_path):
    info = _write(tmp_path, TOY.replace("{fixed}", "['B', 'S', 'D', 'K']"))
    assert [s.origin for s in verification_size_plan(info, Device.CPU)] == ["small"]


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
    for size_set in verification_size_plan(info, Device.CPU):
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
        for size_set in verification_size_plan(info, Device.CPU):
            if size_set.generated:
                assert all(size_set.sizes[name] == info.cpu_sizes()[name] for name in declared)


def test_cpu_beyond_default_sets_stay_affordable_for_the_interpreter():
    for info in catalog():
        for size_set in verification_size_plan(info, Device.CPU):
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
        grown = [s.sizes for s in verification_size_plan(info, Device.CUDA) if s.origin == "grown"]
        for sizes in grown:
            growth = math.prod(sizes[k] / info.sizes[k] for k in sizes if info.sizes[k])
            assert 1.0 < growth < 2.5, (info.name, sizes)


TUPLES = """
    import torch
    import torch.nn as nn

    batch_size = 16
    in_channels = 8
    out_channels = 16
    height = width = 20
    kernel_size = (3, 3)
    stride = (2, 1)
    bias_shape = (out_channels, 1, 1)
    dims = (0, 2)
    sum_dim = 1
    hardtanh_max = 1
    hardtanh_min = -1
    scale = 2.0

    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, stride, bias_shape):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride)
            self.bias = nn.Parameter(torch.randn(bias_shape))

        def forward(self, x):
            return torch.sum(self.conv(x) + self.bias, dim=sum_dim, keepdim=True).clamp(hardtanh_min, hardtanh_max)

    def get_inputs():
        return [torch.randn(batch_size, in_channels, height, width)]

    def get_init_inputs():
        return [in_channels, out_channels, kernel_size, stride, bias_shape]
"""


def test_tuple_elements_move_together_and_fall_back_by_name(tmp_path):
    info = _write(tmp_path, TUPLES)
    plan = {s.origin: s for s in verification_size_plan(info, Device.CUDA)}
    grown = plan["grown"].sizes
    assert (grown["kernel_size[0]"], grown["kernel_size[1]"]) == (5, 5)  # a square kernel stays square
    assert (grown["stride[0]"], grown["stride[1]"]) == (3, 1)  # a unit step stays one
    for fallback in plan["grown"].fallbacks:
        assert fallback["kernel_size[0]"] == fallback["kernel_size[1]"]
    moved = [{k for k in f if f[k] != info.sizes[k] and k not in info.derived_sizes} for f in plan["grown"].fallbacks]
    assert {"kernel_size[0]", "kernel_size[1]"} in moved
    assert {"height"} in moved and {"width"} in moved  # a chain's names are separate constants


def test_axis_tuples_broadcast_ones_and_value_bounds_never_move(tmp_path):
    info = _write(tmp_path, TUPLES)
    assert movable_sizes(info) == [
        "batch_size", "in_channels", "out_channels", "height", "width", "kernel_size[0]", "kernel_size[1]", "stride[0]",
    ]
    reasons = unmovable_reasons(info)
    assert reasons["dims[0]"] == reasons["dims[1]"] == reasons["sum_dim"] == "axis index"
    assert "broadcast" in reasons["bias_shape[1]"] and "derived" in reasons["bias_shape[0]"]
    assert "bound" in reasons["hardtanh_max"]
    assert "hardtanh_min" not in info.sizes and "scale" not in info.sizes
    for device in Device:
        for size_set in verification_size_plan(info, device):
            for key in ("dims[0]", "dims[1]", "sum_dim", "hardtanh_max", "bias_shape[1]", "stride[1]"):
                assert size_set.sizes[key] == info.sizes[key], (device, size_set.origin, key)


def test_derived_tuple_elements_follow_their_base_in_every_set(tmp_path):
    info = _write(tmp_path, TUPLES)
    for device in Device:
        for size_set in verification_size_plan(info, device):
            assert size_set.sizes["bias_shape[0]"] == size_set.sizes["out_channels"]
            problem = load_problem(info.path, size_set.sizes)
            assert problem.sizes == size_set.sizes
            if device == "cpu" and size_set.origin != "beyond_default":
                torch.manual_seed(0)
                problem.model_class(*problem.get_init_inputs())(*problem.get_inputs())  # the bias broadcasts


def test_derived_constants_keep_their_relation_on_the_cpu_and_when_moved(tmp_path):
    info = _write(tmp_path, """
        import torch
        import torch.nn as nn

        M = 512
        K = M * 2
        in_channels = 256
        groups = in_channels

        class Model(nn.Module):
            def __init__(self, in_channels, groups):
                super().__init__()
                self.conv = nn.Conv1d(in_channels, in_channels, 3, groups=groups)

            def forward(self, x, w):
                assert w.shape == (M, K)
                return self.conv(x)

        def get_inputs():
            return [torch.randn(2, in_channels, 8), torch.randn(M, 2 * M)]

        def get_init_inputs():
            return [in_channels, groups]
    """)
    assert free_size_names(info) == ["M", "in_channels"]
    for device in Device:
        for size_set in verification_size_plan(info, device):
            sizes = size_set.sizes
            assert sizes["K"] == 2 * sizes["M"] and sizes["groups"] == sizes["in_channels"], (device, size_set)
            for fallback in size_set.fallbacks:
                assert fallback["K"] == 2 * fallback["M"] and fallback["groups"] == fallback["in_channels"]
    cpu = {s.origin: s.sizes for s in verification_size_plan(info, Device.CPU)}
    # M walks the largest input's rows (its innermost length K = 2 M): the channels give way first
    assert cpu["small"] == {"M": 32, "K": 64, "in_channels": 8, "groups": 8}
    problem = load_problem(info.path, cpu["grown"])
    problem.model_class(*problem.get_init_inputs())(*problem.get_inputs())


def test_a_fixed_tuple_name_fixes_every_element(tmp_path):
    body = TUPLES + "\n    KGEN_FIXED_SIZES = ['kernel_size']\n"
    info = _write(tmp_path, body)
    assert fixed_sizes(info) == ["kernel_size[0]", "kernel_size[1]"]
    for size_set in verification_size_plan(info, Device.CUDA):
        assert (size_set.sizes["kernel_size[0]"], size_set.sizes["kernel_size[1]"]) == (3, 3)
    info = _write(tmp_path, TUPLES + "\n    KGEN_FIXED_SIZES = ['stride[0]']\n", name="one.py")
    assert fixed_sizes(info) == ["stride[0]"]
    info = _write(tmp_path, TUPLES + "\n    KGEN_FIXED_SIZES = ['kernel']\n", name="typo.py")
    with pytest.raises(ProblemError, match="KGEN_FIXED_SIZES names kernel"):
        verification_size_sets(info, Device.CPU)


def test_a_long_axis_in_a_tuple_is_shrunk_and_then_taken_past_its_default(tmp_path):
    info = _write(tmp_path, """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.dim = dim

            def forward(self, x):
                return torch.cumsum(x, dim=self.dim)

        batch_size = 32768
        input_shape = (32768,)
        dim = 1

        def get_inputs():
            return [torch.rand(batch_size, *input_shape)]

        def get_init_inputs():
            return [dim]
    """)
    plan = verification_size_plan(info, Device.CPU)
    # The rows give way to the CPU trial budget; the scanned axis keeps its small length.
    assert plan[0].sizes == {"batch_size": 32, "input_shape[0]": 128, "dim": 1}
    beyond = [s.sizes for s in plan if s.origin == "beyond_default"]
    # The scanned axis goes past its default; the other constants give way to the CPU element budget.
    assert any(s["input_shape[0]"] == CPU_LONG_AXIS_CAP + 1 and s["dim"] == 1 for s in beyond)
    assert any(s["batch_size"] == CPU_BEYOND_CAP + 1 and s["dim"] == 1 for s in beyond)
    assert all(s.sizes["dim"] == 1 for s in plan)


def test_axis_index_recognises_names_elements_and_leaves_sizes():
    assert is_axis_index("dim", 1) and is_axis_index("reduce_dim", 2) and is_axis_index("sum_dim", 1)
    assert is_axis_index("dims[1]", 2) and is_axis_index("axes[0]", 0) and is_axis_index("softmax_axis", 3)
    assert is_axis_index("perm_axes[5]", 5, length=6)  # a permutation of six axes
    assert not is_axis_index("dim", 16384) and not is_axis_index("dim[0]", 4096)
    assert not is_axis_index("hidden_dim", 2) and not is_axis_index("head_dim", 4) and not is_axis_index("dim1", 1)


KERNELBENCH_LEVEL1 = Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench" / "level1"


@pytest.mark.parametrize("name", ["89_cumsum", "90_cumprod", "91_cumsum_reverse", "93_masked_cumsum",
                                  "23_Softmax", "47_Sum_reduction_over_a_dimension"])
def test_the_cpu_small_set_fits_the_trial_budget_keeping_the_walked_axis_and_the_capped_grid_sets(name):
    """Most of a CPU verification's calls run at the small set, and the interpreter walks every row
    step by step: the small set holds at most CPU_TRIAL_BUDGET elements, the rows giving way while
    the axis a kernel walks keeps its length (or, where it must shrink too, stays the longest), and the sets past the defaults still reach a long
    row and many rows (a grid capped at 1024 programs, a row capped at 4096)."""
    info = read_problem(next(KERNELBENCH_LEVEL1.glob(f"{name}.py")))
    plan = verification_size_plan(info, Device.CPU)
    small = plan[0].sizes
    movable = movable_sizes(info)
    long = long_axes(info, info.cpu_sizes(), movable)
    batch_like = [small[n] for n in movable if n not in long]
    assert long and all(small[n] == info.cpu_sizes()[n] or small[n] >= max(batch_like, default=1) for n in long), (
        small, long)
    problem = load_problem(info.path, small)
    inputs = [v for v in problem.get_inputs() if isinstance(v, torch.Tensor)]
    outputs = problem.model_class(*problem.get_init_inputs())(*inputs)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    assert sum(v.numel() for v in (*inputs, *outputs)) <= CPU_TRIAL_BUDGET
    beyond = [s.sizes for s in plan if s.origin == "beyond_default"]
    for n in movable:
        cap = CPU_LONG_AXIS_CAP if n in long else CPU_BEYOND_CAP
        assert any(s[n] > min(info.sizes[n], cap) for s in beyond), (n, beyond)


@pytest.mark.parametrize("name", ["89_cumsum", "23_Softmax", "36_RMSNorm_", "47_Sum_reduction_over_a_dimension"])
def test_the_cpu_sizes_shown_are_the_small_set_a_cpu_verification_compares_with(name):
    """`kgen problems show` reads :func:`cpu_small_set`: for a KernelBench file it is the
    budgeted set, not ``cpu_sizes()``'s plain halving (128 x 128 for a scan, verified as 32 x 128)."""
    info = read_problem(next(KERNELBENCH_LEVEL1.glob(f"{name}.py")))
    assert cpu_small_set(info) == verification_size_plan(info, Device.CPU)[0].sizes
    catalog_info = next(i for i in catalog() if i.name == "rmsnorm_forward")
    assert cpu_small_set(catalog_info) == verification_size_plan(catalog_info, Device.CPU)[0].sizes
