"""Compiling a candidate from its own calls, and the CPU verdict of a backend that cannot run there.

Some backends (CuTe DSL) build a kernel from the host function's trace with the
arguments it was called with, so what to compile for each target can only be learnt by
calling the candidate: its ``forward`` runs once with every kernel launch switched off
while the backend compiles each distinct call for the targets
(``Backend.compile_during_calls``). On a GPU that replaces cross-compiling from launch
records. On a CPU, where such kernels cannot run at all, it is the whole evaluation
after the static rules: the same watch as a real call (no torch math on the forward
path, no input mutated, no host computation, a kernel launched at all), compiled for
every target, and the verdict "compiled, not run", which is inconclusive and never
"passed".
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kgen.evals.verdict import InconclusiveCause, Rejected, RejectionClass, StageStatus

if TYPE_CHECKING:
    from kgen.backends.targets import HardwareTarget


def _targets(evaluation: Any) -> tuple[list[HardwareTarget], list[HardwareTarget]]:
    from kgen.backends.targets import DEFAULT_TARGET, resolve_target

    asked = [resolve_target(n) for n in (evaluation.request.targets or [DEFAULT_TARGET])]
    extra = [resolve_target(n) for n in evaluation.request.also_compile_for if n not in evaluation.request.targets]
    return asked, extra


def call_for_compilation(evaluation: Any, sizes: dict[str, int], targets: list[HardwareTarget]) -> int:
    """One ``forward`` at ``sizes`` with kernels switched off and each call compiled for
    ``targets``; the number of launches it made. Rejects what the call itself shows."""
    seed = evaluation.request.seeds[0]
    problem = evaluation.problem_at(sizes)
    inputs = evaluation.inputs_for(problem, seed, "normal")
    _, candidate = evaluation.models(problem, seed)
    what = f"compiled at sizes {', '.join(f'{k}={v}' for k, v in sizes.items())}"
    with evaluation.backend.compile_during_calls(targets):
        try:
            evidence = evaluation.call(candidate, inputs, [], what, execute=False, aliases=False)
        except Rejected as exc:
            cause = exc.__cause__
            text = evaluation.backend.compile_error(cause) if cause is not None else None
            if exc.rejection is RejectionClass.RUNTIME_ERROR and text is not None:
                raise Rejected(RejectionClass.COMPILE_ERROR, f"{text} ({what})",
                               evidence={"compile_error": text}) from cause
            raise
    return len(evidence.launches)


def record_compile_reports(evaluation: Any, asked: list[HardwareTarget], extra: list[HardwareTarget],
                           launches: list | None = None) -> list[str]:
    """Every target's kernel reports (``Backend.cross_compile``) into the result; rejects a
    failure on an asked-for target, returns the extra targets' misfits (recorded, not held
    against the candidate). The one rule for every backend's compile stage."""
    misfits = []
    for target in [*asked, *extra]:
        reports = evaluation.backend.cross_compile(evaluation.module, list(launches or []), target)
        evaluation.report.kernels.extend(reports)
        evaluation.save()
        failed = [r for r in reports if not r.ok]
        if failed and target in asked:
            raise Rejected(
                RejectionClass.COMPILE_ERROR,
                f"kernel {failed[0].kernel} does not compile for {target.name}: {failed[0].error}",
                evidence={"compile_error": failed[0].error},
            )
        if failed:
            misfits.append(f"{target.name} ({failed[0].kernel}: {failed[0].error})")
    return misfits


def compile_from_calls(evaluation: Any) -> None:
    """The compile stage on a GPU for a backend that compiles from calls."""
    asked, extra = _targets(evaluation)
    started = time.monotonic()
    sizes = evaluation.request.compile_sizes or evaluation.request.size_sets[0]
    call_for_compilation(evaluation, sizes, [*asked, *extra])
    misfits = record_compile_reports(evaluation, asked, extra)
    names = ", ".join(t.name for t in [*asked, *extra])
    evaluation.stage(
        "compile", StageStatus.PASSED,
        f"{len(evaluation.report.kernels)} kernel build(s) for {names} from the candidate's own calls"
        + (f"; does not compile for {'; '.join(misfits)}" if misfits else ""),
        started,
    )


def compiled_not_run(evaluation: Any) -> None:
    """The CPU evaluation of a backend without a CPU interpreter: compile at every size set,
    then stop with the inconclusive "compiled, not run"."""
    from kgen.backends.registry import backend_info

    asked, extra = _targets(evaluation)
    started = time.monotonic()
    launches = 0
    seen: list[dict[str, int]] = []
    for sizes in evaluation.request.size_sets:
        if sizes in seen:
            continue
        # the targets asked for at every size set; the others (recorded, never fatal) at the first
        made = call_for_compilation(evaluation, sizes, [*asked, *extra] if not seen else asked)
        seen.append(sizes)
        if not made:
            raise Rejected(
                RejectionClass.NO_KERNEL_LAUNCH,
                f"forward launched no {evaluation.backend.name} kernel (sizes "
                f"{', '.join(f'{k}={v}' for k, v in sizes.items())})",
            )
        launches += made
    misfits = record_compile_reports(evaluation, asked, extra)
    label = backend_info(evaluation.backend.name).label
    built = ", ".join(sorted({f"{r.target}" for r in evaluation.report.kernels if r.ok}))
    message = (
        f"{len(evaluation.report.kernels)} kernel build(s) for {built or 'no target'} at {len(seen)} size set(s), "
        f"{launches} launch(es) recorded; static rules and the call's watch passed"
        + (f"; does not compile for {'; '.join(misfits)}" if misfits else "")
    )
    # the stage passed; the verdict is still no verdict: nothing was run
    evaluation.report.inconclusive = InconclusiveCause.COMPILED_NOT_RUN
    evaluation.report.reason = (
        f"compiled, not run: {label} kernels need a GPU to run, so correctness and speed are not judged "
        f"on the CPU ({message})"
    )
    evaluation.stage("compile", StageStatus.PASSED, message, started)
