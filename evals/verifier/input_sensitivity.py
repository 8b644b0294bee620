"""Low-signal problems, and the input-sensitivity check that keeps a near-constant answer out.

A problem whose reference output barely depends on its inputs (the mean of a bounded
statistic over a big batch, a ratio that the law of large numbers pins near one) lets a
constant, or an estimate from a subsample, pass the tolerance: between two input draws the
answer moves by less than the tolerance allows. The reference is measured on two
independent ``normal`` draws at the sizes the behaviour checks use, with no candidate
involved; an output whose change ``d_ref`` is below :data:`LOW_SIGNAL_FACTOR` times its
tolerance (relative to its norm) is low-signal at these sizes, and the report's notes say so.

For such an output the candidate must follow the change: its own ``d_cand`` between the
same two draws may miss ``d_ref`` by at most :data:`MAX_CANDIDATE_MISS` of it (a constant
misses by all of it), else ``input_insensitive``. The check is only as good as the
problem's own reference: where the reference computed in its own dtypes misses ``d_ref``
by more than :data:`MAX_NATIVE_MISS` (rounding swamps the signal, usual for bf16 outputs)
or the output does not move at all, the note says the check could not judge it, and
nothing is held against the candidate.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kgen.evals.problem.policies import Precision
from kgen.evals.problem.tolerances import tolerance_for
from kgen.evals.verdict import Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.trial_parts import inputs_for, models, references
from kgen.evals.verifier.watched_call import watched_call

#: An output whose change between two draws is below this many tolerances (relative to its
#: norm) is low-signal: a constant sits within a tenth of the signal of passing.
LOW_SIGNAL_FACTOR = 10.0
#: Share of the reference's change a candidate's change may miss (a constant misses all of it).
MAX_CANDIDATE_MISS = 0.5
#: Share of the fp64 change the reference in its own dtypes may miss for the check to judge.
MAX_NATIVE_MISS = 0.25
#: Seed offset of the second draw (the ghost check's, so the draws are ones the trials know).
SECOND_DRAW = 7907


class SignalReading(BaseModel):
    """How much one output moves between two draws, relative to its norm and its tolerance."""

    index: int
    change: float  # ||ref(A) - ref(B)|| / ||ref(A)||, in fp64
    tolerance: float  # the output dtype's rel-L2 tolerance

    @property
    def low_signal(self) -> bool:
        return self.change < LOW_SIGNAL_FACTOR * self.tolerance


def _norm(t: Any) -> float:
    return float(t.double().norm().item())


def signal_readings(first64: list[Any], second64: list[Any], native: list[Any],
                    precision: Precision = Precision.IEEE) -> list[SignalReading]:
    """One reading per floating output of the fp64 reference on two draws (same shapes)."""
    import torch

    readings = []
    for i, (a, b, n) in enumerate(zip(first64, second64, native, strict=False)):
        if not all(isinstance(t, torch.Tensor) for t in (a, b, n)) or not n.is_floating_point():
            continue
        if a.shape != b.shape or a.numel() == 0:
            continue
        scale = _norm(a)
        change = _norm(a - b) / scale if scale > 0 else 0.0
        readings.append(SignalReading(index=i, change=change, tolerance=tolerance_for(n.dtype, precision).rel_l2))
    return readings


def miss(change: Any, expected: Any) -> float:
    """||change - expected|| / ||expected||: how far one change between draws is from another."""
    return _norm(change.double() - expected.double()) / _norm(expected)


def run_input_sensitivity(ctx: VerifierContext, problem, seed: int) -> None:
    """Note low-signal outputs; for each one the reference resolves, the candidate's change
    between two draws must follow the reference's (``input_insensitive`` otherwise)."""
    what = f"input-sensitivity check, seeds {seed} and {seed + SECOND_DRAW}"
    reference, candidate = models(ctx, problem, seed)
    runs = []
    for run_seed in (seed, seed + SECOND_DRAW):
        ctx.memory.free_between_trials()
        inputs = inputs_for(ctx, problem, run_seed, "normal")
        runs.append((inputs, references(ctx, reference, inputs)))
    (first_inputs, (native_a, ref_a)), (second_inputs, (native_b, ref_b)) = runs
    low = [r for r in signal_readings(ref_a, ref_b, native_a, ctx.precision) if r.low_signal]
    if not low:
        return
    judged = []
    for r in low:
        d_ref = ref_a[r.index] - ref_b[r.index]
        if r.change == 0.0 or miss(native_a[r.index] - native_b[r.index], d_ref) > MAX_NATIVE_MISS:
            _note(ctx, f"output {r.index} is low-signal: it moves by {r.change:.2g} of its norm between two input "
                       f"draws ({r.change / r.tolerance:.2g}x its tolerance {r.tolerance:g}), so a near-constant "
                       "answer could pass; the reference in its own dtype cannot resolve that change, so "
                       f"whether the kernel follows its inputs is not judged ({what})")
            continue
        _note(ctx, f"output {r.index} is low-signal: it moves by {r.change:.2g} of its norm between two input draws "
                   f"({r.change / r.tolerance:.2g}x its tolerance {r.tolerance:g}); the kernel's own change between "
                   f"the draws is checked against the reference's ({what})")
        judged.append(r.index)
    if not judged or ctx.request.reference_self_test:
        return
    out_a = watched_call(ctx, candidate, first_inputs, native_a, what + ", first draw").outputs
    out_b = watched_call(ctx, candidate, second_inputs, native_b, what + ", second draw").outputs
    for i in judged:
        d_ref = ref_a[i] - ref_b[i]
        missed = miss(out_a[i].to(d_ref.device) - out_b[i].to(d_ref.device), d_ref)
        if missed > MAX_CANDIDATE_MISS:
            raise Rejected(
                RejectionClass.INPUT_INSENSITIVE,
                f"output {i} does not follow its inputs: between two input draws the reference moves by "
                f"{_norm(d_ref) / max(_norm(ref_a[i]), 1e-300):.2g} of its norm, and the kernel's change misses "
                f"that by {missed:.0%} (at most {MAX_CANDIDATE_MISS:.0%} may be; a constant misses by 100%): "
                f"a near-constant or subsampled answer that the tolerance alone cannot tell ({what})",
                {"output": i, "miss": missed},
            )


def _note(ctx: VerifierContext, note: str) -> None:
    if note not in ctx.report.notes:
        ctx.report.notes.append(note)
