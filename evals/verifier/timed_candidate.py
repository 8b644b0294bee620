"""The candidate timed on inputs it cannot predict, and the outputs of its timed calls checked.

The trials judged the candidate one watched call at a time; what it does in a timing loop
(hundreds of calls back to back on a few input sets) is judged here, on the timed calls
themselves:

* **Input sets.** :data:`TIMING_INPUT_SETS` distinct sets of buffers, drawn in a random order
  per call (``timing/timed_samples.py``), plus :data:`FRESH_INPUT_SETS` sets of *fresh
  values* that are never handed to the candidate as buffers: a few timed calls chosen at
  random get those values copied into their buffers just before their flush. A problem too
  big for its fp64 reference on the device (its inputs are gigabytes, far past any L2) gets
  one set and no fresh values (the memory plan, ``ctx.memory``, has no room for more), and
  fresh values are drawn only where the device's free memory holds them beside the timed
  calls' outputs (:func:`fresh_sets_fit`).
* **Sampled outputs.** The chosen calls' outputs are cloned right after their end event and
  compared with the fp64 reference of the values those calls were given, after the timing;
  and the last call the timing made (its last synced window) is compared too.

A wrong output of a timed call is ``stale_output``: the verification table's "caching
across calls / telling checks from timing" class. Every way to be wrong only while timed
(returning a cached output for an address whose values changed, computing every k-th call
and handing back the last result, merging calls into a batch) hands back an output from
other inputs than the call's, which is what that class names; a new class would split one
cheat by the mechanism the candidate happened to use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgen.evals.checks.compare import ComparisonFailure, check_structure, outputs_failure
from kgen.evals.problem.format import flatten_outputs
from kgen.evals.problem.memory_plan import ReferencePlacement
from kgen.evals.timing.timed_samples import SAMPLED_CALLS, TimedSample, TimedSampler
from kgen.evals.verdict import Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.trial_parts import inputs_for, references

#: Input sets the timed calls are drawn from, so no trial reuses the previous trial's buffers.
TIMING_INPUT_SETS = 3
#: Sets of fresh values written into a sampled call's buffers (never the candidate's buffers):
#: two, so a buffer refreshed once can always be given values it has not held.
FRESH_INPUT_SETS = 2


def fresh_sets_fit(free_bytes: int, inputs_bytes: int, outputs_bytes: int | None) -> bool:
    """Whether :data:`FRESH_INPUT_SETS` more input sets fit beside the timed calls' outputs
    (one call's, the sampled calls' clones, the last call's) with a quarter to spare."""
    outputs = (SAMPLED_CALLS + 2) * (outputs_bytes or inputs_bytes)
    return free_bytes - outputs > 1.25 * FRESH_INPUT_SETS * inputs_bytes


def timing_inputs(ctx: VerifierContext, problem: Any, seed: int) -> tuple[list[list[Any]], list[list[Any]]]:
    """(input sets, fresh value sets) for timing at ``problem``'s sizes, drawn from ``seed``;
    no fresh sets where the device has no room for them next to the timed calls' outputs."""
    big = ctx.memory.placement(problem.sizes) is ReferencePlacement.HOST
    sets = [inputs_for(ctx, problem, seed + 1000 + i, "normal") for i in range(1 if big else TIMING_INPUT_SETS)]
    plan = ctx.memory.decision(problem.sizes)[0]
    free = int(ctx.torch.cuda.mem_get_info(ctx.device)[0]) if ctx.device.type == "cuda" else 0
    room = not big and fresh_sets_fit(free, plan.inputs_bytes, plan.outputs_bytes)
    fresh = [inputs_for(ctx, problem, seed + 1500 + i, "normal") for i in range(FRESH_INPUT_SETS)] if room else []
    return sets, fresh


def _judge(ctx: VerifierContext, reference: Any, inputs: Sequence[Any], outputs: list[Any], what: str) -> None:
    native, ref64 = references(ctx, reference, list(inputs))
    try:
        check_structure(outputs, native)
    except ComparisonFailure as exc:
        raise Rejected(RejectionClass.STALE_OUTPUT, f"{what} returned outputs of another structure: {exc}") from exc
    failure = outputs_failure(outputs, ref64, ctx.precision)
    if failure is not None:
        raise Rejected(
            RejectionClass.STALE_OUTPUT,
            f"{what} returned a wrong output: {failure}; right in every check before timing, wrong while timed: "
            "work merged, skipped or cached across timed calls",
        )


def _sample_text(sample: TimedSample, trials: int) -> str:
    fresh = ", its buffers given new values just before" if sample.fresh is not None else ""
    return f"timed call {sample.trial + 1} of {trials} (drawn at random{fresh})"


def check_timed_outputs(ctx: VerifierContext, reference: Any, sampler: TimedSampler,
                        input_sets: Sequence[Sequence[Any]], trials: int, last: dict[str, Any]) -> int:
    """Every sampled timed call's outputs, and the last call's, against the fp64 reference;
    raises ``Rejected(stale_output)`` on the first wrong one. Returns how many were checked."""
    for sample in sampler.samples:
        _judge(ctx, reference, sampler.inputs_of(sample, input_sets), sample.outputs, _sample_text(sample, trials))
    checked = len(sampler.samples)
    if "out" in last:
        # the last call the timing made; its buffers hold whatever values they were last given
        outputs = [o.clone() if isinstance(o, ctx.torch.Tensor) else o for o in flatten_outputs(last["out"])]
        _judge(ctx, reference, last["args"], outputs, "the last call of the timing")
        checked += 1
    return checked
