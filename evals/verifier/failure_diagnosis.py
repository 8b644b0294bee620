"""Naming a correctness failure: what the error looks like and which verification class it is.

A trial (``trials.py``) finds that the candidate's outputs failed; the functions here, each
given the verifier's context (``ctx``), decide what to tell the kernel's author: the
error's pattern and what passed before (:func:`explain`), the one change that would
fix it when there is one (:func:`diagnose`: strided inputs, stale weights, the
module's mode, unmatched parameters). The verification class itself is decided in one
place, by the stated order of ``failure_order.py``.
:func:`ill_conditioned` tells a trial no fp32 kernel could pass from one the candidate failed.
"""

from __future__ import annotations

import copy

from kgen.evals.checks.compare import (
    COMPARE_CHUNK,
    ComparisonFailure,
    compare_output,
    outputs_failure,
    outside_tolerance,
)
from kgen.evals.checks.error_shape import (
    ROUNDING_FORMATS,
    error_pattern,
    passed_before,
    precision_advice,
    reference_from_rounded,
)
from kgen.evals.problem.format import flatten_outputs
from kgen.evals.problem.layout import compact_copies, copy_inputs, describe_layout, is_plain_layout
from kgen.evals.problem.policies import Precision
from kgen.evals.verdict import RejectionClass, Trial
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.trial_parts import models, references, to_device


def explain(ctx: VerifierContext, failure, trial: Trial, outputs, ref64, reference, inputs):
    """The failure with its pattern (``error_shape``), what it means under the precision
    policy, and what passed before it: the words a fix can start from."""

    if failure.rejection is not RejectionClass.MISMATCH:
        return failure
    index = next(c.index for c in trial.outputs if not c.passed)
    out, r64 = outputs[index], ref64[index]
    rounded = {}
    for fmt in ROUNDING_FORMATS.get(out.dtype, ()):
        try:
            rounded[fmt] = reference_from_rounded(reference, inputs, fmt, ctx.device, ctx.product_operands)[index]
        except Exception:  # noqa: BLE001 - a diagnosis only: a format the reference cannot run in
            continue
    phrases = error_pattern(out, r64, outside_tolerance(out, r64, ctx.precision), rounded)
    advice = precision_advice(phrases, ctx.precision.value)
    text = "; ".join([str(failure), *phrases, *([advice] if advice else []),
                      passed_before([t for t in ctx.report.trials if t is not trial])])
    return ComparisonFailure(failure.rejection, text)


def ill_conditioned(ctx: VerifierContext, reference, inputs, native, ref64) -> list[int]:
    """Outputs that move by more than half their tolerance when every floating input is
    nudged by one fp32 rounding (2^-24 relative): no kernel computing in fp32 can be
    judged there (rmsnorm backward over one element is rounding noise)."""

    torch = ctx.torch
    generator = torch.Generator().manual_seed(12345)
    nudged = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            noise = (torch.rand(x.shape, generator=generator, dtype=torch.float64) * 2 - 1).to(x.device)
            x = x.detach().to(torch.float64) * (1 + noise * 2.0**-24)
        nudged.append(to_device(ctx, x, upcast=True))
    with torch.no_grad():
        moved = flatten_outputs(copy.deepcopy(reference).double()(*nudged))
    return [
        i for i, (m, r, rn) in enumerate(zip(moved, ref64, native, strict=True))
        if isinstance(rn, torch.Tensor) and rn.is_floating_point()
        and not compare_output(i, m, r, scale=0.5, dtype=rn.dtype).passed
    ]


def tf32_ill_conditioned(ctx: VerifierContext, reference, inputs, native, ref64) -> list[int]:
    """Under the tf32 policy, fp32 outputs that an honest TF32 kernel misses by more than half
    their tolerance at these inputs: the reference on TF32-rounded operands (what such a kernel
    computes, up to its own accumulation) is the measure. A mean shifted by hundreds of sigmas
    into a convolution with mixed-sign weights leaves outputs far smaller than their terms, and
    TF32's rounding of those terms alone exceeds the bound: the trial cannot judge a kernel the
    policy admits, as :func:`ill_conditioned` finds for fp32."""

    if ctx.precision is not Precision.TF32:
        return []
    torch = ctx.torch
    if not any(isinstance(rn, torch.Tensor) and rn.dtype == torch.float32 for rn in native):
        return []
    try:
        rounded = reference_from_rounded(reference, inputs, "tf32", ctx.device, ctx.product_operands)
    except Exception:  # noqa: BLE001 - a reference that cannot run on rounded operands: no verdict on it here
        return []
    return [
        i for i, (t, r, rn) in enumerate(zip(rounded, ref64, native, strict=True))
        if isinstance(rn, torch.Tensor) and rn.dtype == torch.float32
        and not compare_output(i, t, r, scale=0.5, dtype=rn.dtype, precision=ctx.precision).passed
    ]


def diagnose(
    ctx: VerifierContext, problem, seed: int, inputs, ref64, outputs, what: str, failure
) -> tuple[RejectionClass, str] | None:
    """Name a numerical failure by the one thing that fixes it, when one does: the inputs
    laid out contiguously (the kernel ignores strides), or the weights the candidate was
    built with left in place (it copied them at construction)."""

    views = [i for i, x in enumerate(inputs) if not is_plain_layout(x)]
    if views and plain_call_matches(ctx, problem, seed, compact_copies(inputs), ref64):
        layouts = "; ".join(f"input {i}: {describe_layout(inputs[i])}" for i in views)
        return (
            RejectionClass.LAYOUT_BLINDNESS,
            f"wrong on the problem's own strided inputs ({layouts}), right on contiguous copies of them: "
            f"the kernel ignores strides: {failure} ({what})",
        )
    if ctx.transfer is not None and ctx.transfer.transferred and (
        (missed := missed_weight_change(ctx, problem, seed, inputs, ref64, outputs)) is not None
    ):
        return (
            RejectionClass.STALE_WEIGHTS,
            "right with the weights it was built with, wrong once other weights were loaded into it "
            f"({ctx.transfer.how}): it computes from a copy taken at construction (it missed {missed:.0%} of what the "
            f"new weights change in the output): {failure} ({what})",
        )
    if plain_call_matches(ctx, problem, seed, inputs, ref64, reference_mode="eval"):
        return (
            RejectionClass.MISMATCH,
            "matches the reference in eval mode, not in the training mode the reference is constructed in "
            "(KernelBench semantics: BatchNorm normalises with the batch's own statistics, dropout is active): "
            f"{failure} ({what})",
        )
    if ctx.transfer is not None and not ctx.transfer.transferred and "no parameters" not in ctx.transfer.detail:
        return (
            RejectionClass.MISMATCH,
            f"{failure} ({what}); the candidate's parameters could not be matched to the reference's "
            f"({ctx.transfer.detail}): it was compared with the reference's weights as built from the same "
            "seed, which match only if it creates the same parameters in the same order and shapes",
        )
    return None


#: The share of the new weights' effect on the output that a failing candidate must miss
#: for ``stale_weights``. A stale copy misses all of it, or the part a folded copy holds; a
#: kernel that follows the weights but rounds (TF32 under the IEEE policy) misses a
#: rounding's worth, and may be right with the built weights only because that draw's error
#: fell just inside the tolerance (seen: 1.28x the tolerance with the loaded weights, inside
#: it with the built ones).
STALE_SHARE = 0.1


def missed_weight_change(ctx: VerifierContext, problem, seed: int, inputs, ref64, outputs) -> float | None:
    """The premise of ``stale_weights``: right with the weights it was built with, and wrong
    with the loaded ones by a sizeable share (:data:`STALE_SHARE`) of what loading them
    changes in the reference's output. The share it missed, or None where the premise fails."""

    reference, candidate = models(ctx, problem, seed, fresh_weights=False, rerun=True)
    _, built64 = references(ctx, reference, inputs)
    if not call_matches(ctx, candidate, inputs, built64):
        return None
    missed, moved = 0.0, 0.0
    for out, new, built in zip(outputs, ref64, built64, strict=True):
        if not all(isinstance(t, ctx.torch.Tensor) for t in (out, new, built)) or out.shape != new.shape:
            continue
        missed += _squared_distance(out, new)
        moved += _squared_distance(built, new)
    if not moved > 0:
        return None  # the weights change nothing here: a failure with them is not theirs
    share = (missed / moved) ** 0.5
    return share if share >= STALE_SHARE else None


def _squared_distance(a, b) -> float:
    """sum((a - b)^2) in fp64 on ``b``'s device, a comparison's chunk at a time (full-size outputs
    can be gigabytes)."""
    import torch

    a, b = a.detach().reshape(-1), b.detach().reshape(-1)
    total = 0.0
    for start in range(0, b.numel(), COMPARE_CHUNK):
        end = start + COMPARE_CHUNK
        piece = a[start:end].to(b.device, torch.float64) - b[start:end].to(torch.float64)
        total += float(piece.pow(2).sum())
    return total


def plain_call_matches(
    ctx: VerifierContext, problem, seed: int, inputs, ref64, reference_mode: str | None = None
) -> bool:
    """One unwatched call on a new pair of modules: does it match ``ref64`` (recomputed with
    the reference switched to ``reference_mode`` "eval", when that changes the reference's
    answer)?"""

    reference, candidate = models(ctx, problem, seed, rerun=True)
    if reference_mode == "eval":
        if not reference.training:
            return False
        evaluated = copy.deepcopy(reference).eval()
        _, eval64 = references(ctx, evaluated, inputs)
        if outputs_failure(eval64, ref64) is None:
            return False  # the mode changes nothing here: no diagnosis in it
        ref64 = eval64
    return call_matches(ctx, candidate, inputs, ref64)


def call_matches(ctx: VerifierContext, candidate, inputs, ref64) -> bool:
    """One unwatched call of ``candidate`` on copies of ``inputs`` on the device (the call sequence
    keeps its pristine inputs on the host when the device has no room): does it match ``ref64``?"""
    try:
        with ctx.guard, ctx.torch.no_grad():
            outputs = flatten_outputs(candidate(*copy_inputs(inputs, ctx.device)))
    except Exception:  # noqa: BLE001 - a diagnosis only; the failure stands as found
        return False
    if len(outputs) != len(ref64) or not all(isinstance(o, ctx.torch.Tensor) for o in outputs):
        return False
    return outputs_failure(outputs, ref64, ctx.precision) is None
