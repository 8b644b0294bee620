"""The order of checks that names a wrong answer: one failure, one name, whatever the seed.

A trial whose outputs miss the fp64 reference (``trials.py``) is named by the first rule
below whose premise holds. Classes that claim a cause (a narrow accumulator, a distribution,
a size) are given only where the verifier saw the kernel right on the baseline first; a
diagnosis that is not proved by a rerun ("off by a constant", "TF32-shaped", "the probes make
it worse") is a hint in the message, never the class. The order, as docs/verification.md
states it:

1. The output's form, from the comparison itself: the count, shape or dtype of the outputs
   (``wrong_output_structure``), NaN/Inf where the reference is finite (``nan_or_inf``),
   memory left unwritten (``unwritten_output``, ``partial_output``).
2. A rerun that finds the one change that fixes it (``failure_diagnosis.diagnose``): right on
   contiguous copies of strided inputs (``layout_blindness``), right with the weights it was
   built with, missing a sizeable share of what the loaded weights change (``stale_weights``).
3. The previous trial's output returned, bit for bit, for new inputs (``stale_output``).
4. A trial of the baseline: the problem's own inputs, and standard-normal ones where those are
   of one sign (``input_distributions.BASELINE``), at the sizes the plan gives them, with the
   problem's own arguments, at any seed (:func:`in_baseline`). Wrong there is
   ``numerical_mismatch``: nothing is known to be right, so no cause is established. One
   measured exception: ``low_precision_accumulation`` where the precision probes make the error
   at least 4x worse *and* the baseline's own error is the size of bf16/fp16 rounding
   (:func:`after_probes`), so a narrow accumulator has one name whether or not the problem's
   own inputs happened to hide it at this seed.
5. Past the baseline, which passed: a precision probe that fits low-precision accumulation
   (``precision_probe``) is ``low_precision_accumulation``; any other distribution
   ``input_distribution_failure``; other sizes ``shape_specialisation``.
6. On a GPU, a name of 4 or 5 whose reruns on the same inputs disagree is ``race_condition``
   (``trials.RACE_SUSPECTS``).

After the trials, the call sequence names a fault by the step that found it only where the
step's premise holds (``call_sequence.py``): a changed-input call is ``stale_output`` only
when it returned the previous call's output; a fresh, wrong output there is
``numerical_mismatch`` on those values.
"""

from __future__ import annotations

from typing import Any

import torch

from kgen.evals.checks.candidate_call import same_values
from kgen.evals.checks.error_shape import rounding_format
from kgen.evals.checks.precision_probe import (
    ACCUMULATION_PROBES,
    diagnose_precision,
    narrower_rounding,
)
from kgen.evals.problem.format import sizes_text
from kgen.evals.problem.input_distributions import BASELINE, inputs_phrase
from kgen.evals.verdict import RejectionClass, Trial
from kgen.evals.verifier.context import VerifierContext


def in_baseline(ctx: VerifierContext, trial: Trial) -> bool:
    """Whether ``trial`` is one of the baseline's (rule 4): a baseline distribution, at sizes the
    plan gives the baseline (``ctx.baseline_sizes``), with no argument varied."""
    sizes = ctx.baseline_sizes or [ctx.request.size_sets[0]]
    return trial.distribution in BASELINE and not trial.arguments and trial.sizes in sizes


def baseline_passed(ctx: VerifierContext) -> bool:
    """The premise of rule 5: the problem's own inputs passed and no baseline trial failed (a
    baseline trial the reference could not judge, skipped, counts neither way)."""
    return "normal" in ctx.passed_distributions and not any(
        not t.passed and in_baseline(ctx, t) for t in ctx.report.trials
    )


def baseline_words(ctx: VerifierContext) -> str:
    """What the kernel was right on, for a message of rule 5."""
    passed = sorted(BASELINE & ctx.passed_distributions, key=lambda d: d != "normal")
    return " and on ".join(inputs_phrase(d) for d in passed)


def worst_ratio(trial: Trial) -> float:
    """The trial's worst error over its tolerance (inf where a reference is zero and the output is not)."""
    return max(o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300) for o in trial.outputs)


def name_failure(ctx: VerifierContext, failure, trial: Trial, outputs: list[Any], what: str) -> tuple[RejectionClass, str]:
    """Rules 3 to 5 for a trial whose comparison failed (``failure``: its class and words)."""

    detail = f"{failure} ({what})"
    if ctx.previous_outputs and any(
        isinstance(o, type(p)) and same_values(o, p) for o, p in zip(outputs, ctx.previous_outputs, strict=False)
    ):
        return RejectionClass.STALE_OUTPUT, f"returned the previous call's output for new inputs: {detail}"
    ctx.failed_distributions[trial.distribution] = worst_ratio(trial)
    if in_baseline(ctx, trial) or not baseline_passed(ctx):
        return failure.rejection, detail
    right = f"right on {baseline_words(ctx)}"
    if trial.distribution in ACCUMULATION_PROBES and diagnose_precision(
        dict(ctx.failed_distributions), set(ctx.passed_distributions)
    ).fits:
        return (
            RejectionClass.LOW_PRECISION_ACCUMULATION,
            f"{right}, wrong on {inputs_phrase(trial.distribution)}, built to expose low-precision accumulation: {detail}",
        )
    if trial.distribution not in BASELINE:
        return RejectionClass.INPUT_DISTRIBUTION, f"{right}, wrong on {inputs_phrase(trial.distribution)}: {detail}"
    return (
        RejectionClass.SHAPE_SPECIALISATION,
        f"right at sizes {sizes_text(ctx.request.size_sets[0])}, wrong at other sizes: {detail}",
    )


def after_probes(ctx: VerifierContext, failed: Trial, failure: Exception) -> tuple[RejectionClass, str] | None:
    """The name a mismatch gets once the precision probes ran (``trials.probe_precision``), or
    None to keep it as it is (rule 5, and rule 4's one measured exception).

    Past the baseline, a pattern that fits low-precision accumulation is that class. On the
    baseline nothing passed to compare with, so the probes' growth alone names nothing (a kernel
    for another operation is made worse by the probes too); it names the class only where the
    baseline's own error is also the size of a narrower format's rounding (a bf16 running sum
    feeding an fp32 output fails the problem's own inputs at some seeds and not at others: its
    name must not depend on which)."""

    if rounding_format(str(failure)) == "tf32":
        # measured, not guessed: the output matches the reference computed from TF32-rounded
        # inputs, so the kernel rounds its product's inputs (an fp32 tl.dot without
        # input_precision="ieee"), which the probes also magnify; its accumulator is not the fault.
        # It stays a mismatch with the TF32 advice, whichever seed made the probes grow.
        return None
    diagnosis = diagnose_precision(dict(ctx.failed_distributions), set(ctx.passed_distributions))
    if not diagnosis.fits:
        return None
    worst = max(diagnosis.probe_failures, key=diagnosis.probe_failures.get)
    growth = (
        f"on {inputs_phrase(worst)}, built to expose narrow accumulators, the error grows to "
        f"{diagnosis.probe_failures[worst]:.0f}x the tolerance"
    )
    if not in_baseline(ctx, failed) and baseline_passed(ctx):
        return RejectionClass.LOW_PRECISION_ACCUMULATION, f"{failure}; {growth}: the pattern of low-precision accumulation"
    narrow = _rounding_sized(failed)
    if narrow is None:
        return None
    return (
        RejectionClass.LOW_PRECISION_ACCUMULATION,
        f"{failure}; {growth}, and the error on {inputs_phrase(failed.distribution)} is the size of "
        f"{str(narrow).removeprefix('torch.')} rounding: the pattern of low-precision accumulation",
    )


def _rounding_sized(trial: Trial) -> torch.dtype | None:
    """The narrower format (bf16, fp16) whose rounding is the size of the trial's worst error."""
    comparison = max(trial.outputs, key=lambda o: o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300), default=None)
    dtype = getattr(torch, comparison.dtype, None) if comparison is not None else None  # recorded by name
    if not isinstance(dtype, torch.dtype):
        return None
    return narrower_rounding(dtype, comparison.rel_l2_error)
