"""Naming a rejection: does it fit low-precision accumulation?

A kernel that keeps a running sum, a scatter-add target or an atomic buffer in
bf16/fp16 is right when each accumulator collects few contributions and
wrong when it collects many: the running sum grows, and once it is a few
hundred times larger than a term (bf16 has 8 significant bits, fp16 11) the
terms are rounded away. The verifier's probe distributions
(:mod:`kgen.evals.problem.input_distributions`) are built to make that happen at the
sizes it tests:

* ``accumulation_probe``: every term of a sum has the same sign, so the sum
  grows linearly instead of like a random walk;
* ``zipf_ids``: a few hot ids collect most rows of a scatter;
* ``repeated_id``: every row lands in one accumulator.

So a failure *fits low-precision accumulation* when a probe fails and the
baseline inputs do not: the candidate is right on ``normal`` inputs (and on
every other non-probe distribution it was run on), or — when it is wrong
everywhere — when a probe makes it at least :data:`AMPLIFICATION` times more
wrong than anything else. Error ratios are ``error / tolerance`` per
distribution (``rel_l2_error / tolerance_rel_l2``, worst over outputs and
trials): above one fails. A non-finite ratio (NaN or Inf in the output) is
not a rounding error and never fits.

Evidence of growth is optional: ``growth`` pairs (contributions per
accumulator, error ratio) for one probe at several sizes; when given with at
least two distinct counts, the error at the most contributions must exceed
the error at the fewest.

Measured with plain-torch emulations (``tests/evals/checks/test_precision_probe.py``),
rel-L2 error against the fp64 reference, bf16 outputs unless noted:

* running row sum over 4096 terms, 32 rows: bf16 accumulator 7.7e-2 on normal
  inputs (a sequential bf16 sum of zero-mean terms is over the 1e-2 tolerance
  from about 64 terms on), 1.1e-1 on uniform and 8.5e-1 on the probe (7.8x
  worse: the amplification rule names it); fp32 accumulator 1.3e-3 to 1.9e-3
  on every distribution (the bf16 rounding of the output);
* scatter-add of 2048 bf16 rows (dim 32) into 32000 ids: bf16 accumulator
  4.4e-4 with uniform ids (passes: one or two contributions per row), 6.5e-3
  with Zipf ids (fails the elementwise check on the hot rows) and 4.5e-2 with
  one repeated id; fp32 accumulator at most 1.8e-3 everywhere (passes).

A bf16 accumulator feeding an *fp32* output already fails on normal inputs
(the fp32 tolerance is 1e-4, a single bf16 rounding is ~1e-3), so the first
failure is on ``normal`` and the probes never run. For that case
:func:`narrower_rounding` says whether the error is the size of bf16 or fp16
rounding: a hint for the message (and a reason to name the class), weaker
evidence than the probes, since a slightly wrong formula can err by as much.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import torch

#: Distributions that exist to expose low-precision accumulation.
ACCUMULATION_PROBES = ("accumulation_probe", "zipf_ids", "repeated_id")
#: A probe failing by this factor more than every other failing distribution fits too.
AMPLIFICATION = 4.0

_ADVICE = (
    "an accumulator (running sum, scatter-add target, atomic buffer) is probably kept in "
    "bf16/fp16; keep it in fp32 and round once when storing the result"
)


@dataclass(frozen=True)
class PrecisionDiagnosis:
    """Whether a rejection fits low-precision accumulation, and why."""

    fits: bool
    message: str
    probe_failures: dict[str, float] = field(default_factory=dict)
    other_failures: dict[str, float] = field(default_factory=dict)


def diagnose_precision(
    failures: Mapping[str, float],
    passes: Collection[str],
    growth: Sequence[tuple[int, float]] = (),
) -> PrecisionDiagnosis:
    """Judge the per-distribution results of one candidate.

    ``failures`` maps a distribution to its worst error ratio (error / tolerance);
    it may also hold ratios of distributions that passed (those named in
    ``passes`` are not counted as failures). ``passes`` names the distributions
    whose trials all passed. ``growth`` is optional evidence, see the module
    docstring.
    """
    passes = set(passes)
    failed = {name: ratio for name, ratio in failures.items() if name not in passes}
    probes = {n: r for n, r in failed.items() if n in ACCUMULATION_PROBES}
    others = {n: r for n, r in failed.items() if n not in ACCUMULATION_PROBES}

    def verdict(fits: bool, message: str) -> PrecisionDiagnosis:
        return PrecisionDiagnosis(fits, message, probes, others)

    if not probes:
        return verdict(False, "no accumulation probe failed")
    if "normal" not in passes and "normal" not in failed:
        return verdict(False, "the problem's own inputs were not checked, so there is nothing to compare with")
    if not all(math.isfinite(r) for r in failed.values()):
        return verdict(False, "a non-finite error (NaN or Inf in the output) is not a rounding error")
    worst_name = max(probes, key=probes.__getitem__)
    worst = probes[worst_name]
    probe_text = ", ".join(f"{n} {r:.3g}x" for n, r in sorted(probes.items(), key=lambda kv: -kv[1]))
    if others:
        other_worst = max(others.values())
        if worst < AMPLIFICATION * other_worst:
            return verdict(
                False,
                f"wrong on {', '.join(sorted(others))} as well ({other_worst:.3g}x the tolerance), and the "
                f"probes ({probe_text}) are not {AMPLIFICATION:g}x worse: not an accumulation-precision pattern",
            )
        context = (
            f"wrong everywhere, but the probes ({probe_text} the tolerance) are at least "
            f"{worst / other_worst:.3g}x worse than anything else ({other_worst:.3g}x)"
        )
    else:
        right_on = sorted(passes - set(ACCUMULATION_PROBES))
        context = f"right on {', '.join(right_on)} inputs, wrong on {probe_text} the tolerance"
    if len({count for count, _ in growth}) >= 2:
        fewest = min(growth, key=lambda cr: cr[0])
        most = max(growth, key=lambda cr: cr[0])
        if most[1] <= fewest[1]:
            return verdict(
                False,
                f"{context}; but the error does not grow with the contributions per accumulator "
                f"({fewest[0]}: {fewest[1]:.3g}x, {most[0]}: {most[1]:.3g}x)",
            )
        context += f"; the error grows from {fewest[1]:.3g}x at {fewest[0]} to {most[1]:.3g}x at {most[0]} contributions"
    return verdict(True, f"fits low-precision accumulation: {context}; {_ADVICE}")


def fits_low_precision_accumulation(failures: Mapping[str, float], passes: Collection[str]) -> bool:
    """Whether a rejection fits low-precision accumulation (see :func:`diagnose_precision`)."""
    return diagnose_precision(failures, passes).fits


#: The name the design notes use.
classify_precision_failure = fits_low_precision_accumulation


def narrower_rounding(out_dtype: torch.dtype, rel_l2: float) -> torch.dtype | None:
    """The narrower float type (bf16, else fp16) whose rounding is the size of this
    rel-L2 error on an ``out_dtype`` output, or None.

    "The size of" means between 1/16 and 4 times its unit roundoff (bf16: 2.4e-4 to
    1.6e-2, fp16: 3.1e-5 to 2.0e-3): a few roundings, or a short running sum. A
    bf16 output has no narrower common type; errors near 1 (a stalled accumulator
    or a wrong formula) are not rounding-sized and give None.
    """
    if not out_dtype.is_floating_point:
        return None
    for narrow in (torch.bfloat16, torch.float16):
        eps = torch.finfo(narrow).eps
        if eps > torch.finfo(out_dtype).eps and eps / 32 <= rel_l2 <= 2 * eps:
            return narrow
    return None
