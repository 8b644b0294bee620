"""The red-team suite: every planted exploit rejected with its class named, every control passes.

This is the verification table of DESIGN.md as executable tests on the CPU: Triton
candidates run in the interpreter and must be judged exactly as a GPU judges them. CuTe DSL
candidates cannot run on a CPU: what the CPU can judge of them (static rules, the watched
call with launches switched off, the compile) must be judged as declared, and every other
one must end "compiled, not run", never passed and never wrongly rejected.
scripts/verification_matrix.py runs the same cases for both backends and writes the confusion
matrix in docs/verification.md.
"""

import pytest
from redteam_cases import bad_cases, control_cases, fixture_controls, redteam_cases

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import InconclusiveCause, Verdict

CPU = EvalOptions(device="cpu", n_seeds=2, timeout_s=240)
CUTE_CPU = EvalOptions(device="cpu", backend="cute", n_seeds=2, timeout_s=240)
#: the Triton suite's classes of which the CuTe suite has no port: none
NOT_PORTED_TO_CUTE: frozenset[str] = frozenset()


def test_suite_is_large_enough():
    assert len(control_cases()) >= 10
    assert len({c.expect for c in bad_cases()}) >= 10


def test_the_cute_suite_ports_every_class_of_the_triton_suite():
    cute = bad_cases("cute")
    assert len(cute) >= 30
    assert {c.expect for c in bad_cases("triton")} - NOT_PORTED_TO_CUTE <= {c.expect for c in cute}
    assert len(fixture_controls("cute")) >= 5
    assert all(c.backend == "cute" for c in redteam_cases("cute"))
    assert all(c.backend == "triton" for c in redteam_cases("triton"))


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c.id)
def test_planted_bad_candidate_is_rejected_with_its_class(case):
    """Judged as the CPU must judge it: its class, or what a fixture declares the CPU says where
    only a GPU can see the fault (a race passes in the interpreter, which runs programs in turn)."""
    result = evaluate(case.problem, case.candidate, CPU)
    assert case.accepts("cpu", result.outcome), f"{case.id}: {result.outcome} {result.reason}"


# The seed kernels are controls too; tests/knowledge_base/test_seed_kernels.py runs them.
@pytest.mark.parametrize("case", fixture_controls(), ids=lambda c: c.id)
def test_correct_control_passes(case):
    result = evaluate(case.problem, case.candidate, CPU)
    assert result.passed, f"{case.id}: {result.rejection} {result.reason}"


@pytest.mark.slow
@pytest.mark.parametrize("case", bad_cases("cute"), ids=lambda c: c.id)
def test_planted_bad_cute_candidate_on_the_cpu_is_judged_as_declared_or_not_run(case):
    result = evaluate(case.problem, case.candidate, CUTE_CPU)
    assert not result.passed, f"{case.id} passed the verifier"
    if case.judged_on_cpu():
        assert case.accepts("cpu", result.outcome), result.reason
    else:  # nothing the CPU can see is wrong with it: no verdict, and no wrong rejection
        assert (result.verdict, result.inconclusive) == (Verdict.INCONCLUSIVE, InconclusiveCause.COMPILED_NOT_RUN), (
            f"{case.id}: {result.outcome} {result.reason}")


@pytest.mark.slow
@pytest.mark.parametrize("case", fixture_controls("cute"), ids=lambda c: c.id)
def test_correct_cute_control_on_the_cpu_compiles_and_is_not_run(case):
    result = evaluate(case.problem, case.candidate, CUTE_CPU)
    assert (result.verdict, result.inconclusive) == (Verdict.INCONCLUSIVE, InconclusiveCause.COMPILED_NOT_RUN), (
        f"{case.id}: {result.outcome} {result.reason}")
    assert result.compiles_for("h100") is True, result.kernels
