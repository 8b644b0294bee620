"""The red-team suite: every planted exploit rejected with its class named, every control passes.

This is the verification table of DESIGN.md as executable tests (CPU, Triton
interpreter). scripts/verification_matrix.py runs the same cases and writes
the confusion matrix in docs/verification.md.
"""

import pytest
from redteam_cases import bad_cases, control_cases, fixture_controls

from kgen.evals.harness import EvalOptions, evaluate

CPU = EvalOptions(device="cpu", n_seeds=2, timeout_s=240)


def test_suite_is_large_enough():
    assert len(control_cases()) >= 10
    assert len({c.expect for c in bad_cases()}) >= 10


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c.id)
def test_planted_bad_candidate_is_rejected_with_its_class(case):
    result = evaluate(case.problem, case.candidate, CPU)
    assert not result.passed, f"{case.id} passed the verifier"
    assert result.rejection is not None and result.rejection.value == case.expect_on("cpu"), result.reason


# The seed kernels are controls too; tests/knowledge_base/test_seed_kernels.py runs them.
@pytest.mark.parametrize("case", fixture_controls(), ids=lambda c: c.id)
def test_correct_control_passes(case):
    result = evaluate(case.problem, case.candidate, CPU)
    assert result.passed, f"{case.id}: {result.rejection} {result.reason}"
