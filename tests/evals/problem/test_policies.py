"""The named policies (evals/problem/policies.py): one default per problem kind, flags over declarations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kgen.errors import KgenUsageError
from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.problem.format import read_problem
from kgen.evals.problem.policies import (
    Policies,
    PolicyError,
    Precision,
    TorchOps,
    parse_precision,
    policies_for,
)
from kgen.evals.problem.tolerances import TOLERANCES, tolerance_for

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_defaults_depend_on_the_kind_of_problem():
    assert policies_for(None, None, plain_kernelbench=True) == Policies(torch_ops=TorchOps.LIBRARY)
    assert policies_for(None, None, plain_kernelbench=False) == Policies(torch_ops=TorchOps.STRICT)
    assert policies_for(None, None, plain_kernelbench=True).precision is Precision.IEEE


def test_a_flag_overrides_the_declaration_which_overrides_the_default():
    assert policies_for("tf32", "strict", True).describe() == "precision tf32, torch ops strict"
    assert policies_for("tf32", "strict", True, precision="ieee", torch_ops="library").describe() == (
        "precision ieee, torch ops library"
    )


def test_unknown_policy_names_are_refused_with_the_choices():
    with pytest.raises(PolicyError, match="choose ieee, tf32"):
        parse_precision("fp16")
    with pytest.raises(PolicyError, match="choose strict, library"):
        policies_for(None, "lenient", True)


def test_problem_files_declare_policies_and_kernelbench_files_default_to_library(tmp_path):
    kb = read_problem(FIXTURES / "problems" / "relu_kernelbench.py")
    assert kb.policies().torch_ops is TorchOps.LIBRARY
    declared = tmp_path / "p.py"
    declared.write_text(
        (FIXTURES / "problems" / "relu_kernelbench.py").read_text()
        + '\nKGEN_PRECISION = "tf32"\nKGEN_TORCH_OPS = "strict"\n'
    )
    info = read_problem(declared)
    assert info.policies() == Policies(precision=Precision.TF32, torch_ops=TorchOps.STRICT)
    assert info.policies(torch_ops="library").torch_ops is TorchOps.LIBRARY


def test_tf32_loosens_only_fp32_tolerances():
    assert tolerance_for(torch.float32, Precision.TF32).rel_l2 > TOLERANCES[torch.float32].rel_l2
    assert tolerance_for(torch.float32, Precision.TF32).rel_l2 < TOLERANCES[torch.bfloat16].rel_l2
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        assert tolerance_for(dtype, Precision.TF32) == tolerance_for(dtype)


def test_a_bad_policy_flag_is_a_usage_error_before_anything_runs():
    with pytest.raises(KgenUsageError, match="unknown precision policy"):
        evaluate(FIXTURES / "problems" / "relu_kernelbench.py", FIXTURES / "candidates" / "control_relu_autotuned.py",
                 EvalOptions(device="cpu", precision="half"))
