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
misses by all of it), else ``input_insensitive``.

Rounding in a correct kernel moves its answer too, by about the same amount whatever the
draws; the signal between two draws is sometimes far below its typical size (two draws
that happen to give nearly the same ratio). Judged on such a pair, a correct kernel's
rounding is most of the change, and it was rejected on about one seed in seventy. So the
judged pair is the one of :data:`DRAWS` draws whose answers differ most (drawn only once
an output is low-signal), and an output is judged only where the change is at least
:data:`ROUNDING_FLOOR` unit roundoffs of the output's dtype and the reference computed in
its own dtypes misses it by at most :data:`MAX_NATIVE_MISS`. Where rounding swamps the
signal (usual for bf16 outputs) or the output does not move at all, the note says the
check could not judge it, and nothing is held against the candidate.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kgen.evals.checks.candidate_call import clone_value
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
MAX_NATIVE_MISS = 0.1
#: A change below this many unit roundoffs of the output's dtype is not judged: a correct
#: kernel's own rounding can be a large part of it.
ROUNDING_FLOOR = 16.0
#: Draws the judged pair is chosen from once an output is low-signal (the pair whose answers
#: differ most): with two draws, a correct fp32 kernel missed by over half on ~1.4% of seeds;
#: with five (ten pairs), on none of 1,000 (the largest miss was 10%).
DRAWS = 5
#: Seed offset between draws (the first two are the ghost check's, so they are draws the
#: trials know).
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


def _unit_roundoff(dtype: Any) -> float:
    import torch

    return float(torch.finfo(dtype).eps) / 2


def _widest_pair(outputs64: list[list[Any]], index: int) -> tuple[int, int]:
    """The two draws whose fp64 answers for output ``index`` differ most."""
    pairs = [(a, b) for a in range(len(outputs64)) for b in range(a + 1, len(outputs64))]
    return max(pairs, key=lambda p: _norm(outputs64[p[0]][index] - outputs64[p[1]][index]))


def run_input_sensitivity(ctx: VerifierContext, problem, seed: int) -> None:
    """Note low-signal outputs; for each one the reference resolves, the candidate's change
    between two draws must follow the reference's (``input_insensitive`` otherwise)."""
    seeds = [seed + k * SECOND_DRAW for k in range(DRAWS)]
    what = f"input-sensitivity check, seeds {seeds[0]} to {seeds[-1]}"
    reference, candidate = models(ctx, problem, seed)

    def reference_draw(run_seed: int) -> tuple[list[Any], list[Any]]:
        # only the outputs are kept: inputs are drawn again from their seed for the candidate
        ctx.memory.free_between_trials()
        return references(ctx, reference, inputs_for(ctx, problem, run_seed, "normal"))

    native, ref = (list(x) for x in zip(*(reference_draw(s) for s in seeds[:2]), strict=True))
    low = [r for r in signal_readings(ref[0], ref[1], native[0], ctx.precision) if r.low_signal]
    if not low:
        return
    keep = {r.index for r in low}

    def trimmed(outputs: list[Any]) -> list[Any]:
        # a low-signal output is usually a scalar beside large ones: only it is kept per draw
        return [o if i in keep else None for i, o in enumerate(outputs)]

    poison_like = native[0]  # every draw's outputs have these shapes
    native, ref = [trimmed(n) for n in native], [trimmed(r) for r in ref]
    for run_seed in seeds[2:]:
        more_native, more_ref = reference_draw(run_seed)
        native.append(trimmed(more_native))
        ref.append(trimmed(more_ref))
    judged: list[tuple[int, int, int]] = []
    for r in low:
        a, b = _widest_pair(ref, r.index)
        d_ref = ref[a][r.index] - ref[b][r.index]
        change = _norm(d_ref) / max(_norm(ref[a][r.index]), 1e-300)
        floor = ROUNDING_FLOOR * _unit_roundoff(native[a][r.index].dtype)
        if change == 0.0 or change < floor or miss(native[a][r.index] - native[b][r.index], d_ref) > MAX_NATIVE_MISS:
            _note(ctx, f"output {r.index} is low-signal: it moves by {r.change:.2g} of its norm between two input "
                       f"draws ({r.change / r.tolerance:.2g}x its tolerance {r.tolerance:g}), so a near-constant "
                       "answer could pass; the reference in its own dtype cannot resolve that change, so "
                       f"whether the kernel follows its inputs is not judged ({what})")
            continue
        _note(ctx, f"output {r.index} is low-signal: it moves by {r.change:.2g} of its norm between two input draws "
                   f"({r.change / r.tolerance:.2g}x its tolerance {r.tolerance:g}); the kernel's own change between "
                   f"the two draws that differ most is checked against the reference's ({what})")
        judged.append((r.index, a, b))
    if not judged or ctx.request.reference_self_test:
        return
    outputs: dict[int, list[Any]] = {}

    def candidate_draw(k: int) -> list[Any]:
        if k not in outputs:
            ctx.memory.free_between_trials()
            inputs = inputs_for(ctx, problem, seeds[k], "normal")
            call = watched_call(ctx, candidate, inputs, poison_like, f"{what}, draw {k + 1}")
            # copied: a candidate that hands out one buffer would otherwise overwrite draw a with b
            outputs[k] = [clone_value(o) if i in keep else None for i, o in enumerate(call.outputs)]
        return outputs[k]

    for i, a, b in judged:
        d_ref = ref[a][i] - ref[b][i]
        out_a, out_b = candidate_draw(a)[i], candidate_draw(b)[i]
        missed = miss(out_a.to(d_ref.device) - out_b.to(d_ref.device), d_ref)
        if missed > MAX_CANDIDATE_MISS:
            raise Rejected(
                RejectionClass.INPUT_INSENSITIVE,
                f"output {i} does not follow its inputs: between two input draws the reference moves by "
                f"{_norm(d_ref) / max(_norm(ref[a][i]), 1e-300):.2g} of its norm, and the kernel's change misses "
                f"that by {missed:.0%} (at most {MAX_CANDIDATE_MISS:.0%} may be; a constant misses by 100%): "
                f"a near-constant or subsampled answer that the tolerance alone cannot tell ({what})",
                {"output": i, "miss": missed},
            )


def _note(ctx: VerifierContext, note: str) -> None:
    if note not in ctx.report.notes:
        ctx.report.notes.append(note)
