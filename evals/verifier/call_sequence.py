"""A run of plain calls, as a training loop makes them: what a candidate carries from call to call.

The trials judge one watched call at a time. A candidate can still be right in
every trial and wrong in use: honest only while it sees instrumentation, honest
only for the first minutes after import, right with the weights it was built
with and stale once they change, caching results keyed on part of an input,
returning one of two buffers in turn so the caller's last result is
overwritten, keeping state in module buffers. So after the trials one
candidate module is called six times in a row, **with no instrumentation at
all** (no poisoned memory, no dispatch modes, no launch recording: only the
sandbox's audit hook, which Python code cannot see), every output kept
(``kept_outputs.py``) and judged against the fp64 reference:

1. fresh inputs: the uninstrumented call (``checker_detection`` if wrong: every
   instrumented trial at these sizes and inputs passed), with gradients enabled
   as in training (the watched trials run under ``no_grad``);
2. and 3. fresh inputs with the process clock ten minutes, then a day ahead
   (``environment_dependent``);
4. fresh inputs after the reference's weights were re-drawn and loaded into the
   candidate again (``stale_weights`` when a module built afresh and given the same
   weights is right on them; ``numerical_mismatch`` when it is as wrong);
5. the inputs of call 4, copied, with only a small block in the middle of one
   input changed (``stale_output``: a cache keyed on part of the input);
6. the very buffers of call 5, with a small block near the start changed in
   place (``stale_output``: a cache keyed on the address and a prefix).

Calls 5 and 6 name ``stale_output`` only when the wrong output is the previous call's, bit
for bit (what a cache hands back); a fresh output wrong for the changed values is
``numerical_mismatch`` (``failure_order.py``: a class that claims a cause needs its premise).

Around every call the module's tensors (parameters, buffers, tensor
attributes, the candidate file's tensor globals) are fingerprinted; a change
the reference module does not make in the same call is ``state_mutation``. An
output that shares storage with an argument is ``output_aliases_input`` unless
the reference's does too. After the last call every earlier output is checked
again, bit for bit: a later call that overwrote it is ``stale_output``.

Then the cache probe (:func:`run_cache_probe`), at the full sizes: new values written into
the very buffers of a call's inputs must give new outputs (``stale_output``: a cache keyed on
the inputs' addresses).
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, Field

from kgen.evals.checks.candidate_call import (
    aliased_outputs,
    clone_value,
    same_outputs,
    same_values,
    shared_outputs,
)
from kgen.evals.checks.clock import shifted_clock
from kgen.evals.checks.compare import ComparisonFailure, check_structure, outputs_failure
from kgen.evals.checks.kept_outputs import KeptOutputs
from kgen.evals.checks.module_state import (
    changed_state,
    rerandomise,
    state_fingerprint,
    transfer_weights,
)
from kgen.evals.problem.format import flatten_outputs, sizes_text
from kgen.evals.problem.layout import copy_inputs
from kgen.evals.verdict import Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.failure_diagnosis import call_matches
from kgen.evals.verifier.trial_parts import inputs_for, models, references
from kgen.evals.verifier.watched_call import check_aliases, raise_guard_violation, runtime_error

#: The clock shifts of calls 2 and 3: ten minutes (past "some minutes after import") and a day.
CLOCK_SHIFTS_S = (600.0, 90_061.0)


class SequenceCall(BaseModel):
    what: str
    passed: bool = True


class SequenceResult(BaseModel):
    calls: list[SequenceCall] = Field(default_factory=list)
    weights: str = ""

    @property
    def summary(self) -> str:
        return (
            f"{len(self.calls)} uninstrumented calls in a row matched (two with the clock shifted, one after "
            f"new weights{'' if self.weights == 'none' else ' were loaded ' + self.weights}, two with part of an "
            "input changed), outputs kept and re-checked, module state unchanged"
        )


def _partially_changed(inputs: list[Any], generator: torch.Generator, where: str) -> list[Any]:
    """The inputs with a small block of one tensor changed (the rest bit-identical), in place:
    at its ``"start"`` (past the first element) or in its ``"middle"`` (a cache keyed on the
    first and last elements misses it)."""
    target = next((x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1), None)
    if target is None:
        target = next((x for x in inputs if isinstance(x, torch.Tensor) and x.numel() > 1 and x.dtype != torch.bool), None)
    if target is None:
        return inputs
    count = max(1, min(64, target.numel() // 8))
    with torch.no_grad():
        if not target.is_contiguous():  # a strided view: change one row of its first axis
            _perturb(target.select(0, target.shape[0] // 2 if where == "middle" else 0), generator)
        else:
            start = (target.numel() - count) // 2 if where == "middle" else min(1, target.numel() - count)
            _perturb(target.view(-1)[start:start + count], generator)
    return inputs


def _perturb(block: torch.Tensor, generator: torch.Generator) -> None:
    if block.is_floating_point():
        values = block.detach().to(torch.float64)
        spread = values.abs().mean().item() or 1.0
        noise = torch.randn(block.shape, generator=generator, dtype=torch.float64).to(block.device) * spread
        block.copy_((values + noise).to(block.dtype))
    else:
        low = int(block.min().item())
        high = int(block.max().item())
        new = torch.randint(low, max(high, low + 1) + 1, block.shape, generator=generator)
        same = new.to(block.device) == block
        new = torch.where(same.cpu(), torch.full_like(new, low if high > low else low + 1), new)
        block.copy_(new.to(block.device, block.dtype))


def run_call_sequence(ctx: VerifierContext, problem: Any, seed: int) -> SequenceResult:
    """The six calls above; raises ``Rejected`` on the first fault."""

    result = SequenceResult()
    reference, candidate = models(ctx, problem, seed)
    transferred = ctx.transfer is not None and ctx.transfer.transferred
    result.weights = ctx.transfer.how if transferred else "none"
    globals_of = ctx.module
    generator = torch.Generator().manual_seed(seed)
    # the inputs' copies beside the reference: on the host when the device has no room for it
    # (``memory_plan.py``); the outputs' copies on the host always (six calls' worth), the
    # outputs themselves all held only where the device has room
    pristine = ctx.memory.reference_device(problem.sizes)
    kept = KeptOutputs(torch.device("cpu"), hold_all=pristine == ctx.device)
    sizes = sizes_text(problem.sizes)

    inputs = inputs_for(ctx, problem, seed, "normal")
    args: list[Any] = []
    steps = ("plain", "clock_minutes", "clock_day", "weights", "partial", "in_place")
    for step, name in enumerate(steps, start=1):
        if name != "in_place":
            args = []  # the last call's buffers: only the in-place call uses them again
        if name in ("clock_minutes", "clock_day", "weights"):
            del inputs  # freed before the next set is drawn: full-size inputs can be gigabytes
            inputs = inputs_for(ctx, problem, seed + step, "normal")
        if name == "weights" and transferred:
            rerandomise(reference, torch.Generator().manual_seed(seed + 7))
            transfer_weights(reference, candidate)
        if name == "partial":
            inputs = _partially_changed(copy_inputs(inputs), generator, where="middle")
        if name == "in_place":
            inputs = _partially_changed(args, generator, where="start")  # the last call's own buffers
        what = f"call {step} of {len(steps)} in a row, uninstrumented ({name}), seed {seed}, sizes {sizes}"
        saved = copy_inputs(inputs, pristine)
        before = state_fingerprint(candidate, globals_of)
        # The candidate first: no reference output is lying in freed memory for it to find.
        args = inputs if name == "in_place" else copy_inputs(inputs)
        shift = {"clock_minutes": CLOCK_SHIFTS_S[0], "clock_day": CLOCK_SHIFTS_S[1]}.get(name)
        outputs = _plain_call(ctx, candidate, args, clock_shift=shift, what=what)
        mutated = [i for i, (a, b) in enumerate(zip(saved, args, strict=True))
                   if isinstance(a, torch.Tensor) and not same_values(a, b)]
        if mutated:
            raise Rejected(RejectionClass.INPUT_MUTATION, f"forward changed input(s) {mutated} in place ({what})")
        ref_state = state_fingerprint(reference)
        native, ref64 = references(ctx, reference, saved)
        reference_changes = bool(changed_state(ref_state, reference))
        try:
            check_structure(outputs, native)
        except ComparisonFailure as exc:
            raise Rejected(exc.rejection, f"{exc} ({what})") from exc
        failure = outputs_failure(outputs, ref64, ctx.precision)
        if failure is not None:
            if name.startswith("clock") and _wrong_without_the_clock(ctx, candidate, saved, native, ref64, what):
                name = "plain"  # wrong unwatched whatever the clock says: it tells watched calls apart
            if name in ("partial", "in_place") and not kept.repeats_last_call(outputs):
                name = "fresh"  # an output of its own, wrong for these values: no cache returned it
            if name == "weights" and not _right_in_a_new_module(ctx, problem, seed, reference, saved, ref64):
                name = "as_wrong_new"  # as wrong in a module built with these weights: no stale copy
            raise Rejected(*_name(name, failure, what))
        check_aliases(ctx, aliased_outputs(outputs, args), what, shared_outputs(outputs))
        changed = changed_state(before, candidate, globals_of)
        if changed and not reference_changes:
            raise Rejected(
                RejectionClass.STATE_MUTATION,
                f"forward changed {', '.join(changed[:4])}{' and more' if len(changed) > 4 else ''}, which the "
                f"reference module leaves alone: state carried from one call to the next ({what})",
            )
        # An output the reference also returns as a view of an input changes with that input.
        kept.add(what, outputs, skip=set(ctx.reference_aliases))
        del outputs, native, ref64, saved
        result.calls.append(SequenceCall(what=what))
    overwritten = kept.first_changed()
    if overwritten is not None:
        what, i = overwritten
        raise Rejected(
            RejectionClass.STALE_OUTPUT,
            f"output {i} of {what} changed after later calls: the candidate hands out a buffer it writes "
            "again (the caller's earlier result is overwritten)",
        )
    return result


#: Seed offset of the cache probe's second draw.
CACHE_PROBE_DRAW = 7919


def run_cache_probe(ctx: VerifierContext, problem, seed: int) -> None:
    """New values in the very same input buffers must give new outputs (no pointer-keyed cache)."""

    torch = ctx.torch
    what = f"cache probe, seed {seed}"
    first = inputs_for(ctx, problem, seed, "normal")
    second = inputs_for(ctx, problem, seed + CACHE_PROBE_DRAW, "normal")
    reference, candidate = models(ctx, problem, seed)
    # judged before any call, so no copy of the first inputs is kept: they are what was drawn
    inputs_differ = not same_outputs([x for x in first if isinstance(x, torch.Tensor)],
                                     [x for x in second if isinstance(x, torch.Tensor)])
    try:
        with ctx.guard, torch.no_grad():
            out_first = [clone_value(o) for o in flatten_outputs(candidate(*first))]
            for buffer, new in zip(first, second, strict=True):
                if isinstance(buffer, torch.Tensor):
                    buffer.copy_(new)
            del second
            out_second = flatten_outputs(candidate(*first))
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise_guard_violation(ctx)
        raise runtime_error(ctx, exc, what) from exc
    raise_guard_violation(ctx)
    if inputs_differ and same_outputs(out_first, out_second) and _wrong_for(ctx, reference, problem, seed + CACHE_PROBE_DRAW, out_second):
        raise Rejected(
            RejectionClass.STALE_OUTPUT,
            "new values in the same input buffers returned the same output, wrong for the new values: "
            f"outputs are cached across calls ({what})",
        )


def _wrong_for(ctx: VerifierContext, reference: Any, problem, seed: int, outputs: list[Any]) -> bool:
    """Whether ``outputs`` fail the reference on the ``normal`` draw of ``seed``. Two draws can
    have the same answer in the output's dtype (a bf16 row norm of 65536 values is 256 for most
    draws, as bf16 holds no value between 256 and 258): the same output is a cache only when
    it is wrong for the new values."""
    native, ref64 = references(ctx, reference, inputs_for(ctx, problem, seed, "normal"))
    return _fails(ctx, outputs, native, ref64)


def _fails(ctx: VerifierContext, outputs: list[Any], native: list[Any], ref64: list[Any]) -> bool:
    """Whether ``outputs`` have the wrong structure or miss the fp64 reference."""
    try:
        check_structure(outputs, native)
    except ComparisonFailure:
        return True
    return outputs_failure(outputs, ref64, ctx.precision) is not None


def _plain_call(ctx: VerifierContext, candidate: Any, args: list[Any], clock_shift: float | None, what: str) -> list[Any]:
    """The candidate called as a training loop calls it: gradients enabled, no instrumentation
    but the sandbox's audit hook (every watched trial runs under ``no_grad``, so a candidate
    that behaves by grad mode is caught one way or the other)."""

    try:
        with ctx.guard, torch.enable_grad():
            if clock_shift is not None:
                with shifted_clock(clock_shift):
                    outputs = flatten_outputs(candidate(*args))
            else:
                outputs = flatten_outputs(candidate(*args))
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise_guard_violation(ctx)
        raise runtime_error(ctx, exc, what) from exc
    raise_guard_violation(ctx)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    return outputs


def _wrong_without_the_clock(
    ctx: VerifierContext, candidate: Any, inputs: list[Any], native: list[Any], ref64: list[Any], what: str
) -> bool:
    """The same inputs once more, unwatched and with the clock as it is: still wrong means the
    fault is not the clock's (a candidate that detects instrumentation by what fresh memory
    holds can be right on one unwatched call and wrong on the next)."""
    outputs = _plain_call(ctx, candidate, copy_inputs(inputs, ctx.device), clock_shift=None, what=what)
    return _fails(ctx, outputs, native, ref64)


def _right_in_a_new_module(ctx: VerifierContext, problem, seed: int, reference: Any, inputs: list[Any], ref64: list[Any]) -> bool:
    """The premise of ``stale_weights`` at call 4: a module built now and given the same new
    weights is right on the same inputs, so the called module's fault is what it kept from
    the weights it had before. A kernel that is wrong with these weights wherever they are
    loaded (its own rounding, on a draw where it falls outside the tolerance) is not stale."""
    _, fresh = models(ctx, problem, seed, fresh_weights=False, rerun=True)
    transfer_weights(reference, fresh)
    return call_matches(ctx, fresh, inputs, ref64)


def _name(step: str, failure: Any, what: str) -> tuple[RejectionClass, str]:
    if step == "plain":
        return (
            RejectionClass.CHECKER_DETECTION,
            f"right in every instrumented trial at these sizes, wrong in a plain call without instrumentation: "
            f"{failure} ({what})",
        )
    if step.startswith("clock"):
        return (
            RejectionClass.ENVIRONMENT_DEPENDENT,
            f"right a moment ago, wrong with the process clock moved ahead: {failure} ({what})",
        )
    if step == "weights":
        return (
            RejectionClass.STALE_WEIGHTS,
            "right until new weights were loaded into it, wrong after: it computes from a copy taken earlier: "
            f"{failure} ({what})",
        )
    if step == "as_wrong_new":
        return (
            RejectionClass.MISMATCH,
            "wrong after new weights were loaded, and as wrong in a module built afresh and given the same "
            f"weights (not a copy of the old ones): wrong with these weights: {failure} ({what})",
        )
    if step == "fresh":
        return (
            RejectionClass.MISMATCH,
            "wrong on the previous call's inputs with one block of values changed, with an output of its own "
            f"(not the previous call's: no cache), so wrong on those values: {failure} ({what})",
        )
    return (
        RejectionClass.STALE_OUTPUT,
        "wrong when only part of an input changed, returning the previous call's output: an output cached on "
        f"part of its input: {failure} ({what})",
    )
