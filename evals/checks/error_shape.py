"""What a numerical mismatch looks like: the pattern of the error, in words a model can act on.

A bare "rel-L2 error 0.3" tells the author of a kernel nothing about which line
is wrong. The shape of the difference usually does: wrong only in the last
columns of each row is a masked tail or a block edge; a difference that varies
along one axis only is a missing (or doubled) bias or per-channel term; an
output that is the reference times a constant is a missed scale; an error that
vanishes when the reference is computed from TF32- or bf16-rounded inputs is a
precision choice, not a logic bug. Each test here is cheap (a few reductions
over the difference) and only runs once a trial has already failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch

from kgen.evals.problem.format import flatten_outputs

#: A pattern is named only when it explains the error this well: what is left over after
#: taking the pattern out has at most this share of the error's norm.
EXPLAINED = 0.1
#: A rounded-input reference "explains" an error when the output is this much closer to it.
ROUNDING_CLOSER = 0.35

#: Narrower formats a floating output's error is compared against, by the output's dtype.
ROUNDING_FORMATS: dict[torch.dtype, tuple[str, ...]] = {
    torch.float32: ("tf32", "bf16", "fp16"),
    torch.float16: ("bf16",),
}


def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x`` (floating) rounded to ``fmt`` ("tf32", "bf16", "fp16") and returned in float64:
    what a kernel that reads its inputs in that format sees."""
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(torch.float64)
    if fmt == "fp16":
        return x.to(torch.float16).to(torch.float64)
    if fmt == "tf32":
        # The 13 low mantissa bits of fp32 dropped, as an H100's tensor cores read a TF32 operand
        # (measured; the CPU interpreter's emulation, backends/triton/interpreter_numerics.py, agrees).
        bits = x.to(torch.float32).contiguous().view(torch.int32)
        rounded = (bits & ~0x1FFF).view(torch.float32)
        keep = ~torch.isfinite(x.to(torch.float32))
        return torch.where(keep, x.to(torch.float32), rounded).to(torch.float64)
    raise ValueError(f"unknown format {fmt!r}")


def _norm(t: torch.Tensor) -> float:
    return float(t.norm().item()) if t.numel() else 0.0


def _scale_pattern(got: torch.Tensor, ref: torch.Tensor, err: float) -> str | None:
    ref_sq = float((ref * ref).sum().item())
    if ref_sq == 0.0:
        return None
    a = float((got * ref).sum().item()) / ref_sq
    if abs(a) < 1e-12 and _norm(got) < 1e-12 * _norm(ref) + 1e-300:
        return "the output is all zeros"
    if abs(a - 1.0) < 1e-6 or _norm(got - a * ref) > EXPLAINED * err:
        return None
    return f"the output is the reference scaled by {a:.4g} (a missed or doubled scale factor?)"


def _offset_pattern(diff: torch.Tensor, err: float) -> str | None:
    c = float(diff.mean().item())
    if c == 0.0 or _norm(diff - c) > EXPLAINED * err:
        return None
    return f"the output is off by a constant {c:.4g} everywhere (a missing or extra additive term?)"


def _axis_pattern(diff: torch.Tensor, err: float) -> str | None:
    """A difference that varies along one axis only: a per-channel / per-row term."""
    if diff.dim() < 2:
        return None
    for axis in range(diff.dim()):
        if diff.shape[axis] < 2:
            continue
        others = [d for d in range(diff.dim()) if d != axis]
        term = diff.mean(dim=others, keepdim=True)
        if _norm(diff - term) <= EXPLAINED * err:
            return (
                f"the difference varies only along dim {axis} (size {diff.shape[axis]}): a missing, doubled or "
                "misindexed bias / per-channel term?"
            )
    return None


def _where_pattern(bad: torch.Tensor) -> str | None:
    """Where the elements outside tolerance are, when they are not everywhere."""
    total = bad.numel()
    count = int(bad.sum().item())
    if count == 0 or count == total:
        return None
    if bad.dim() >= 1 and bad.shape[-1] > 1:
        rows = bad.reshape(-1, bad.shape[-1])
        cols_bad = rows.any(dim=0)
        first_col = int(torch.nonzero(cols_bad)[0].item())
        n = rows.shape[1]
        if bool(cols_bad[first_col:].all()) and first_col > 0:
            return f"only the last {n - first_col} of {n} columns (from column {first_col}) are wrong: a masked tail or block edge?"
        rows_bad = rows.any(dim=1)
        bad_rows = torch.nonzero(rows_bad).flatten()
        if len(bad_rows) < rows.shape[0]:
            first, last = int(bad_rows[0].item()), int(bad_rows[-1].item())
            contiguous = last - first + 1 == len(bad_rows)
            span = f"rows {first}..{last}" if contiguous else f"first row {first}, last row {last}"
            return f"{len(bad_rows)} of {rows.shape[0]} rows (of the last dim) are wrong ({span})"
    flat = bad.flatten()
    first = int(torch.nonzero(flat)[0].item())
    if bool(flat[first:].all()):
        return f"every element from flat index {first} of {total} on is wrong: the tail of the output is missed"
    return None


def error_pattern(
    out: torch.Tensor,
    ref64: torch.Tensor,
    bad: torch.Tensor | None = None,
    rounded_references: Mapping[str, torch.Tensor] | None = None,
) -> list[str]:
    """Phrases naming the error's pattern (empty when none fits); ``bad`` marks the elements
    outside tolerance, ``rounded_references`` maps a format to the reference computed from
    inputs rounded to it."""
    ref = ref64.detach().to(torch.float64)
    got = out.detach().to(ref.device, torch.float64)
    finite = torch.isfinite(ref) & torch.isfinite(got)
    if not bool(finite.all()):
        got, ref = torch.where(finite, got, 0.0), torch.where(finite, ref, 0.0)
    diff = got - ref
    err = _norm(diff)
    if err == 0.0:
        return []
    phrases: list[str] = []
    for fmt, rounded in (rounded_references or {}).items():
        rounded = rounded.detach().to(ref.device, torch.float64)
        closer = _norm(got - torch.where(finite, rounded, 0.0))
        if closer <= ROUNDING_CLOSER * err:
            phrases.append(
                f"the error has the shape of {fmt.upper()} rounding: the output is {err / max(closer, 1e-300):.0f}x "
                f"closer to the reference computed from {fmt.upper()}-rounded inputs and weights"
            )
            break
    if not phrases:
        for pattern in (_scale_pattern(got, ref, err), _offset_pattern(diff, err), _axis_pattern(diff, err)):
            if pattern is not None:
                phrases.append(pattern)
                break
    if bad is not None:
        where = _where_pattern(bad.to(ref.device))
        if where is not None:
            phrases.append(where)
    return phrases


class ProductOperands(NamedTuple):
    """Which of a problem's inputs (by position) and weights (by name) a matrix product reads,
    judged once at the problem's own sizes: at a made-up size set of all ones a convolution's
    weight is ``(1, 1, 1, 1)`` and looks like a bias, yet the kernel still rounds it."""

    inputs: tuple[bool, ...]
    weights: frozenset[str]


def product_operands(reference: torch.nn.Module, inputs: list) -> ProductOperands:
    """The roles of ``reference``'s inputs and weights at these (the problem's own) sizes."""
    named = list(reference.named_parameters()) + list(reference.named_buffers())
    return ProductOperands(
        inputs=tuple(_operand_like(x) for x in inputs),
        weights=frozenset(name for name, tensor in named if _operand_like(tensor)),
    )


def reference_from_rounded(
    reference: torch.nn.Module, inputs: list, fmt: str, device: torch.device, operands: ProductOperands | None = None
) -> list:
    """The reference's outputs in float64 from inputs *and* weights rounded to ``fmt`` (those a
    matrix product reads: :func:`_operand_like`, or ``operands`` as judged at the problem's own
    sizes): what an honest kernel that reads its product operands in that format computes, up
    to its own accumulation."""
    import copy

    model = copy.deepcopy(reference).double()
    known = operands.weights if operands is not None else frozenset()
    by_position = operands.inputs if operands is not None and len(operands.inputs) == len(inputs) else ()
    with torch.no_grad():
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if tensor.is_floating_point() and (name in known or _operand_like(tensor)):
                tensor.copy_(round_to(tensor, fmt))
        args = [
            (round_to(x.detach(), fmt) if _operand_like(x) or (i < len(by_position) and by_position[i])
             else x.detach().to(torch.float64)).to(device)
            if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for i, x in enumerate(inputs)
        ]
        return flatten_outputs(model(*args))


def _operand_like(x: object) -> bool:
    """A floating tensor with two or more real axes: what a matrix product or convolution reads.
    Biases and per-channel scales (one real axis, ``(C, 1, 1)`` included) are added in full
    precision by kernels that round their product operands, so they are left as they are."""
    return (
        isinstance(x, torch.Tensor) and x.is_floating_point() and sum(1 for d in x.shape if d > 1) >= 2
    )


def rounding_format(text: str) -> str | None:
    """The format ("tf32", "bf16", "fp16") whose rounding ``error_pattern`` found an error shaped
    like, read from its phrases or a message that quotes them; None when none was."""
    for fmt in ("tf32", "bf16", "fp16"):
        if f"the shape of {fmt.upper()} rounding" in text:
            return fmt
    return None


def precision_advice(phrases: list[str], precision: str) -> str | None:
    """What a rounding-shaped error means under the evaluation's precision policy."""
    text = " ".join(phrases)
    if rounding_format(text) == "tf32":
        if precision == "ieee":
            return (
                "precision policy ieee judges fp32 problems as IEEE fp32: an fp32 tl.dot rounds its inputs to "
                "TF32 unless given input_precision=\"ieee\"; `--precision tf32` admits TF32 with its own tolerance"
            )
        return "TF32-shaped, but beyond even the tf32 policy's tolerance"
    if "BF16 rounding" in text or "FP16 rounding" in text:
        return "the kernel computes (or stores intermediates) in a narrower format than the problem's dtype"
    return None


def passed_before(trials: list) -> str:
    """What passed before a failing trial, in one phrase: the failure's context for a reader."""
    passed = [t for t in trials if t.passed]
    if not passed:
        return "nothing passed before it (it is the first trial)"
    # the problem's own inputs (``normal``) first and in words: they are not N(0, 1)
    distributions = [
        "the problem's own inputs" if d == "normal" else d
        for d in sorted({t.distribution for t in passed}, key=lambda d: (d != "normal", d))
    ]
    sizes = {tuple(sorted(t.sizes.items())) for t in passed}
    return (
        f"passed before it: {len(passed)} trial(s) over {len(distributions)} input distribution(s) "
        f"({', '.join(distributions)}) and {len(sizes)} size set(s)"
    )
