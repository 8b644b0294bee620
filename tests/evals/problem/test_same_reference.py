"""evals/problem/same_reference.py: whether another problem's reference computes this one's.

Pairs of real files in several styles: unmodified KernelBench level-1 files against kgen's
catalog problems, and small problem files written here for the cases KernelBench has no file
for (a parameter under another name, a difference only on negative inputs, a huge size)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import ProblemError, read_problem
from kgen.evals.problem.same_reference import (
    SCREEN_SIZE_CAP,
    ProblemReference,
    reference_difference,
    screen_sizes,
    signature,
)

LEVEL1 = Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench" / "level1"


def level1(name: str):
    return read_problem(LEVEL1 / f"{name}.py")


def problem_file(tmp_path: Path, name: str, init: str, forward: str, inputs: str,
                 init_inputs: str = "[]", sizes: str = "batch_size = 8\ndim = 32") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        f"{sizes}\n\n"
        "class Model(nn.Module):\n"
        f"    def __init__(self{init}):\n"
        "        super().__init__()\n"
        f"{forward}\n\n"
        f"def get_inputs():\n    return {inputs}\n\n"
        f"def get_init_inputs():\n    return {init_inputs}\n"
    )
    return path


@pytest.mark.parametrize(("problem", "catalog_problem"), [
    ("23_Softmax", "softmax"),             # torch.softmax(x, dim=1) vs exp(x - max) / sum over dim -1
    ("88_MinGPTNewGelu", "gelu"),          # the tanh formula by hand vs F.gelu(approximate="tanh")
])
def test_two_spellings_of_one_operation_are_the_same_reference(problem, catalog_problem):
    assert reference_difference(level1(problem), resolve_problem(catalog_problem)) == ""


#: the catalog problems written in KernelBench level 1's own spelling of an operation the catalog
#: covers (an axis argument, exact GELU, RMSNorm over dim 1, nn.LayerNorm, the mean loss)
LEVEL1_SPELLINGS = [
    ("24_LogSoftmax", "log_softmax"),
    ("26_GELU_", "gelu_exact"),
    ("36_RMSNorm_", "rmsnorm_channels"),
    ("40_LayerNorm", "layernorm_trailing"),
    ("47_Sum_reduction_over_a_dimension", "sum_dim"),
    ("89_cumsum", "cumsum_dim"),
    ("95_CrossEntropyLoss", "cross_entropy_mean"),
    ("48_Mean_reduction_over_a_dimension", "mean_dim"),
    ("49_Max_reduction_over_a_dimension", "max_dim"),
    ("53_Min_reduction_over_a_dimension", "min_dim"),
    ("91_cumsum_reverse", "cumsum_reverse"),
    ("92_cumsum_exclusive", "cumsum_exclusive"),
]


@pytest.mark.parametrize(("problem", "catalog_problem"), LEVEL1_SPELLINGS)
def test_each_level1_spelling_has_its_catalog_twin(problem, catalog_problem):
    assert reference_difference(level1(problem), resolve_problem(catalog_problem)) == ""


@pytest.mark.parametrize(("problem", "catalog_problem", "why"), [
    ("91_cumsum_reverse", "cumsum_dim", "output 0 differs"),      # the scan from the other end
    ("92_cumsum_exclusive", "cumsum_dim", "output 0 differs"),    # shifted by one element
    ("88_MinGPTNewGelu", "gelu_exact", "output 0 differs"),       # tanh GELU vs exact: 1e-4 apart
    ("48_Mean_reduction_over_a_dimension", "sum_dim", "has shape (16, 1, 15), not (16, 15)"),  # keepdim (and a mean)
    ("23_Softmax", "log_softmax", "takes 1 input and 1 init argument, where this problem takes 1 and 0"),
    ("49_Max_reduction_over_a_dimension", "sum_dim", "has shape (16, 1, 15), not (16, 15)"),
    ("53_Min_reduction_over_a_dimension", "max_dim", "output 0 differs"),
    ("49_Max_reduction_over_a_dimension", "min_dim", "output 0 differs"),
    ("89_cumsum", "cumsum_reverse", "output 0 differs"),
    ("89_cumsum", "cumsum_exclusive", "output 0 differs"),
    ("91_cumsum_reverse", "cumsum_exclusive", "output 0 differs"),
])
def test_level1_near_misses_of_the_new_spellings_are_told_apart(problem, catalog_problem, why):
    assert why in reference_difference(level1(problem), resolve_problem(catalog_problem))


@pytest.mark.parametrize(("problem", "catalog_problem", "why"), [
    ("26_GELU_", "gelu", "output 0 differs"),                    # exact GELU vs tanh GELU: 1e-4 apart
    ("19_ReLU", "gelu", "output 0 differs"),
    ("95_CrossEntropyLoss", "cross_entropy_forward", "has shape (16,), not ()"),  # mean vs per row
    ("24_LogSoftmax", "softmax", "takes 1 input and 0 init arguments, where this problem takes 1 and 1"),
    ("36_RMSNorm_", "rmsnorm_forward", "takes 2 inputs and 1 init argument, where this problem takes 1 and 2"),
    ("1_Square_matrix_multiplication_", "cross_entropy_forward", "fails on these inputs"),
])
def test_different_operations_or_interfaces_are_told_apart_with_the_reason(problem, catalog_problem, why):
    assert why in reference_difference(level1(problem), resolve_problem(catalog_problem))


def test_a_difference_only_on_negative_inputs_is_found_though_the_problem_draws_rand(tmp_path):
    # torch.rand is all positive: ReLU and the identity agree on every input the problem draws
    relu = read_problem(problem_file(tmp_path, "relu", "", "    def forward(self, x):\n        return torch.relu(x)",
                                     "[torch.rand(batch_size, dim)]"))
    identity = read_problem(problem_file(tmp_path, "identity", "", "    def forward(self, x):\n        return x * 1.0",
                                         "[torch.rand(batch_size, dim)]"))
    assert "output 0 differs" in reference_difference(relu, identity)
    assert reference_difference(relu, relu) == ""


def test_parameters_are_loaded_by_name_so_other_names_do_not_serve(tmp_path):
    forward = "    def forward(self, x):\n        return x * self.{}"
    small = "batch_size = 8\ndim = 8"  # below the screen's cap: each file's own dim is the problem's
    scale = read_problem(problem_file(tmp_path, "scale", "", "        self.scale = nn.Parameter(torch.randn(dim))\n"
                                      + forward.format("scale"), "[torch.randn(batch_size, dim)]", sizes=small))
    gain = read_problem(problem_file(tmp_path, "gain", "", "        self.gain = nn.Parameter(torch.randn(dim))\n"
                                     + forward.format("gain"), "[torch.randn(batch_size, dim)]", sizes=small))
    twin = read_problem(problem_file(tmp_path, "twin", "", "        self.scale = nn.Parameter(torch.zeros(dim))\n"
                                     + "    def forward(self, x):\n        return self.scale * x",
                                     "[torch.randn(batch_size, dim)]", sizes=small))
    assert reference_difference(scale, gain).startswith("fails on these inputs")
    # its own values are replaced by the problem's: same names and roles, same outputs
    assert reference_difference(scale, twin) == ""


def test_a_problem_of_hundreds_of_millions_of_elements_is_screened_small_and_fast(tmp_path):
    huge = read_problem(problem_file(
        tmp_path, "huge", "", "    def forward(self, x):\n        return torch.softmax(x, dim=-1)",
        "[torch.rand(b, h, s, d)]", sizes="b = 4096\nh = 256\ns = 2048\nd = 1024"))
    plan = screen_sizes(huge)
    assert max(plan[0].values()) <= SCREEN_SIZE_CAP
    start = time.monotonic()
    assert reference_difference(huge, resolve_problem("softmax")) == ""
    assert time.monotonic() - start < 30


def test_a_problem_whose_own_reference_fails_is_a_problem_error_not_a_mismatch(tmp_path):
    broken = read_problem(problem_file(tmp_path, "broken", "", "    def forward(self, x):\n        return x.undefined()",
                                       "[torch.rand(batch_size, dim)]"))
    with pytest.raises(ProblemError, match="broken's reference does not run"):
        ProblemReference(broken).difference(resolve_problem("gelu"))


def test_signature_counts_arguments_without_self_and_refuses_star_args(tmp_path):
    assert signature(LEVEL1 / "24_LogSoftmax.py") == (1, 1)
    assert signature(LEVEL1 / "95_CrossEntropyLoss.py") == (0, 2)
    star = problem_file(tmp_path, "star", "", "    def forward(self, *xs):\n        return xs[0]",
                        "[torch.rand(batch_size, dim)]")
    assert signature(star) is None
