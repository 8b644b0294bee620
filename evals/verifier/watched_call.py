"""One watched call of the candidate, and the rejections any call of it can end in.

Every trial, the ghost check and the compile stage call the candidate through
:func:`watched_call` (``checks/candidate_call.py`` does the watching: poison, launches,
torch ops, inputs, deferred work, host reads, guard zones); the helpers below turn what
the candidate's code raised or did into a verdict the one way every stage uses: a guard
violation, a runtime error named at the candidate's own line, or no verdict when it is
the CPU interpreter (or kgen's memory plan), not the kernel, that cannot go on.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgen.evals.checks.harness_integrity import is_timer, tampered
from kgen.evals.checks.memory_report import is_out_of_memory
from kgen.evals.static_rules import cpu_fallback_lines
from kgen.evals.verdict import Inconclusive, InconclusiveCause, Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext

if TYPE_CHECKING:
    from kgen.evals.checks.candidate_call import CallEvidence

#: Scalars a forward may read to the host per call (sizes, a flag); more is host computation.
MAX_HOST_READS = 16


def exception_line(exc: BaseException, candidate_path: str) -> str:
    """One line: the exception and the candidate's own line where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == Path(candidate_path).resolve()]
    where = f" at {Path(own[-1].filename).name}:{own[-1].lineno}" if own else ""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}{where}: {text[0] if text else ''}".rstrip(": ")


def raise_guard_violation(ctx: VerifierContext) -> None:
    """The sandbox guard's first refusal, if the candidate's code met one, as the rejection."""
    if ctx.guard.violations:
        v = ctx.guard.violations[0]
        raise Rejected(RejectionClass.SANDBOX_VIOLATION, f"the candidate tried a forbidden {v.action}: {v.detail}")


def raise_if_tampered(ctx: VerifierContext, what: str) -> None:
    """Reject a candidate whose code replaced kgen's own functions, torch's, or a timer since the
    load stage's snapshot (``checks/harness_integrity.py``), by whatever route it took."""
    if ctx.integrity is None:
        return
    changes = tampered(ctx.integrity)
    if not changes:
        return
    timers = [c for c in changes if is_timer(c)]
    shown = "; ".join((timers or changes)[:5]) + (f"; ... {len(changes) - 5} more" if len(changes) > 5 else "")
    if timers:
        raise Rejected(RejectionClass.TIMING_ATTACK, f"the candidate replaced timing or synchronisation "
                       f"functions: {shown} ({what})")
    raise Rejected(RejectionClass.FORBIDDEN_CONSTRUCT, f"the candidate replaced functions the verifier "
                   f"calls (harness tampering): {shown} ({what})")


def raise_if_interpreter_limit(ctx: VerifierContext, exc: BaseException, what: str) -> None:
    """No verdict instead of a rejection where the exception is not the kernel's fault: the
    device out of memory (whose allocation it was, ``DeviceMemory.whose_oom``) or a limit of
    the CPU interpreter a GPU does not have."""

    if is_out_of_memory(exc):
        raise ctx.memory.whose_oom(exc, what, by_candidate=True, held_before=ctx.held_before_call) from exc
    limit = ctx.backend.interpreter_limit(exc) if ctx.device.type == "cpu" else None
    if limit is not None:
        raise Inconclusive(
            InconclusiveCause.NEEDS_GPU,
            f"needs a GPU: {limit} ({exception_line(exc, ctx.request.candidate_path)}; {what})",
        ) from exc


def runtime_error(ctx: VerifierContext, exc: BaseException, what: str) -> Rejected:
    """The rejection for an exception the candidate raised; raises ``Inconclusive`` instead
    when it is the CPU interpreter, not the kernel, that cannot go on."""
    raise_if_interpreter_limit(ctx, exc, what)
    return Rejected(
        RejectionClass.RUNTIME_ERROR,
        f"forward raised {exception_line(exc, ctx.request.candidate_path)} ({what})",
    )


def raise_if_cpu_fallback(ctx: VerifierContext, what: str) -> None:
    """A forward that launched nothing on the CPU, from a file with a device-tested CPU
    fallback (``if x.device.type == "cpu": return torch...``), took the branch a GPU never
    takes: only a GPU can judge its kernels."""

    if ctx.device.type != "cpu":
        return
    lines = cpu_fallback_lines(ctx.candidate_path.read_text())
    if lines:
        raise Inconclusive(
            InconclusiveCause.NEEDS_GPU,
            f"needs a GPU: on the CPU the forward takes its CPU fallback (line {lines[0]}, under a device "
            f"test) and launches no kernel; a GPU runs the kernels ({what})",
        )


def check_aliases(ctx: VerifierContext, aliased: dict[int, int], what: str,
                  shared: dict[int, int] | None = None) -> None:
    """An output sharing storage with an input, or with another output, where the reference's own
    output does not."""
    own = {i: j for i, j in aliased.items() if i not in ctx.reference_aliases}
    if own:
        i, j = next(iter(own.items()))
        raise Rejected(
            RejectionClass.OUTPUT_ALIASES_INPUT,
            f"output {i} shares storage with input {j} (the reference returns a new tensor): a caller "
            f"that writes to one corrupts the other ({what})",
        )
    twins = {i: j for i, j in (shared or {}).items() if i not in ctx.reference_shared}
    if twins:
        i, j = next(iter(twins.items()))
        raise Rejected(
            RejectionClass.OUTPUT_ALIASES_OUTPUT,
            f"output {i} shares storage with output {j} (the reference returns separate tensors): a caller "
            f"that writes to one, or an optimizer that updates in place, corrupts the other ({what})",
        )


def data_movement_hint(compute_ops: dict[str, int]) -> str:
    """Words for disallowed ops that only move data (``repeat``, ``cat``): filling an output
    from a kernel's result with them is a tile done by copies, and the verdict says so."""
    from kgen.evals.checks.copy_provenance import MOVE_OPS

    moves = sorted({op.rsplit(".", 1)[0] for op in compute_ops if op.split(".")[1:2] and op.split(".")[1] in MOVE_OPS})
    if not moves:
        return ""
    return (f"; {', '.join(moves)} only move(s) data: an output filled that way from a kernel's result is a "
            "tile done by copies, not the kernel's work")


def watched_call(ctx: VerifierContext, candidate: Any, inputs: list[Any], poison_like: list[Any], what: str,
                 execute: bool = True, aliases: bool = True, follow_copies: bool = False) -> CallEvidence:
    """Call the candidate under full watch (``execute=False``: every kernel launch recorded,
    not run) and reject what the call showed; ``poison_like`` are the outputs whose sizes
    the allocator is poisoned for, ``aliases`` whether outputs aliasing inputs are judged now,
    ``follow_copies`` whether copied values are followed into the outputs (``copy_provenance``)."""
    from kgen.evals.checks.candidate_call import call_candidate

    ctx.held_before_call = ctx.memory.held_bytes()
    evidence = call_candidate(
        candidate, inputs, ctx.backend, ctx.guard, ctx.device, poison_like, execute_kernels=execute,
        policies=ctx.request.policies, pristine_device=ctx.memory.reference_device(ctx.sizes_now),
        follow_copies=follow_copies,
    )
    raise_guard_violation(ctx)
    raise_if_tampered(ctx, what)
    if evidence.error is not None:
        raise runtime_error(ctx, evidence.error, what)
    if evidence.unplain_outputs:
        i, problem = next(iter(evidence.unplain_outputs.items()))
        raise Rejected(
            RejectionClass.WRONG_OUTPUT_STRUCTURE,
            f"output {i} is {problem}: outputs must be plain dense tensors holding their values when "
            f"forward returns ({what})",
        )
    if ctx.request.reference_self_test:
        evidence.compute_ops, evidence.host_reads = {}, 0
    elif execute and not evidence.launches:
        raise_if_cpu_fallback(ctx, what)
        raise Rejected(RejectionClass.NO_KERNEL_LAUNCH, f"forward launched no {ctx.backend.name} kernel ({what})")
    if evidence.compute_ops:
        ops = evidence.torch_ops.describe() + data_movement_hint(evidence.compute_ops)
        raise Rejected(RejectionClass.NOT_A_KERNEL, f"forward computed with torch instead of kernels: {ops} ({what})")
    if evidence.mutated_inputs:
        raise Rejected(
            RejectionClass.INPUT_MUTATION,
            f"forward changed input(s) {evidence.mutated_inputs} in place ({what})",
        )
    if evidence.deferred_outputs:
        raise Rejected(
            RejectionClass.DEFERRED_WORK,
            f"output(s) {evidence.deferred_outputs} were still changing after forward returned: work left "
            f"running on another stream or thread ({what})",
        )
    if execute and evidence.host_reads > MAX_HOST_READS:
        raise Rejected(
            RejectionClass.NOT_A_KERNEL,
            f"forward read {evidence.host_reads} scalars to the host (.item(), int(), float(); at most "
            f"{MAX_HOST_READS} are allowed for sizes and flags): that is host computation, not a kernel ({what})",
        )
    if evidence.overruns:
        raise Rejected(
            RejectionClass.OUT_OF_BOUNDS_WRITE,
            f"wrote past the end of a buffer it allocated: {'; '.join(evidence.overruns)} ({what})",
        )
    if aliases and execute:
        check_aliases(ctx, evidence.aliased_outputs, what, evidence.shared_outputs)
    return evidence
