"""Compare a candidate's outputs with the fp64 reference, output by output."""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from kgen.evals.problem.policies import Precision
from kgen.evals.problem.tolerances import Tolerance, tolerance_for
from kgen.evals.verdict import OutputComparison, RejectionClass


class ComparisonFailure(Exception):
    def __init__(self, rejection: RejectionClass, message: str):
        super().__init__(message)
        self.rejection = rejection


def _dense(t: torch.Tensor) -> bool:
    """Whether a strided tensor's elements each have their own place in memory, packed with no
    gaps (any order of dimensions): no stride-0 broadcast, no overlapping windows."""
    dims = sorted((t.stride(d), t.size(d)) for d in range(t.dim()) if t.size(d) != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def plain_output_problem(out: Any) -> str | None:
    """Why an output is not a plain tensor holding its values (None: it is one): exactly
    ``torch.Tensor`` (no subclass, whose methods could compute when read), dense strided
    layout (not sparse, nested or quantized), with storage (not on the meta device).

    Asked only of the type and flags, so none of a subclass's code runs."""
    if type(out) is not torch.Tensor:
        return f"a {type(out).__module__}.{type(out).__qualname__}, not a plain torch.Tensor"
    if out.is_nested:
        return "a nested tensor"
    if out.layout != torch.strided:
        return f"a tensor of layout {out.layout}, not torch.strided"
    if out.is_meta:
        return "a tensor on the meta device (no storage: nothing was computed)"
    if out.is_quantized:
        return "a quantized tensor"
    return None


def check_structure(outputs: Sequence[Any], expected: Sequence[torch.Tensor]) -> None:
    """Same number of outputs, each a plain dense tensor (:func:`plain_output_problem`) of the
    reference's shape and dtype, whose elements do not overlap where the reference's do not."""
    if len(outputs) != len(expected):
        raise ComparisonFailure(
            RejectionClass.WRONG_OUTPUT_STRUCTURE,
            f"returned {len(outputs)} output(s), the reference returns {len(expected)}",
        )
    for i, (out, ref) in enumerate(zip(outputs, expected, strict=True)):
        problem = plain_output_problem(out)
        if problem is not None:
            raise ComparisonFailure(RejectionClass.WRONG_OUTPUT_STRUCTURE, f"output {i} is {problem}")
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
        if not _dense(out) and (ref.layout != torch.strided or _dense(ref)):
            raise ComparisonFailure(
                RejectionClass.WRONG_OUTPUT_STRUCTURE,
                f"output {i} has overlapping elements (strides {tuple(out.stride())} for shape "
                f"{tuple(out.shape)}: a broadcast view), where the reference's output is dense",
            )


def _rel_l2(diff: torch.Tensor, ref: torch.Tensor) -> float:
    ref_norm = ref.norm().item()
    diff_norm = diff.norm().item()
    if ref_norm == 0.0:
        return 0.0 if diff_norm == 0.0 else float("inf")
    return diff_norm / ref_norm


class _Difference:
    """The candidate's output against the fp64 reference, element by element."""

    def __init__(self, out: torch.Tensor, ref64: torch.Tensor, tol: Tolerance):
        # Compared where the reference lives: on a GPU, moving full-size outputs to the host costs more than the check.
        ref = ref64.detach().to(torch.float64)
        got = out.detach().to(ref.device, torch.float64)
        self.ref_finite = torch.isfinite(ref)
        self.bad_nonfinite = self.ref_finite & ~torch.isfinite(got)
        # Where the reference itself is non-finite, the candidate must match it exactly.
        nonfinite_mismatch = ~self.ref_finite & ~((got == ref) | (torch.isnan(got) & torch.isnan(ref)))
        got_f = torch.where(self.ref_finite, got, torch.zeros_like(got))
        self.ref_f = torch.where(self.ref_finite, ref, torch.zeros_like(ref))
        diff = (got_f - self.ref_f).abs()
        self.diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
        rms = self.ref_f.pow(2).mean().sqrt().item() if self.ref_f.numel() else 0.0
        allowed = tol.rtol * self.ref_f.abs() + tol.atol * rms
        self.bad = (self.diff > allowed) | self.bad_nonfinite | nonfinite_mismatch


def _tolerance(dtype: torch.dtype, precision: Precision, scale: float) -> Tolerance:
    base = tolerance_for(dtype, precision)
    return base.model_copy(update={k: v * scale for k, v in base.model_dump().items()})


def outside_tolerance(
    out: torch.Tensor, ref64: torch.Tensor, precision: Precision = Precision.IEEE
) -> torch.Tensor:
    """The boolean mask of ``out``'s elements outside the elementwise tolerance."""
    return _Difference(out, ref64, _tolerance(out.dtype, precision, 1.0)).bad


#: Elements compared at once: outputs of gigabytes are compared chunk by chunk, so the fp64
#: temporaries of a comparison stay ~1 GB whatever the output's size, and a reference kept on
#: the host is brought to the output's device one chunk at a time.
COMPARE_CHUNK = 1 << 25


class _Totals:
    """What a comparison needs from every element, accumulated chunk by chunk in fp64."""

    def __init__(self) -> None:
        self.ref_sq = self.diff_sq = self.native_sq = 0.0
        self.max_abs, self.worst_flat = -1.0, 0
        self.bad = self.bad_nonfinite = 0


def _ratio_of_norms(num_sq: float, den_sq: float) -> float:
    """||diff|| / ||ref|| from sums of squares (0/0 is 0, x/0 is inf), as ``_rel_l2``."""
    if den_sq == 0.0:
        return 0.0 if num_sq == 0.0 else float("inf")
    return math.sqrt(num_sq) / math.sqrt(den_sq)


#: The reference's sum of squares per fp64 reference tensor: a trial compares two outputs (the
#: calls before and after the reference ran) with one reference, and at full size with the
#: reference on the host each pass over it is gigabytes moved to the device. Keyed by the
#: tensor's id, held by a weak reference that removes the entry when the tensor goes.
_REFERENCE_SQ: dict[int, tuple[weakref.ref, int, float]] = {}


def _all_finite(x: torch.Tensor) -> bool:
    """Every element finite, from one reduction: a finite sum has no inf or NaN in it (a sum
    that overflows says no, and the caller takes the elementwise path, which is exact)."""
    return math.isfinite(float(x.sum().item()))


def _sum_sq(x: torch.Tensor) -> float:
    """Sum of squares of a flat fp64 chunk without a squared copy."""
    return float(torch.dot(x, x).item())


def _reference_sq(ref64: torch.Tensor, spans: Sequence[tuple[int, int]], device: torch.device) -> float:
    """Sum of the squares of the reference's finite elements (the tolerance's absolute part
    scales with its RMS), computed once per reference tensor and version."""
    key, version = id(ref64), ref64._version
    known = _REFERENCE_SQ.get(key)
    if known is not None and known[0]() is ref64 and known[1] == version:
        return known[2]
    flat = ref64.detach().reshape(-1)
    total = 0.0
    for start, end in spans:
        ref = flat[start:end].to(device).to(torch.float64)
        if not _all_finite(ref):
            ref = torch.where(torch.isfinite(ref), ref, 0.0)
        total += _sum_sq(ref)
    _REFERENCE_SQ[key] = (weakref.ref(ref64, lambda _, key=key: _REFERENCE_SQ.pop(key, None)), version, total)
    return total


def _chunked_difference(
    out: torch.Tensor, ref64: torch.Tensor, ref_native: torch.Tensor | None, tol: Tolerance
) -> _Totals:
    """The elementwise rules of :class:`_Difference`, over chunks of the flattened tensors,
    computed on the output's device. Two passes: the reference's RMS (the absolute part of the
    tolerance scales with it) first, then every element against its allowance. A chunk whose
    reference is finite everywhere (nearly all) takes the same rules in fewer passes."""
    device = out.device
    got_flat, ref_flat = out.detach().reshape(-1), ref64.detach().reshape(-1)
    native_flat = ref_native.detach().reshape(-1) if ref_native is not None and ref_native.dtype.is_floating_point else None
    n = got_flat.numel()
    totals = _Totals()
    spans = [(start, min(n, start + COMPARE_CHUNK)) for start in range(0, n, COMPARE_CHUNK)]
    totals.ref_sq = _reference_sq(ref64, spans, device)
    rms = math.sqrt(totals.ref_sq / n) if n else 0.0
    for start, end in spans:
        # moved in their own dtype and widened on the device: half the bytes for fp32 data
        ref = ref_flat[start:end].to(device).to(torch.float64)
        got = got_flat[start:end].to(device).to(torch.float64)
        native = native_flat[start:end].to(device).to(torch.float64) if native_flat is not None else None
        if _all_finite(ref):  # nearly always: the same rules in a few passes
            diff = (got - ref).abs_()
            allowed = ref.abs().mul_(tol.rtol).add_(tol.atol * rms)
            if _all_finite(got):
                bad_nonfinite = 0
                bad = diff > allowed
            else:
                nonfinite = ~torch.isfinite(got)
                bad_nonfinite = int(nonfinite.sum().item())
                diff.nan_to_num_(nan=float("inf"), posinf=float("inf"))
                bad = (diff > allowed) | nonfinite
            native_sq = _sum_sq(native - ref) if native is not None else 0.0
        else:
            finite = torch.isfinite(ref)
            nonfinite = finite & ~torch.isfinite(got)
            bad_nonfinite = int(nonfinite.sum().item())
            # Where the reference itself is non-finite, the candidate must match it exactly.
            nonfinite_mismatch = ~finite & ~((got == ref) | (torch.isnan(got) & torch.isnan(ref)))
            ref_f = torch.where(finite, ref, 0.0)
            diff = (torch.where(finite, got, 0.0) - ref_f).abs()
            diff = torch.where(torch.isnan(diff), float("inf"), diff)
            bad = (diff > tol.rtol * ref_f.abs() + tol.atol * rms) | nonfinite | nonfinite_mismatch
            native_sq = _sum_sq(torch.where(finite, native, 0.0) - ref_f) if native is not None else 0.0
        del got, ref, native
        totals.bad += int(bad.sum().item())
        totals.bad_nonfinite += bad_nonfinite
        totals.native_sq += native_sq
        del bad
        peak, where = diff.max(dim=0)
        if float(peak.item()) > totals.max_abs:
            totals.max_abs, totals.worst_flat = float(peak.item()), start + int(where.item())
        totals.diff_sq += _sum_sq(diff)
        del diff
    return totals


def compare_output(
    index: int,
    out: torch.Tensor,
    ref64: torch.Tensor,
    ref_native: torch.Tensor | None = None,
    scale: float = 1.0,
    dtype: torch.dtype | None = None,
    precision: Precision = Precision.IEEE,
) -> OutputComparison:
    """Judge one output against the fp64 reference; ``ref_native`` (the reference run in
    the problem's own dtypes) is reported as evidence of how hard the tolerance is.
    ``scale`` multiplies the tolerance of ``dtype`` (default: the output's own; the
    conditioning check judges an fp64 output by half of its problem dtype's tolerance);
    ``precision`` is the evaluation's precision policy."""
    tol = _tolerance(dtype or out.dtype, precision, scale)
    totals = _chunked_difference(out, ref64, ref_native, tol)
    n = out.numel()
    rel_l2 = _ratio_of_norms(totals.diff_sq, totals.ref_sq)
    max_abs = totals.max_abs if n else 0.0
    worst = [int(i) for i in torch.unravel_index(torch.tensor(totals.worst_flat), tuple(out.shape))] if n else []
    native_err = None
    if ref_native is not None and ref_native.dtype.is_floating_point:
        native_err = _ratio_of_norms(totals.native_sq, totals.ref_sq)
    mismatched_count = totals.bad
    mismatched = mismatched_count / max(n, 1)
    bad_nonfinite_count = totals.bad_nonfinite
    return OutputComparison(
        index=index,
        shape=list(out.shape),
        dtype=str(out.dtype).removeprefix("torch."),
        rel_l2_error=rel_l2,
        max_abs_error=max_abs,
        worst_index=worst,
        mismatched_fraction=mismatched,
        mismatched_count=mismatched_count,
        nonfinite_count=bad_nonfinite_count,
        tolerance_rel_l2=tol.rel_l2,
        reference_dtype_rel_l2_error=native_err,
        passed=bool(rel_l2 <= tol.rel_l2 and mismatched == 0.0),
    )


def outputs_failure(
    outputs: Sequence[Any], ref64: Sequence[Any], precision: Precision = Precision.IEEE
) -> ComparisonFailure | None:
    """The rejection a call's outputs add up to against the fp64 reference (``ref64``, one per
    output), or None if every output passes: the one comparison of a whole call that the call
    sequence, the timed calls, the race check and the diagnoses all make."""
    return failure_of([
        compare_output(i, out, ref, precision=precision) for i, (out, ref) in enumerate(zip(outputs, ref64, strict=True))
    ])


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
    return ComparisonFailure(RejectionClass.MISMATCH, mismatch_text(c))


def mismatch_text(c: OutputComparison) -> str:
    """One comparison's failure in words whose figures agree with each other: which of the two
    tests failed, by how much, and how many elements (a count, never a rounded-away 0.00%)."""
    total = max(1, _numel(c.shape))
    over = c.rel_l2_error / max(c.tolerance_rel_l2, 1e-300)
    if not math.isfinite(c.rel_l2_error):
        l2 = _no_relative_error(c)
    elif c.rel_l2_error > c.tolerance_rel_l2:
        l2 = f"normalised (rel-L2) error {c.rel_l2_error:.3g}, {over:.3g}x the tolerance {c.tolerance_rel_l2:.3g}"
    else:
        l2 = f"normalised (rel-L2) error {c.rel_l2_error:.3g} within its tolerance {c.tolerance_rel_l2:.3g}"
    if c.mismatched_count:
        share = f"{c.mismatched_count} of {total} elements ({_share(c.mismatched_count, total)}) outside the elementwise bound"
    else:
        share = f"every one of the {total} elements within the elementwise bound, but the error is systematic"
    return (
        f"output {c.index} ({c.dtype}, shape {tuple(c.shape)}) differs from the fp64 reference: {l2}; {share}; "
        f"worst at {tuple(c.worst_index)} (|diff| {c.max_abs_error:.3g})"
    )


def _no_relative_error(c: OutputComparison) -> str:
    """The words for a rel-L2 error that is no number: the reference's norm is zero (every element
    0 where the output is not), so no error relative to it exists, or the error's own norm
    overflows fp64 (only an fp64 output past 1e154 can). Never "inf x the tolerance"."""
    if c.dtype == "float64" and c.max_abs_error > 1e150:
        return f"the error is too large to measure (its norm overflows fp64; largest |diff| {c.max_abs_error:.3g})"
    return (
        "the reference is zero everywhere here (its norm is 0) and the output is not, so no relative error "
        f"exists (largest |diff| {c.max_abs_error:.3g})"
    )


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _share(count: int, total: int) -> str:
    pct = 100.0 * count / total
    return f"{pct:.2g}%" if pct < 1 else f"{pct:.1f}%"
