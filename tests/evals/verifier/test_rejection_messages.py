"""Rejections a model can act on, and KernelBench semantics, end to end on the CPU.

Each case runs ``kgen.evals.harness.evaluate`` on a small KernelBench-style problem
(tests/fixtures/messages) and checks the verdict's class *and* the words that point at
the bug: where it is, what shape the error has, what passed before, which policy judged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.problem.format import read_problem, sizes_text
from kgen.evals.problem.size_sets import cpu_small_set
from kgen.evals.verdict import RejectionClass, Verdict

HERE = Path(__file__).resolve().parents[2] / "fixtures" / "messages"


def _first_sizes(problem: str) -> str:
    """The sizes a CPU verification tries first (and compares the others with)."""
    return sizes_text(cpu_small_set(read_problem(HERE / f"{problem}.py")))


def _eval(problem: str, candidate: str, **options):
    return evaluate(HERE / f"{problem}.py", HERE / f"{candidate}.py", EvalOptions(device="cpu", n_seeds=1, **options))


def test_a_kernel_with_eval_mode_batchnorm_is_told_about_training_mode():
    result = _eval("batchnorm_kb", "bn_eval_mode")
    assert result.rejection is RejectionClass.MISMATCH
    assert "matches the reference in eval mode" in result.reason and "training mode" in result.reason


def test_training_mode_batchnorm_passes():
    result = _eval("batchnorm_kb", "bn_train_ok")
    assert result.verdict is Verdict.PASSED, result.reason
    assert "torch ops library" in result.reason  # a plain KernelBench file: the library policy, said


def test_parameters_named_differently_are_matched_by_shape_and_order():
    result = _eval("linear_relu_kb", "linear_renamed_ok")
    assert result.verdict is Verdict.PASSED, result.reason
    weights = result.stage("correctness").evidence["weights"]
    assert weights["how"] == "by shape and order"


def test_parameters_that_cannot_be_matched_are_named_in_the_rejection():
    result = _eval("linear_relu_kb", "linear_transposed_weight")
    assert result.rejection is RejectionClass.MISMATCH
    assert "parameters could not be matched to the reference's" in result.reason
    assert "gemm.weight (48, 96)" in result.reason and "weight_t (96, 48)" in result.reason


def test_a_missing_bias_is_named_as_a_per_channel_term():
    result = _eval("linear_kb", "linear_bias_dropped")
    assert result.rejection is RejectionClass.MISMATCH
    assert "varies only along dim 1" in result.reason
    assert "first trial" in result.reason  # and what passed before: nothing


def test_a_tail_missed_at_other_sizes_is_shape_specialisation_with_both_sizes():
    result = _eval("rowsum_kb", "rowsum_tail_missed")
    assert result.rejection is RejectionClass.SHAPE_SPECIALISATION
    assert f"right at sizes {_first_sizes('rowsum_kb')}," in result.reason
    assert "passed before it" in result.reason


def test_a_kernel_that_raises_at_other_sizes_is_shape_specialisation_not_runtime_error():
    result = _eval("rowsum_kb", "rowsum_pow2_only")
    assert result.rejection is RejectionClass.SHAPE_SPECIALISATION, result.reason
    assert f"right at sizes {_first_sizes('rowsum_kb')}," in result.reason
    assert "features=" in result.reason.split("but at sizes", 1)[1]


@pytest.mark.parametrize("flag", [None, "strict"])
def test_the_policy_that_judged_is_in_the_result(flag):
    result = _eval("linear_relu_kb", "linear_renamed_ok", torch_ops=flag)
    assert result.policies.torch_ops.value == (flag or "library")


def test_a_cpu_fallback_chosen_by_device_type_is_inconclusive_on_the_cpu():
    result = _eval("relu_kb", "relu_cpu_fallback")
    assert result.verdict is Verdict.INCONCLUSIVE, result.reason
    assert "needs a GPU" in result.reason and "line 18" in result.reason


def test_torch_on_the_gpu_side_of_a_device_test_is_still_rejected():
    result = _eval("relu_kb", "relu_gpu_side_torch")
    assert result.rejection is RejectionClass.NOT_A_KERNEL, result.reason
