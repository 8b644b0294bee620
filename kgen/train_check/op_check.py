"""Each kernel's recorded calls (`live_calls`) against its catalog problem's reference in fp64.

The same judgement the verifier makes (`evals.checks.compare.compare_output`: its tolerance per
output dtype, under the IEEE precision policy), on the tensors a training run produced rather
than on drawn inputs: real activations, real Zipf token counts. A failure here is the kernel's
own error, whatever the loss curve shows."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kgen.train_check.live_calls import LiveCall


class OpCheck(BaseModel):
    """One recorded call judged: the worst output's error against its tolerance."""

    problem: str
    step: int
    shapes: str
    error: float
    tolerance: float
    ok: bool
    message: str = ""


def _fp64(value: Any) -> Any:
    import torch

    return value.to(torch.float64) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _reference_outputs(call: LiveCall) -> tuple[list[Any], list[Any]]:
    """The catalog problem's ``Model`` on the call's inputs: in their own dtypes, and in fp64."""
    import torch

    from kgen.evals.problem.catalog import resolve_problem
    from kgen.evals.problem.format import flatten_outputs, load_problem

    loaded = load_problem(resolve_problem(call.problem).path)
    with torch.no_grad():
        reference = loaded.model_class(*call.init_args)
        native = flatten_outputs(reference(*[a.clone() if isinstance(a, torch.Tensor) else a for a in call.args]))
        return native, flatten_outputs(reference.double()(*[_fp64(a) for a in call.args]))


def judge_call(call: LiveCall) -> OpCheck:
    """The call's outputs against the fp64 reference; a count, shape or dtype that differs from the
    reference's fails outright, as it does in the verifier (`compare.check_structure`)."""
    from kgen.evals.checks.compare import (
        ComparisonFailure,
        check_structure,
        compare_output,
        mismatch_text,
    )

    shapes = ", ".join("x".join(map(str, a.shape)) for a in call.args if hasattr(a, "shape"))
    native, ref64 = _reference_outputs(call)
    try:
        check_structure(call.outputs, native)
    except ComparisonFailure as exc:
        return OpCheck(problem=call.problem, step=call.step, shapes=shapes, error=float("inf"), tolerance=0.0,
                       ok=False, message=str(exc))
    comparisons = [compare_output(i, out, ref) for i, (out, ref) in enumerate(zip(call.outputs, ref64, strict=True))]
    worst = max(comparisons, key=lambda c: c.rel_l2_error / max(c.tolerance_rel_l2, 1e-300))
    failed = [c for c in comparisons if not c.passed]
    return OpCheck(problem=call.problem, step=call.step, shapes=shapes, error=worst.rel_l2_error,
                   tolerance=worst.tolerance_rel_l2, ok=not failed, message=mismatch_text(failed[0]) if failed else "")


def check_calls(calls: list[LiveCall]) -> list[OpCheck]:
    """Every recorded call judged, in the order they were made."""
    return [judge_call(call) for call in calls]
