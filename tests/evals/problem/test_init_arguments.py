"""Arguments other than sizes: which a problem hands its model, the values each is varied to,
and the problem loaded with one set (evals/problem/init_arguments.py, argument_sets.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from kgen.evals.problem.argument_sets import argument_plan
from kgen.evals.problem.format import load_problem, parse_problem, read_problem
from kgen.evals.problem.init_arguments import find_arguments, rebind_arguments, variations

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LEVEL1 = FIXTURES / "kernelbench" / "level1"
LEVEL2 = FIXTURES / "kernelbench" / "level2"
PROBLEMS = FIXTURES / "problems"


def _found(path: Path) -> dict[str, tuple]:
    return {a.key: (a.name, a.default, a.role) for a in find_arguments(parse_problem(path))}


def test_a_named_axis_constant_and_a_literal_axis_are_found_with_the_parameter_they_feed():
    assert _found(LEVEL1 / "47_Sum_reduction_over_a_dimension.py") == {"reduce_dim": ("reduce_dim", 1, "axis")}
    # ``return [1]``: the literal is named by Model.__init__'s parameter, ``dim``, and keyed by its place
    assert _found(LEVEL1 / "48_Mean_reduction_over_a_dimension.py") == {
        "get_init_inputs()[0]": ("dim", 1, "axis")
    }


def test_floats_are_scales_and_clamp_bounds_are_bounds_sizes_are_not_arguments():
    found = _found(LEVEL2 / "22_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish.py")
    assert found == {
        "scale_factor": ("scale_factor", 2.0, "scale"),
        "clamp_min": ("clamp_min", -10.0, "bound"),
        "clamp_max": ("clamp_max", 10.0, "bound"),
    }
    assert _found(LEVEL1 / "31_ELU.py") == {"get_init_inputs()[0]": ("alpha", 1.0, "scale")}
    assert _found(PROBLEMS / "rt3_row_rms.py") == {"eps": ("eps", 1e-6, "scale")}


@pytest.mark.parametrize("name", [
    "36_RMSNorm_.py",  # eps is a constructor default the file never passes: ModelNew need not take it
    "54_conv_standard_3D__square_input__square_kernel.py",  # channels and kernel sizes: size sets move them
    "41_Max_Pooling_1D.py",  # return_indices=False: a bool switches the output's structure, left alone
    "19_ReLU.py",
])
def test_problems_with_only_sizes_switches_or_unpassed_defaults_have_no_arguments(name):
    assert _found(LEVEL1 / name) == {}


def test_an_integer_bound_pair_is_found_as_integers():
    found = _found(LEVEL2 / "10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py")
    assert found == {"hardtanh_min": ("hardtanh_min", -1, "bound"), "hardtanh_max": ("hardtanh_max", 1, "bound")}


def test_a_float_handed_to_forward_is_an_argument_too(tmp_path):
    path = tmp_path / "scaled_add.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x, alpha):\n        return x * alpha\n\n"
        "n = 8\n\ndef get_inputs():\n    return [torch.randn(n), 0.25]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert _found(path) == {"get_inputs()[1]": ("alpha", 0.25, "scale")}


def _variations(path: Path, rank: int | None = None) -> list[tuple[list, bool]]:
    arguments = find_arguments(parse_problem(path))
    return [(v.values, v.equivalent) for a in arguments for v in variations(a, arguments, rank)]


def test_a_scale_moves_by_factors_of_ten_both_ways_keeping_its_sign():
    (up, _), (down, _) = _variations(PROBLEMS / "rt3_row_rms.py")
    assert up == [1e-5, 1e-4, 1e-2, 1.0] and down == [1e-7, 1e-8, 1e-10, 1e-12]
    ladders = _variations(LEVEL2 / "100_ConvTranspose3d_Clamp_Min_Divide.py")
    assert all(v < 0 for v in ladders[0][0] + ladders[1][0])  # min_value = -1.0 stays negative


def test_bounds_keep_their_order_and_integers_stay_integers():
    ladders = _variations(LEVEL2 / "10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py")
    # hardtanh_min = -1: only further down (towards zero it would be 0, a changed sign); max = 1 likewise up
    assert ladders == [([-10, -100], False), ([10, 100], False)]
    # clamp_min = 0.0 below clamp_max = 1.0: a half either way; clamp_max can go up, or down while above 0
    ladders = _variations(LEVEL2 / "85_Conv2d_GroupNorm_Scale_MaxPool_Clamp.py")
    assert ladders[0] == ([0.5], False) and ladders[1] == ([-0.5], False)
    assert ladders[2][0] == [10.0, 100.0, 1e4, 1e6] and ladders[3][0] == [0.1, 0.01, 1e-4, 1e-6]
    assert all(isinstance(v, int) for values, _ in _variations(LEVEL2 / "53_Gemm_Scaling_Hardtanh_GELU.py")[2:] for v in values)


def test_an_axis_moves_to_every_other_axis_and_is_also_written_negative():
    assert _variations(PROBLEMS / "rt4_sum_dim.py", rank=3) == [([0], False), ([2], False), ([-2], True)]
    assert _variations(LEVEL1 / "47_Sum_reduction_over_a_dimension.py", rank=None)[:2] == [([0], False), ([2], False)]


def test_a_negative_axis_is_varied_to_the_others_and_its_positive_form(tmp_path):
    path = tmp_path / "softmax_last.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n        self.dim = dim\n"
        "    def forward(self, x):\n        return torch.softmax(x, dim=self.dim)\n\n"
        "def get_inputs():\n    return [torch.randn(2, 3, 4)]\n\ndef get_init_inputs():\n    return [-1]\n"
    )
    assert _variations(path, rank=3) == [([0], False), ([1], False), ([2], True)]


def test_the_plan_reads_the_inputs_rank_from_the_reference():
    info = read_problem(PROBLEMS / "rt4_sum_dim.py")
    plan = argument_plan(info, info.cpu_sizes())
    assert [(v.key, v.values, v.equivalent) for v in plan] == [
        ("reduce_dim", [0], False), ("reduce_dim", [2], False), ("reduce_dim", [-2], True)
    ]
    assert argument_plan(read_problem(LEVEL1 / "19_ReLU.py"), {}) == []


def test_a_constant_rebound_follows_into_every_use_and_a_literal_is_replaced_where_it_stands(tmp_path):
    path = tmp_path / "dim_shapes_inputs.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def __init__(self, dim, eps):\n        super().__init__()\n"
        "        self.dim, self.eps = dim, eps\n"
        "    def forward(self, x):\n        return x.sum(self.dim) + self.eps\n\n"
        "n = 6\ndim = 1\nshape = [4, 5, n]\n"
        "def get_inputs():\n    return [torch.randn(*shape[:dim + 1])]\n\n"
        "def get_init_inputs():\n    return [dim, 1e-5]\n"
    )
    problem = load_problem(path, {"n": 7}, {"dim": 2, "get_init_inputs()[1]": 0.5})
    assert problem.get_init_inputs() == [2, 0.5]
    assert problem.get_inputs()[0].shape == (4, 5, 7)  # the input shape follows the rebound dim and size
    assert problem.arguments == {"dim": 2, "get_init_inputs()[1]": 0.5}
    plain = load_problem(path, {"n": 7})
    assert plain.get_init_inputs() == [1, 1e-5] and plain.arguments == {}


def test_rebinding_nothing_leaves_the_tree_alone():
    tree = parse_problem(LEVEL1 / "47_Sum_reduction_over_a_dimension.py")
    assert rebind_arguments(tree, {}) is tree
    rebound = rebind_arguments(tree, {"reduce_dim": 0})
    assert ast.unparse(rebound).count("reduce_dim = 0") == 1 and ast.unparse(tree).count("reduce_dim = 0") == 0


def test_every_varied_value_of_the_fixture_problems_loads_and_runs():
    for name in ("rt4_leaky_relu", "rt4_rmsnorm_eps", "rt4_tanh_temperature", "rt4_clamp_bounds"):
        info = read_problem(PROBLEMS / f"{name}.py")
        for variation in argument_plan(info, info.cpu_sizes()):
            problem = load_problem(info.path, info.cpu_sizes(), {variation.key: variation.values[0]})
            out = problem.model_class(*problem.get_init_inputs())(*problem.get_inputs())
            assert torch.isfinite(out).all(), (name, variation)
