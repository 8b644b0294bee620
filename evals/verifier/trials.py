"""One correctness trial: the candidate against the fp64 reference at one seed, one set of
sizes and one input distribution, and what a failed trial is named.

The candidate runs twice per trial, before and after the reference (no reference output
can be lying in freed memory for it to find), each call watched (``watched_call.py``);
both calls' outputs are compared with the fp64 reference, checked for poison left
unwritten and for a buffer shared between the two calls. A trial the problem's own
reference cannot judge (made-up sizes it cannot run, outputs its dtype cannot hold to the
tolerance) is skipped, never held against the candidate. On a GPU, a wrong answer whose
reruns on the same inputs disagree with each other is named a race, whatever the trial that
found it would have called it (``race_check.race_in_failure``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kgen.evals.checks.compare import ComparisonFailure, check_structure, compare_output, failure_of
from kgen.evals.checks.error_shape import product_operands
from kgen.evals.checks.poison import check_unwritten
from kgen.evals.checks.precision_probe import ACCUMULATION_PROBES as PROBE_DISTRIBUTIONS
from kgen.evals.problem.format import ProblemError, load_problem, sizes_text
from kgen.evals.problem.input_distributions import (
    SELF_CHECKED,
    distributions_for,
    inputs_phrase,
    representable,
    undefined,
    vanishes,
)
from kgen.evals.verdict import Rejected, RejectionClass, SkipTrial, Trial
from kgen.evals.verifier.context import VerifierContext, save_report
from kgen.evals.verifier.failure_diagnosis import (
    diagnose,
    explain,
    ill_conditioned,
    tf32_ill_conditioned,
)
from kgen.evals.verifier.failure_order import after_probes, name_failure
from kgen.evals.verifier.race_check import race_in_failure
from kgen.evals.verifier.trial_parts import inputs_for, models, problem_at, references
from kgen.evals.verifier.watched_call import check_aliases, watched_call

if TYPE_CHECKING:
    from kgen.evals.problem.format import LoadedProblem

#: Names of a wrong answer that a race gives too: a race shows first where a trial makes the
#: kernel's programs overlap (a long row under the precision probe, a grown size set), and is
#: then named by that trial. Reruns that disagree with each other rename it; a deterministic
#: fault's reruns agree and its name stands.
RACE_SUSPECTS = frozenset({
    RejectionClass.MISMATCH, RejectionClass.LOW_PRECISION_ACCUMULATION,
    RejectionClass.INPUT_DISTRIBUTION, RejectionClass.SHAPE_SPECIALISATION,
})


def trial(ctx: VerifierContext, problem: LoadedProblem, seed: int, distribution: str, generated: bool = False) -> Trial:
    """Run one trial and record it in the report; raises ``Rejected`` with the failure named,
    ``SkipTrial`` when the reference cannot judge it."""

    torch = ctx.torch
    started = time.monotonic()
    what = f"seed {seed}, {inputs_phrase(distribution)}, sizes {sizes_text(problem.sizes)}"
    if problem.arguments:
        what += ", " + ", ".join(f"{k}={v!r}" for k, v in problem.arguments.items())
    inputs = inputs_for(ctx, problem, seed, distribution)
    reference, candidate = models(ctx, problem, seed)
    if generated:
        try:
            references(ctx, reference, inputs)
        except Exception as exc:  # noqa: BLE001 - the problem's own limits, not the candidate's
            raise SkipTrial(f"{what}: the reference cannot run these made-up sizes ({type(exc).__name__}: {exc})") from exc
    result = Trial(seed=seed, sizes=problem.sizes, distribution=distribution, arguments=problem.arguments)
    ctx.report.trials.append(result)
    save_report(ctx)  # if the candidate kills the process now, the parent knows where
    # The candidate runs before the reference: no reference output can be lying in freed memory.
    before = watched_call(ctx, candidate, inputs, ctx.previous_outputs, what + ", before the reference", aliases=False)
    if ctx.product_operands is None and problem.sizes == ctx.request.size_sets[0]:
        ctx.product_operands = product_operands(reference, inputs)
    native, ref64 = references(ctx, reference, inputs)
    unrepresentable = [
        i for i, (r64, rn) in enumerate(zip(ref64, native, strict=True))
        if not representable(r64, rn.dtype) or (distribution in SELF_CHECKED and (vanishes(r64) or undefined(r64)))
    ]
    if not unrepresentable and (distribution in SELF_CHECKED or generated):
        # A distribution or made-up size set that changes the problem's conditioning (a norm
        # over one element, a mean shifted by hundreds of sigmas) is fair only where the
        # problem's own reference, in its own dtypes, still meets the tolerance, and where
        # one fp32 rounding of every input moves the answer by less than half of it (under the
        # tf32 policy: where TF32 operands do).
        own = [compare_output(i, rn, r64, precision=ctx.precision) for i, (rn, r64) in enumerate(zip(native, ref64, strict=True))
               if isinstance(rn, torch.Tensor) and rn.is_floating_point()]
        unrepresentable = ([c.index for c in own if not c.passed] or ill_conditioned(ctx, reference, inputs, native, ref64)
                           or tf32_ill_conditioned(ctx, reference, inputs, native, ref64))
    if unrepresentable:
        ctx.report.trials.remove(result)
        raise SkipTrial(
            f"{what}: output(s) {unrepresentable} cannot be computed in their dtype to the tolerance at "
            "these inputs (the problem's own reference misses it too, or under the tf32 policy the "
            "reference on TF32-rounded operands does)"
        )
    # Judged now that the reference's own aliases (a view it returns) are known.
    check_aliases(ctx, before.aliased_outputs, what + ", before the reference", before.shared_outputs)
    after = watched_call(ctx, candidate, inputs, native, what + ", after the reference")
    shared = [
        i for i, (a, b) in enumerate(zip(before.outputs, after.outputs, strict=False))
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.numel()
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    ]
    if shared:
        raise Rejected(
            RejectionClass.STALE_OUTPUT,
            f"output(s) {shared} of two calls share one buffer: each call overwrites the result a "
            f"caller kept from the last one ({what})",
        )
    result.launches = len(after.launches)
    if not ctx.first_launches:
        ctx.first_launches = list(after.launches)
    for outputs in (before.outputs, after.outputs):
        try:
            check_structure(outputs, native)
        except ComparisonFailure as exc:
            raise Rejected(exc.rejection, f"{exc} ({what})") from exc
        check_unwritten(outputs, result, what, ctx.request.size_sets[0], "normal" in ctx.passed_distributions)
        result.outputs = [
            compare_output(i, out, r64, rn, precision=ctx.precision)
            for i, (out, r64, rn) in enumerate(zip(outputs, ref64, native, strict=True))
        ]
        failure = failure_of(result.outputs)
        if failure is not None:
            result.seconds = time.monotonic() - started
            save_report(ctx)
            failure = explain(ctx, failure, result, outputs, ref64, reference, inputs)
            diagnosis = diagnose(ctx, problem, seed, inputs, ref64, outputs, what, failure)
            named = diagnosis or name_failure(ctx, failure, result, outputs, what)
            if named[0] in RACE_SUSPECTS and (race := race_in_failure(ctx, candidate, inputs, ref64, native, what)):
                named = (RejectionClass.RACE_CONDITION, f"{failure}; {race} ({what})")
            raise Rejected(*named)
    result.passed = True
    result.seconds = time.monotonic() - started
    ctx.passed_distributions.add(distribution)
    # kept for the next trial's poison shapes and stale-output diagnosis; on the host when
    # the device has no room for the reference (its outputs are gigabytes)
    pristine = ctx.memory.reference_device(ctx.sizes_now)
    ctx.previous_outputs = [o.to(pristine) if isinstance(o, torch.Tensor) else o for o in after.outputs]
    save_report(ctx)
    return result


def run_trial(ctx: VerifierContext, sizes: dict[str, int], distribution: str, seed: int, generated: bool) -> bool:
    """One trial of the plan; True when it was skipped (recorded in the report, never held
    against the candidate). A failure is named before it is raised: a mismatch that the
    precision probes make much worse is a narrow accumulator, an error at other sizes after
    the first passed is shape specialisation."""

    try:
        problem = problem_at(ctx, sizes)
        passed = trial(ctx, problem, seed, distribution, generated=generated)
    except ProblemError as exc:
        if not generated:
            raise
        ctx.report.skipped.append(f"sizes {sizes_text(sizes)}: the problem cannot be built at them ({exc})")
        return True
    except SkipTrial as exc:
        ctx.report.skipped.append(str(exc))
        return True
    except Rejected as exc:
        named = exc
        if exc.rejection is RejectionClass.MISMATCH and distribution not in PROBE_DISTRIBUTIONS:
            named = probe_precision(ctx, problem_at(ctx, sizes), seed, exc)
        first = ctx.request.size_sets[0]
        if (exc.rejection in (RejectionClass.RUNTIME_ERROR, RejectionClass.CONSTRUCTION_ERROR)
                and sizes != first and "normal" in ctx.passed_distributions):
            named = Rejected(
                RejectionClass.SHAPE_SPECIALISATION,
                f"right at sizes {sizes_text(first)}, but at sizes {sizes_text(sizes)} {exc}",
            )
        note = size_note(ctx, sizes)
        if note:
            named = Rejected(named.rejection, f"{named}; this size set was tried {note}", named.evidence)
        if named is exc:
            raise
        raise named from exc
    ctx.worst = max([ctx.worst, *(o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300) for o in passed.outputs)])
    del passed
    ctx.memory.free_between_trials()
    return False


def size_note(ctx: VerifierContext, sizes: dict[str, int]) -> str:
    """Why the plan tries ``sizes`` (a threshold set: the comparison of the candidate it crosses)."""
    for i, planned in enumerate(ctx.request.size_sets):
        if planned == sizes and i in ctx.request.size_set_notes:
            return ctx.request.size_set_notes[i]
    return ""


def probe_precision(ctx: VerifierContext, problem: LoadedProblem, seed: int, failure: Rejected) -> Rejected:
    """A mismatch: the probe inputs run too, and if they make it much worse the failure is
    renamed or given a hint by ``failure_order.after_probes`` (a narrow accumulator past the
    baseline; on the baseline a bf16 running sum feeding an fp32 output fails the problem's own
    inputs already, and stays a mismatch with the pattern named). Returns the failure to raise."""

    failed = ctx.report.trials[-1]
    if ctx.request.probe_sizes and ctx.request.probe_sizes != problem.sizes:
        problem = load_problem(ctx.request.problem_path, ctx.request.probe_sizes)
    probes = [d for d in distributions_for(problem.info, problem.get_inputs()) if d in PROBE_DISTRIBUTIONS]
    for probe in probes:
        try:
            trial(ctx, problem, seed, probe)  # a failure records its error ratio
        except (Rejected, SkipTrial):
            continue
    named = after_probes(ctx, failed, failure)
    if named is None:
        return failure
    return Rejected(*named, failure.evidence)
