"""The compile stage: every kernel built for every target asked for (and those compiled for
too, whose failures are recorded, not held against the candidate).

Triton cross-compiles from the launches a forward makes (recorded on storage-less "meta"
tensors at the problem's default sizes, or the trials' own launches). Some backends (CuTe
DSL) build a kernel from the host function's trace with the arguments it was called with,
so what to compile for each target can only be learnt by calling the candidate: its
``forward`` runs once with every kernel launch switched off while the backend compiles each
distinct call for the targets (``Backend.compile_during_calls``).

On a CPU, where such kernels cannot run at all, that is the whole evaluation after the
static rules (:class:`CompiledNotRunStage`): the same watch as a real call (no torch math
on the forward path, no input mutated, no host computation, a kernel launched at all),
compiled for every target, and the verdict "compiled, not run", which is inconclusive and
never "passed".
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kgen.backends.registry import backend_info
from kgen.backends.targets import DEFAULT_TARGET, resolve_target
from kgen.evals.problem.format import load_problem, sizes_text
from kgen.evals.verdict import InconclusiveCause, Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage, save_report
from kgen.evals.verifier.trial_parts import inputs_for, models, problem_at
from kgen.evals.verifier.watched_call import watched_call

if TYPE_CHECKING:
    from kgen.backends.base import KernelLaunch
    from kgen.backends.targets import HardwareTarget


def _targets(ctx: VerifierContext) -> tuple[list[HardwareTarget], list[HardwareTarget]]:
    asked = [resolve_target(n) for n in (ctx.request.targets or [DEFAULT_TARGET])]
    extra = [resolve_target(n) for n in ctx.request.also_compile_for if n not in ctx.request.targets]
    return asked, extra


def call_for_compilation(ctx: VerifierContext, sizes: dict[str, int], targets: list[HardwareTarget]) -> int:
    """One ``forward`` at ``sizes`` with kernels switched off and each call compiled for
    ``targets``; the number of launches it made. Rejects what the call itself shows."""
    seed = ctx.request.seeds[0]
    problem = problem_at(ctx, sizes)
    inputs = inputs_for(ctx, problem, seed, "normal")
    _, candidate = models(ctx, problem, seed)
    what = f"compiled at sizes {', '.join(f'{k}={v}' for k, v in sizes.items())}"
    with ctx.backend.compile_during_calls(targets):
        try:
            evidence = watched_call(ctx, candidate, inputs, [], what, execute=False, aliases=False)
        except Rejected as exc:
            cause = exc.__cause__
            text = ctx.backend.compile_error(cause) if cause is not None else None
            if exc.rejection is RejectionClass.RUNTIME_ERROR and text is not None:
                raise Rejected(RejectionClass.COMPILE_ERROR, f"{text} ({what})",
                               evidence={"compile_error": text}) from cause
            raise
    return len(evidence.launches)


def record_compile_reports(ctx: VerifierContext, asked: list[HardwareTarget], extra: list[HardwareTarget],
                           launches: list | None = None) -> list[str]:
    """Every target's kernel reports (``Backend.cross_compile``) into the result; rejects a
    failure on an asked-for target, returns the extra targets' misfits (recorded, not held
    against the candidate). The one rule for every backend's compile stage."""
    misfits = []
    for target in [*asked, *extra]:
        reports = ctx.backend.cross_compile(ctx.module, list(launches or []), target)
        ctx.report.kernels.extend(reports)
        save_report(ctx)
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


def compile_launches(ctx: VerifierContext) -> list[KernelLaunch]:
    """The launches the problem's default sizes make, recorded with execution switched off
    on storage-less "meta" tensors: the real launch configuration even for a KernelBench
    file whose default inputs would not fit in this machine's memory. A candidate that
    cannot run on meta tensors is compiled at the launches its trials made."""

    sizes = ctx.request.compile_sizes
    if not sizes or sizes == ctx.request.size_sets[0]:
        return ctx.first_launches
    torch = ctx.torch
    try:
        problem = load_problem(ctx.request.problem_path, sizes)
        torch.manual_seed(ctx.request.seeds[0])
        with torch.device("meta"):
            inputs = problem.get_inputs()
            candidate = ctx.module.ModelNew(*problem.get_init_inputs())
        with ctx.guard, torch.no_grad(), ctx.backend.record_launches(execute=False) as log:
            candidate(*inputs)
    except Exception:  # noqa: BLE001 - meta tensors are a shortcut, not a requirement
        return ctx.first_launches
    return list(log.launches) or ctx.first_launches


class CompileStage:
    """Nothing to do without targets; otherwise every kernel built for each of them, from the
    recorded launches or, for a backend that compiles from calls, from the candidate's calls."""

    name = "compile"

    def run(self, ctx: VerifierContext) -> None:
        names = [*ctx.request.targets, *ctx.request.also_compile_for]
        if not names:
            return
        if ctx.backend.compiles_from_calls:
            self._from_calls(ctx)
            return
        started = time.monotonic()
        misfits = record_compile_reports(
            ctx, [resolve_target(n) for n in ctx.request.targets],
            [resolve_target(n) for n in ctx.request.also_compile_for], compile_launches(ctx),
        )
        sizes = ctx.request.compile_sizes or ctx.request.size_sets[0]
        record_stage(
            ctx,
            self.name,
            StageStatus.PASSED,
            f"{len(ctx.report.kernels)} kernel build(s) for {', '.join(names)} at sizes {sizes_text(sizes)}"
            + (f"; does not compile for {'; '.join(misfits)}" if misfits else ""),
            started,
        )

    def _from_calls(self, ctx: VerifierContext) -> None:
        """On a GPU, for a backend that compiles from calls: one call at the compile sizes."""
        asked, extra = _targets(ctx)
        started = time.monotonic()
        sizes = ctx.request.compile_sizes or ctx.request.size_sets[0]
        call_for_compilation(ctx, sizes, [*asked, *extra])
        misfits = record_compile_reports(ctx, asked, extra)
        names = ", ".join(t.name for t in [*asked, *extra])
        record_stage(
            ctx, self.name, StageStatus.PASSED,
            f"{len(ctx.report.kernels)} kernel build(s) for {names} from the candidate's own calls"
            + (f"; does not compile for {'; '.join(misfits)}" if misfits else ""),
            started,
        )


class CompiledNotRunStage:
    """The CPU evaluation of a backend without a CPU interpreter: compile at every size set,
    then stop with the inconclusive "compiled, not run"."""

    name = "compile"

    def run(self, ctx: VerifierContext) -> None:
        asked, extra = _targets(ctx)
        started = time.monotonic()
        launches = 0
        seen: list[dict[str, int]] = []
        for sizes in ctx.request.size_sets:
            if sizes in seen:
                continue
            # the targets asked for at every size set; the others (recorded, never fatal) at the first
            made = call_for_compilation(ctx, sizes, [*asked, *extra] if not seen else asked)
            seen.append(sizes)
            if not made:
                raise Rejected(
                    RejectionClass.NO_KERNEL_LAUNCH,
                    f"forward launched no {ctx.backend.name} kernel (sizes "
                    f"{', '.join(f'{k}={v}' for k, v in sizes.items())})",
                )
            launches += made
        misfits = record_compile_reports(ctx, asked, extra)
        label = backend_info(ctx.backend.name).label
        built = ", ".join(sorted({f"{r.target}" for r in ctx.report.kernels if r.ok}))
        message = (
            f"{len(ctx.report.kernels)} kernel build(s) for {built or 'no target'} at {len(seen)} size set(s), "
            f"{launches} launch(es) recorded; static rules and the call's watch passed"
            + (f"; does not compile for {'; '.join(misfits)}" if misfits else "")
        )
        # the stage passed; the verdict is still no verdict: nothing was run
        ctx.report.inconclusive = InconclusiveCause.COMPILED_NOT_RUN
        ctx.report.reason = (
            f"compiled, not run: {label} kernels need a GPU to run, so correctness and speed are not judged "
            f"on the CPU ({message})"
        )
        record_stage(ctx, self.name, StageStatus.PASSED, message, started)
