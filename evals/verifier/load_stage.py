"""The load stage: the candidate imported by its backend, inside the sandbox guard, and
required to define a ``ModelNew`` class."""

from __future__ import annotations

import time

from kgen.backends.module_loading import CandidateLoadError
from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage
from kgen.evals.verifier.watched_call import raise_guard_violation, raise_if_interpreter_limit


class LoadStage:
    """An import that fails (or that the interpreter cannot run, which is no verdict) or a
    module without ``class ModelNew`` rejects; the loaded module goes into ``ctx.module``."""

    name = "load"

    def run(self, ctx: VerifierContext) -> None:
        started = time.monotonic()
        try:
            with ctx.guard:
                ctx.module = ctx.backend.load_candidate(ctx.candidate_path)
        except CandidateLoadError as exc:
            raise_guard_violation(ctx)
            if exc.__cause__ is not None:
                raise_if_interpreter_limit(ctx, exc.__cause__, "importing the candidate")
            raise Rejected(RejectionClass.LOAD_ERROR, str(exc)) from exc
        raise_guard_violation(ctx)
        model_new = getattr(ctx.module, "ModelNew", None)
        if not isinstance(model_new, type):
            raise Rejected(RejectionClass.NO_MODEL_NEW, f"{ctx.candidate_path.name} defines no class ModelNew")
        record_stage(ctx, self.name, StageStatus.PASSED, "ModelNew found", started)
