"""The training-check stage on a real context: a small model trained with the candidate's gradient
kernel in the Triton interpreter, against the reference's training."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.load_stage import LoadStage
from kgen.evals.verifier.train_check_stage import TrainCheckStage
from kgen.knowledge_base import SEED_KERNELS_DIR

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"
EMBEDDING_SEED = SEED_KERNELS_DIR / "triton" / "embedding_backward.py"
BF16_EMBEDDING = CANDIDATES / "redteam_embedding_bwd_bf16_accumulation.py"


def _loaded(open_verifier, candidate: Path, problem: str | None = None, **request):
    ctx = open_verifier(candidate, **({"problem": problem} if problem else {}), **request)
    LoadStage().run(ctx)
    return ctx


def test_not_asked_for_it_does_nothing(open_verifier):
    ctx = _loaded(open_verifier, EMBEDDING_SEED, "embedding_backward", seeds=[0])
    TrainCheckStage().run(ctx)
    assert [s.name for s in ctx.report.stages] == ["load"] and ctx.report.train_check is None


def test_a_forward_problem_has_no_training_recipe_and_is_skipped(open_verifier):
    ctx = _loaded(open_verifier, CANDIDATES / "relu_kernelbench_solution.py", train_check=True)
    TrainCheckStage().run(ctx)
    stage = ctx.report.stages[-1]
    assert (stage.name, stage.status) == ("train_check", StageStatus.SKIPPED)
    assert ctx.report.train_check["applicable"] is False


@pytest.mark.slow
def test_an_fp32_accumulating_gradient_trains_like_the_reference(open_verifier):
    ctx = _loaded(open_verifier, EMBEDDING_SEED, "embedding_backward", seeds=[0], train_check=True)
    TrainCheckStage().run(ctx)
    stage = ctx.report.stages[-1]
    assert (stage.name, stage.status) == ("train_check", StageStatus.PASSED)
    assert stage.message.startswith("training matches the reference")
    assert ctx.report.train_check["passed"] is True and ctx.report.train_check["candidate_losses"]


@pytest.mark.slow
def test_a_bf16_accumulating_gradient_is_a_training_divergence(open_verifier):
    ctx = _loaded(open_verifier, BF16_EMBEDDING, "embedding_backward", seeds=[1], train_check=True)
    with pytest.raises(Rejected, match="^training divergence") as caught:
        TrainCheckStage().run(ctx)
    assert caught.value.rejection is RejectionClass.TRAINING_DIVERGENCE
    assert ctx.report.train_check["passed"] is False  # the curves are evidence even in a rejection
