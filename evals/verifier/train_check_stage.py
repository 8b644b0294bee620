"""The training-check stage, when asked for: a small model trained with the candidate's
gradient against the same model trained with the reference's (``train_check.py``).

It also runs after a numerical rejection in correctness (``child.NUMERICAL_REJECTIONS``):
the kernel is safe to run, only wrong, and how wrong it trains is evidence worth having.
"""

from __future__ import annotations

import time

from kgen.evals.problem.format import read_problem
from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage
from kgen.evals.verifier.watched_call import raise_guard_violation


class TrainCheckStage:
    """Skipped (recorded) for a problem without a training recipe; a loss curve that drifts
    from the reference's rejects as ``training_divergence``."""

    name = "train_check"

    def run(self, ctx: VerifierContext) -> None:
        from kgen.evals.verifier.train_check import run_train_check

        if not ctx.request.train_check:
            return
        started = time.monotonic()
        info = read_problem(ctx.request.problem_path)
        with ctx.timeline.span("training", gpu=ctx.gpu), ctx.guard:
            result = run_train_check(info, ctx.module.ModelNew, ctx.device, seed=ctx.request.seeds[0])
        raise_guard_violation(ctx)
        ctx.report.train_check = result.model_dump()
        if not result.applicable:
            record_stage(ctx, self.name, StageStatus.SKIPPED, result.message, started)
            return
        if not result.passed:
            raise Rejected(RejectionClass.TRAINING_DIVERGENCE, result.message)
        record_stage(ctx, self.name, StageStatus.PASSED, result.message, started)
