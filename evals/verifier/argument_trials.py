"""The trials with one argument other than a size varied: an ``eps``, a slope, a ``dim``.

Every other trial builds the reference and the candidate from ``get_init_inputs()`` as the
problem gives it, so a kernel that ignores its ``eps`` and uses ``1e-5``, or reduces the last
axis whatever ``dim`` says, passes them all. Here each variation the parent planned
(``problem/init_arguments.py``) gets one trial on normal inputs at the behaviour sizes,
after the size sets: the problem is loaded with the argument set to the first value of its
ladder that the reference can run, that the reference itself meets the tolerance at, and
whose answer differs from the default's by more than the tolerance (a candidate that kept
the default would be seen). A variation with no such value (the reference ignores the
argument, or cannot take another value) is skipped and recorded, never held against the
candidate. A candidate right at the default and wrong here is rejected as
``hardcoded_argument``, with the argument, its default and the value named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kgen.evals.checks.compare import compare_output
from kgen.evals.problem.init_arguments import ArgumentVariation, Number
from kgen.evals.verdict import Rejected, RejectionClass, SkipTrial
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.trial_parts import inputs_for, problem_at, references
from kgen.evals.verifier.trials import trial

if TYPE_CHECKING:
    from kgen.evals.problem.format import LoadedProblem

#: Failures that mean the candidate's answer is wrong for the varied value: renamed
#: ``hardcoded_argument``. Others (an input mutated, a sandbox violation) keep their class.
WRONG_ANSWER = frozenset({
    RejectionClass.MISMATCH, RejectionClass.WRONG_OUTPUT_STRUCTURE, RejectionClass.NAN_OR_INF,
    RejectionClass.RUNTIME_ERROR, RejectionClass.CONSTRUCTION_ERROR, RejectionClass.SHAPE_SPECIALISATION,
    RejectionClass.PARTIAL_OUTPUT, RejectionClass.UNWRITTEN_OUTPUT, RejectionClass.INPUT_DISTRIBUTION,
})


def _reference_answer(ctx: VerifierContext, problem: LoadedProblem, seed: int) -> tuple[list[Any], list[Any], list[Any]]:
    """The inputs, and the reference's answer in the problem's dtypes and in fp64, built as
    ``trial_parts.models`` builds the reference (same seed, same order of draws)."""
    torch = ctx.torch
    inputs = inputs_for(ctx, problem, seed, "normal")
    torch.manual_seed(seed)
    init = problem.get_init_inputs()
    torch.manual_seed(seed)
    reference = problem.model_class(*init).to(ctx.device)
    native, ref64 = references(ctx, reference, inputs)
    return inputs, native, ref64


def _same_inputs(torch: Any, a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _misses(ctx: VerifierContext, outputs: list[Any], ref64: list[Any]) -> bool:
    """Whether ``outputs`` would fail against ``ref64``: another structure, or an error past the tolerance."""
    torch = ctx.torch
    if len(outputs) != len(ref64):
        return True
    for i, (out, ref) in enumerate(zip(outputs, ref64, strict=True)):
        if not (isinstance(out, torch.Tensor) and isinstance(ref, torch.Tensor)):
            if out != ref:
                return True
            continue
        if out.shape != ref.shape:
            return True
        if not out.is_floating_point():
            if not torch.equal(out.to(ref.dtype), ref):
                return True
        elif not compare_output(i, out, ref, precision=ctx.precision).passed:
            return True
    return False


def chosen_value(ctx: VerifierContext, variation: ArgumentVariation, sizes: dict[str, int], seed: int) -> tuple[Number | None, str]:
    """The first value of the ladder the trial can judge the candidate at, or None and why none."""
    default_inputs, default_native, _ = _reference_answer(ctx, problem_at(ctx, sizes), seed)
    reasons: list[str] = []
    for value in variation.values:
        try:
            problem = problem_at(ctx, sizes, {variation.key: value})
            inputs, native, ref64 = _reference_answer(ctx, problem, seed)
        except Exception as exc:  # noqa: BLE001 - the problem's own limits (a ProblemError, a bad axis), not the candidate's
            reasons.append(f"{value!r}: the reference cannot run it ({type(exc).__name__})")
            continue
        if _misses(ctx, native, ref64):
            reasons.append(f"{value!r}: the reference misses its own tolerance")
            continue
        if variation.equivalent or not _same_inputs(ctx.torch, inputs, default_inputs):
            return value, ""
        if _misses(ctx, default_native, ref64):
            return value, ""
        reasons.append(f"{value!r}: the reference's answer does not change beyond the tolerance")
    return None, "; ".join(reasons)


def run_argument_trials(ctx: VerifierContext) -> list[str]:
    """One trial per planned variation; the variations tried, as the report names them."""
    tried: list[str] = []
    sizes = ctx.behaviour_sizes
    seeds = ctx.request.seeds
    for i, variation in enumerate(ctx.request.argument_variations):
        seed = seeds[i % len(seeds)]
        value, why = chosen_value(ctx, variation, sizes, seed)
        if value is None:
            ctx.report.skipped.append(
                f"argument {variation.name}{variation.place} (default {variation.default!r}) not varied: {why}"
            )
            continue
        try:
            trial(ctx, problem_at(ctx, sizes, {variation.key: value}), seed, "normal", generated=True)
        except SkipTrial as exc:
            ctx.report.skipped.append(str(exc))
            continue
        except Rejected as exc:
            if exc.rejection not in WRONG_ANSWER:
                raise
            raise Rejected(
                RejectionClass.HARDCODED_ARGUMENT,
                f"right with the problem's {variation.name}={variation.default!r}{variation.place}, wrong with "
                f"{variation.name}={value!r}: "
                f"the kernel does not follow this argument ({exc.rejection.value}: {exc})",
                {"argument": variation.key, "default": variation.default, "value": value, **exc.evidence},
            ) from exc
        tried.append(variation.describe(value))
        ctx.memory.free_between_trials()
    return tried
