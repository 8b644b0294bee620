"""The load stage: the candidate imported by its backend, inside the sandbox guard, and
required to define a ``ModelNew`` class.

Before the import, every module of kgen that judges or times the candidate is loaded and
the harness snapshot is taken (``checks/harness_integrity.py``): the functions the verifier
will call, and the timers, as they were before any of the candidate's code ran. After the
import they are compared once; ``watched_call`` compares them after every call.
"""

from __future__ import annotations

import importlib
import pkgutil
import time

import kgen.evals.checks
import kgen.evals.problem
import kgen.evals.timing
import kgen.evals.verifier
from kgen.backends.module_loading import CandidateLoadError
from kgen.evals.checks.harness_integrity import take_snapshot
from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage
from kgen.evals.verifier.watched_call import (
    raise_guard_violation,
    raise_if_interpreter_limit,
    raise_if_tampered,
)

#: the packages whose modules judge or time a candidate: all loaded before the snapshot, so a
#: module the stages import later cannot arrive already patched
HARNESS_PACKAGES = (kgen.evals.checks, kgen.evals.problem, kgen.evals.timing, kgen.evals.verifier)


def load_harness_modules() -> None:
    """Import every module of :data:`HARNESS_PACKAGES` (the stages import theirs lazily)."""
    for package in HARNESS_PACKAGES:
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)


class LoadStage:
    """An import that fails (or that the interpreter cannot run, which is no verdict) or a
    module without ``class ModelNew`` rejects; the loaded module goes into ``ctx.module``."""

    name = "load"

    def run(self, ctx: VerifierContext) -> None:
        started = time.monotonic()
        load_harness_modules()
        ctx.integrity = take_snapshot()
        try:
            with ctx.guard:
                ctx.module = ctx.backend.load_candidate(ctx.candidate_path)
        except CandidateLoadError as exc:
            raise_guard_violation(ctx)
            if exc.__cause__ is not None:
                raise_if_interpreter_limit(ctx, exc.__cause__, "importing the candidate")
            raise Rejected(RejectionClass.LOAD_ERROR, str(exc)) from exc
        raise_guard_violation(ctx)
        raise_if_tampered(ctx, "importing the candidate")
        model_new = getattr(ctx.module, "ModelNew", None)
        if not isinstance(model_new, type):
            raise Rejected(RejectionClass.NO_MODEL_NEW, f"{ctx.candidate_path.name} defines no class ModelNew")
        record_stage(ctx, self.name, StageStatus.PASSED, "ModelNew found", started)
