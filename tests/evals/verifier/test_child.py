"""The child's entry point: the stage list in the order the parent expects, and what the loop
records when a stage stops the verification."""

from __future__ import annotations

from pathlib import Path

from kgen.evals.verdict import InconclusiveCause, RejectionClass, StageStatus
from kgen.evals.verifier.child import run_stages, verifier_stages
from kgen.evals.verifier.messages import STAGES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"
SOLUTION = CANDIDATES / "relu_kernelbench_solution.py"
MESSAGES = FIXTURES / "messages"


def _stages(ctx) -> list[tuple[str, StageStatus]]:
    return [(s.name, s.status) for s in ctx.report.stages]


def test_the_stages_run_in_the_order_the_parent_names_them(open_verifier):
    ctx = open_verifier(SOLUTION)
    assert tuple(stage.name for stage in verifier_stages(ctx)) == STAGES


def test_a_rejection_is_recorded_on_its_stage_and_ends_the_verification(open_verifier):
    ctx = open_verifier(CANDIDATES / "no_model_new.py")
    run_stages(ctx, verifier_stages(ctx))
    assert _stages(ctx) == [("static", StageStatus.PASSED), ("load", StageStatus.FAILED)]
    assert ctx.report.rejection is RejectionClass.NO_MODEL_NEW
    assert ctx.report.reason == ctx.report.stages[-1].message == "no_model_new.py defines no class ModelNew"


def test_no_verdict_is_recorded_as_a_skipped_stage_with_its_cause(open_verifier):
    ctx = open_verifier(MESSAGES / "relu_cpu_fallback.py", problem=MESSAGES / "relu_kb.py")
    run_stages(ctx, verifier_stages(ctx))
    assert _stages(ctx)[-1] == ("correctness", StageStatus.SKIPPED)
    assert ctx.report.inconclusive is InconclusiveCause.NEEDS_GPU and ctx.report.rejection is None
    assert ctx.report.stages[-1].message.startswith("inconclusive: needs a GPU")


def test_a_numerical_rejection_still_gets_the_training_check_when_asked_for(open_verifier):
    ctx = open_verifier(CANDIDATES / "relu_wrong_math.py", train_check=True)
    run_stages(ctx, verifier_stages(ctx))
    assert _stages(ctx)[-2:] == [("correctness", StageStatus.FAILED), ("train_check", StageStatus.SKIPPED)]
    assert ctx.report.rejection is RejectionClass.MISMATCH  # the verdict is correctness's
