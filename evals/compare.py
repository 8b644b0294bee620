"""Compare a candidate's outputs with the fp64 reference, output by output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from kgen.evals.result import OutputComparison, RejectionClass
from kgen.evals.tolerances import tolerance_for


class ComparisonFailure(Exception):
    def __init__(self, rejection: RejectionClass, message: str):
        super().__init__(message)
        self.rejection = rejection


def flatten_outputs(value: Any) -> list[Any]:
    """A forward may return one tensor or a (nested) tuple/list of them."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten_outputs(item)]
    return [value]


def check_structure(outputs: Sequence[Any], expected: Sequence[torch.Tensor]) -> None:
    """Same number of outputs, each a plain tensor of the reference's shape and dtype."""
    if len(outputs) != len(expected):
        raise ComparisonFailure(
            RejectionClass.WRONG_OUTPUT_STRUCTURE,
            f"returned {len(outputs)} output(s), the reference returns {len(expected)}",
        )
    for i, (out, ref) in enumerate(zip(outputs, expected, strict=True)):
        if type(out) is not torch.Tensor:
            raise ComparisonFailure(
                RejectionClass.WRONG_OUTPUT_STRUCTURE,
                f"output {i} is a {type(out).__name__}, not a plain torch.Tensor",
            )
        if tuple(out.shape) != tuple(ref.shape):
            raise ComparisonFailure(
                RejectionClass.WRONG_OUTPUT_STRUCTURE,
                f"output {i} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}",
            )
        if out.dtype != ref.dtype:
            raise ComparisonFailure(
                RejectionClass.WRONG_OUTPUT_STRUCTURE,
                f"output {i} has dtype {str(out.dtype).removeprefix('torch.')}, "
                f"expected {str(ref.dtype).removeprefix('torch.')}",
            )


def _rel_l2(diff: torch.Tensor, ref: torch.Tensor) -> float:
    ref_norm = ref.norm().item()
    diff_norm = diff.norm().item()
    if ref_norm == 0.0:
        return 0.0 if diff_norm == 0.0 else float("inf")
    return diff_norm / ref_norm


def compare_output(
    index: int,
    out: torch.Tensor,
    ref64: torch.Tensor,
    ref_native: torch.Tensor | None = None,
    scale: float = 1.0,
    dtype: torch.dtype | None = None,
) -> OutputComparison:
    """Judge one output against the fp64 reference; ``ref_native`` (the reference run in
    the problem's own dtypes) is reported as evidence of how hard the tolerance is.
    ``scale`` multiplies the tolerance of ``dtype`` (default: the output's own; the
    conditioning check judges an fp64 output by half of its problem dtype's tolerance)."""
    base = tolerance_for(dtype or out.dtype)
    tol = base.model_copy(update={k: v * scale for k, v in base.model_dump().items()})
    # Compared where the reference lives: on a GPU, moving full-size outputs to the host costs more than the check.
    ref = ref64.detach().to(torch.float64)
    got = out.detach().to(ref.device, torch.float64)
    ref_finite = torch.isfinite(ref)
    bad_nonfinite = ref_finite & ~torch.isfinite(got)
    # Where the reference itself is non-finite, the candidate must match it exactly.
    nonfinite_mismatch = ~ref_finite & ~((got == ref) | (torch.isnan(got) & torch.isnan(ref)))
    got_f = torch.where(ref_finite, got, torch.zeros_like(got))
    ref_f = torch.where(ref_finite, ref, torch.zeros_like(ref))
    diff = (got_f - ref_f).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    rms = ref_f.pow(2).mean().sqrt().item() if ref_f.numel() else 0.0
    allowed = tol.rtol * ref_f.abs() + tol.atol * rms
    elem_bad = (diff > allowed) | bad_nonfinite | nonfinite_mismatch
    rel_l2 = _rel_l2(diff, ref_f)
    max_abs = diff.max().item() if diff.numel() else 0.0
    worst = (
        [int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)] if diff.numel() else []
    )
    native_err = None
    if ref_native is not None and ref_native.dtype.is_floating_point:
        native = ref_native.detach().to(ref.device, torch.float64)
        native_err = _rel_l2(torch.where(ref_finite, native, torch.zeros_like(native)) - ref_f, ref_f)
    mismatched = elem_bad.sum().item() / max(elem_bad.numel(), 1)
    return OutputComparison(
        index=index,
        shape=list(out.shape),
        dtype=str(out.dtype).removeprefix("torch."),
        rel_l2_error=rel_l2,
        max_abs_error=max_abs,
        worst_index=worst,
        mismatched_fraction=mismatched,
        nonfinite_count=int(bad_nonfinite.sum().item()),
        tolerance_rel_l2=tol.rel_l2,
        reference_dtype_rel_l2_error=native_err,
        passed=bool(rel_l2 <= tol.rel_l2 and mismatched == 0.0),
    )


def failure_of(comparisons: Sequence[OutputComparison]) -> ComparisonFailure | None:
    """The rejection these comparisons add up to, or None if all passed."""
    failed = [c for c in comparisons if not c.passed]
    if not failed:
        return None
    c = failed[0]
    if c.nonfinite_count:
        return ComparisonFailure(
            RejectionClass.NAN_OR_INF,
            f"output {c.index} has {c.nonfinite_count} NaN/Inf value(s) where the reference is finite",
        )
    return ComparisonFailure(
        RejectionClass.MISMATCH,
        f"output {c.index} differs from the fp64 reference: rel-L2 error {c.rel_l2_error:.3g} "
        f"(tolerance {c.tolerance_rel_l2:.3g}), {c.mismatched_fraction:.2%} of elements outside "
        f"tolerance, worst at {tuple(c.worst_index)} (|diff| {c.max_abs_error:.3g})",
    )
