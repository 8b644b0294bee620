"""The verifier that runs inside the sandbox: one candidate through a list of stages.

Run as ``python -m kgen.evals.verifier.child REQUEST.json REPORT.json`` (the sandbox and
the worker pool start it by that name). The stages (static rules, load, correctness,
compile, training check, timing; one module each, ``*_stage.py``) share one declared
context (``context.py``) and stop the verification by raising: ``Rejected`` is the
candidate's fault, ``Inconclusive`` (and an out-of-memory in kgen's own work) is no verdict.
The report is rewritten after every stage and every trial, so when the candidate kills
this process (segfault, illegal memory access, timeout) the parent still has the evidence
gathered up to that point.

Nothing imports the backend's toolchain before the backend has prepared the process
(Triton's CPU interpreter is chosen by an environment variable read at import): the stage
modules import torch and the toolchain inside their functions, which run once
``open_context`` has prepared the process (``tests/test_architecture.py`` checks that
importing this module imports neither torch nor triton).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kgen.backends.registry import backend_info
from kgen.evals.checks.memory_report import is_out_of_memory
from kgen.evals.sandbox.lifecycle import start_parent_watchdog
from kgen.evals.timeline import Timeline
from kgen.evals.verdict import Inconclusive, Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.compile_stage import CompiledNotRunStage, CompileStage
from kgen.evals.verifier.context import (
    Stage,
    VerifierContext,
    open_context,
    record_stage,
    save_report,
)
from kgen.evals.verifier.load_stage import LoadStage
from kgen.evals.verifier.messages import ChildReport, ChildRequest
from kgen.evals.verifier.static_stage import StaticStage
from kgen.evals.verifier.timing_stage import TimingStage
from kgen.evals.verifier.train_check_stage import TrainCheckStage

#: Rejections after which the training check still runs when asked for: the kernel is safe
#: to run, only wrong, and how wrong it trains is evidence worth having.
NUMERICAL_REJECTIONS = frozenset(
    {RejectionClass.MISMATCH, RejectionClass.NAN_OR_INF, RejectionClass.LOW_PRECISION_ACCUMULATION,
     RejectionClass.INPUT_DISTRIBUTION, RejectionClass.SHAPE_SPECIALISATION}
)


def verifier_stages(ctx: VerifierContext) -> list[Stage]:
    """The stages for this candidate, in order (``messages.STAGES`` names them for the parent).
    A backend whose kernels cannot run on this CPU is compiled from the candidate's calls
    and stops at "compiled, not run"."""
    from kgen.evals.verifier.correctness_stage import CorrectnessStage

    if ctx.device.type == "cpu" and not backend_info(ctx.request.backend).runs_on_cpu:
        return [StaticStage(), LoadStage(), CompiledNotRunStage()]
    return [StaticStage(), LoadStage(), CorrectnessStage(), CompileStage(), TrainCheckStage(), TimingStage()]


def run_stages(ctx: VerifierContext, stages: list[Stage]) -> None:
    """Each stage in turn until one stops the verification; its rejection or missing verdict
    is recorded on it (a numerical rejection in correctness still gets the training check,
    when asked for)."""

    for stage in stages:
        started = time.monotonic()
        try:
            with ctx.timeline.span(stage.name):
                stage.run(ctx)
        except Rejected as exc:
            ctx.report.rejection = exc.rejection
            ctx.report.reason = str(exc)
            record_stage(ctx, stage.name, StageStatus.FAILED, str(exc), started, **exc.evidence)
            if stage.name == "correctness" and exc.rejection in NUMERICAL_REJECTIONS and ctx.request.train_check:
                train_check = TrainCheckStage()
                started = time.monotonic()
                try:
                    with ctx.timeline.span(train_check.name):
                        train_check.run(ctx)
                except Rejected as train_exc:
                    record_stage(ctx, train_check.name, StageStatus.FAILED, str(train_exc), started)
            break
        except Inconclusive as exc:
            ctx.report.inconclusive = exc.cause
            ctx.report.reason = str(exc)
            record_stage(ctx, stage.name, StageStatus.SKIPPED, f"inconclusive: {exc}", started)
            break
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            # the candidate's own calls are judged inside `watched_call`: what reaches here is kgen's
            oom = ctx.memory.whose_oom(exc, f"during {stage.name}", by_candidate=False, held_before=None)
            ctx.report.inconclusive, ctx.report.reason = oom.cause, str(oom)
            record_stage(ctx, stage.name, StageStatus.SKIPPED, f"inconclusive: {oom}", started)
            break


def run(request: ChildRequest, report_path: Path, timeline: Timeline | None = None) -> ChildReport:
    """Verify the request's candidate in this process; the report, also written to ``report_path``.
    ``timeline``: the spans recorded before the request was read (``main``), continued in
    the report's. The last report write is timed by the parent (the file's modification
    time): a span recorded after it would never reach the file."""
    timeline = timeline if timeline is not None else Timeline()
    with timeline.span("open_context"):
        ctx = open_context(request, report_path)
        stages = verifier_stages(ctx)
    ctx.report.timeline = timeline
    run_stages(ctx, stages)
    ctx.report.finished = True
    save_report(ctx)
    return ctx.report


def main(argv: list[str] | None = None) -> int:
    # From here the seconds are this evaluation's; a spare's start-up and wait before the
    # hand-over are not, so its start is the moment its arguments arrive.
    started = time.time()
    start_parent_watchdog()  # a child whose kgen is gone must not run on, holding the GPU
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--wait":  # a spare started ahead (worker_pool.py): start up, then wait
        from kgen.evals.sandbox.worker_pool import wait_for_arguments

        argv = wait_for_arguments(argv[1:])
        if argv is None:
            return 0
        started = time.time()
    timeline = Timeline()
    request = ChildRequest.model_validate_json(Path(argv[0]).read_text())
    timeline.lap("startup", started)
    run(request, Path(argv[1]), timeline)
    return 0


def end_now(code: int) -> None:
    """Leave without the interpreter's teardown: the report is written and nothing else of this
    process is wanted. Measured on the CPU, tearing down torch, Triton and the candidate's
    modules took 0.8-1.4 s a candidate, which the parent waited for before reading the report
    (on a GPU the CUDA context's teardown adds to it); the operating system frees the
    process's memory and the driver its device memory either way. The candidate's own
    ``atexit`` handlers do not run: nothing it registers runs after its verdict is written."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    end_now(main())
