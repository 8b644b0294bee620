"""Speed of light: the roofline floor under a problem's time, and how close a kernel gets.

A problem that declares ``kgen_bytes()`` (fewest bytes through device memory:
each input read once, each output written once) and/or ``kgen_flops()`` has a
floor on its time: ``bytes / bandwidth`` and ``flops / matrix rate``; the larger
is the floor and names the bound ("memory" or "compute"). No model, no floor:
:func:`speed_of_light` returns None and %SOL stays unknown, never invented. With
only one of the two counts the floor uses that one term (still a lower bound,
possibly a loose one).

Ceilings. The bandwidth is the measured device copy rate when given (bytes read
plus written, :func:`kgen.evals.timing.measure.measure_copy_bandwidth`), else the
vendor figure. The matrix rate is chosen by the problem's dtype, and it is the
*tensor-core* rate of that dtype (the optimistic one): the floor must be a lower
bound on time, and a higher ceiling means a lower floor, so it is the safe side.

* bf16 / fp16 -> ``bf16_tflops`` (the same tensor-core rate on every target here)
* fp8 (e4m3 / e5m2, fnuz too) -> ``fp8_tflops`` (bf16 where the target has no fp8)
* fp32 -> ``tf32_tflops`` (a kernel may use the TF32 tensor cores where its
  tolerance allows; ``fp32_tflops`` only where the target has no TF32)
* anything else (fp64, integers) -> the highest rate the target lists

A measured matrix rate (:func:`kgen.evals.timing.measure.measure_matmul_tflops` for the
same dtype) replaces the vendor figure when given.

Measured ceilings are what a good library reaches, not what the hardware can:
a kernel may beat them slightly. So :func:`faster_than_light`, which the
verifier treats as a failure, tests against the *lower* of the floor and the
vendor-figure floor, with slack for measurement error.

Score (SOL-ExecBench): ``S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL))`` with
``T_SOL`` the floor and ``T_b`` a baseline's time: 0.5 at the baseline, 1 at the
floor. A time under the floor scores 1 (it is faster-than-light evidence, not a
record); a baseline at or under the floor gives no score (the formula breaks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import torch

from kgen.backends.targets import HardwareTarget
from kgen.evals.verdict import ResultModel

_FP8_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
_FP8 = frozenset(getattr(torch, name) for name in _FP8_NAMES if hasattr(torch, name))


class SpeedOfLight(ResultModel):
    """The roofline floor of one problem on one target, and optionally one measured time against it."""

    target: str
    dtype: str
    bytes_moved: int | None
    flops: int | None
    #: bytes / bandwidth, ms; None without a byte model
    memory_bound_ms: float | None
    #: flops / matrix rate, ms; None without a FLOP model
    compute_bound_ms: float | None
    #: max of the two: no kernel runs (much) faster
    floor_ms: float
    bound: Literal["memory", "compute"]
    bandwidth_tbs: float
    bandwidth_source: Literal["measured", "vendor"]
    matrix_tflops: float
    matrix_source: Literal["measured", "vendor"]
    #: which HardwareTarget field the vendor matrix rate is, e.g. "bf16_tflops"
    matrix_rate: str
    #: the floor from the vendor figures alone (the faster-than-light test uses the lower floor)
    vendor_floor_ms: float

    # filled by with_measurement()
    kernel_ms: float | None = None
    baseline_ms: float | None = None
    achieved_tbs: float | None = None
    achieved_tflops: float | None = None
    #: floor / kernel time * 100
    pct_of_sol: float | None = None
    #: SOL-ExecBench score: 0.5 = the baseline, 1 = the floor; None without a baseline
    score: float | None = None
    faster_than_light: bool | None = None


def _matrix_rate(target: HardwareTarget, dtype: torch.dtype) -> tuple[str, float]:
    """(field name, vendor TFLOP/s) of the tensor-core rate for ``dtype`` (module doc)."""
    rates = {
        "fp32_tflops": target.fp32_tflops,
        "tf32_tflops": target.tf32_tflops,
        "bf16_tflops": target.bf16_tflops,
        "fp8_tflops": target.fp8_tflops,
    }
    if dtype in (torch.bfloat16, torch.float16):
        order = ["bf16_tflops", "tf32_tflops", "fp32_tflops"]
    elif dtype in _FP8:
        order = ["fp8_tflops", "bf16_tflops", "tf32_tflops", "fp32_tflops"]
    elif dtype == torch.float32:
        order = ["tf32_tflops", "fp32_tflops"]
    else:
        known = {k: v for k, v in rates.items() if v}
        best = max(known, key=lambda k: known[k])
        return best, known[best]
    for name in order:
        if rates[name]:
            return name, float(rates[name])
    raise ValueError(f"target {target.name} lists no matrix rate for {dtype}")


def _ms(amount: float, per_second: float) -> float:
    return amount / per_second * 1e3


def _check_rate(name: str, value: float | None) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value}")


def speed_of_light(bytes_moved: int | None, flops: int | None, target: HardwareTarget, dtype: torch.dtype,
                   measured_bandwidth_tbs: float | None = None,
                   measured_matrix_tflops: float | None = None) -> SpeedOfLight | None:
    """The roofline floor for ``bytes_moved`` / ``flops`` on ``target`` (module doc).

    None when the problem declares neither count (or both are zero): %SOL unknown.
    """
    _check_rate("measured_bandwidth_tbs", measured_bandwidth_tbs)
    _check_rate("measured_matrix_tflops", measured_matrix_tflops)
    for name, value in (("bytes_moved", bytes_moved), ("flops", flops)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    if not bytes_moved and not flops:
        return None

    rate_name, vendor_tflops = _matrix_rate(target, dtype)
    vendor_tbs = target.memory_bandwidth_tbs
    tbs = measured_bandwidth_tbs or vendor_tbs
    tflops = measured_matrix_tflops or vendor_tflops

    def floors(bandwidth_tbs: float, matrix_tflops: float) -> tuple[float | None, float | None]:
        mem = _ms(bytes_moved, bandwidth_tbs * 1e12) if bytes_moved is not None else None
        comp = _ms(flops, matrix_tflops * 1e12) if flops is not None else None
        return mem, comp

    memory_ms, compute_ms = floors(tbs, tflops)
    floor_ms = max(memory_ms or 0.0, compute_ms or 0.0)
    vendor_floor_ms = max(v or 0.0 for v in floors(vendor_tbs, vendor_tflops))
    return SpeedOfLight(
        target=target.name,
        dtype=str(dtype).removeprefix("torch."),
        bytes_moved=bytes_moved,
        flops=flops,
        memory_bound_ms=memory_ms,
        compute_bound_ms=compute_ms,
        floor_ms=floor_ms,
        bound="memory" if (memory_ms or 0.0) >= (compute_ms or 0.0) else "compute",
        bandwidth_tbs=tbs,
        bandwidth_source="measured" if measured_bandwidth_tbs else "vendor",
        matrix_tflops=tflops,
        matrix_source="measured" if measured_matrix_tflops else "vendor",
        matrix_rate=rate_name,
        vendor_floor_ms=vendor_floor_ms,
    )


def sol_score(kernel_ms: float, baseline_ms: float, floor_ms: float) -> float | None:
    """SOL-ExecBench ``S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL))``; None when T_b <= T_SOL."""
    if not baseline_ms > floor_ms:
        return None
    kernel_ms = max(kernel_ms, floor_ms)  # under the floor: scores 1, flagged elsewhere
    return 1.0 / (1.0 + (kernel_ms - floor_ms) / (baseline_ms - floor_ms))


def _check_time(name: str, value: float) -> None:
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative time in ms, got {value}")


def faster_than_light(sol: SpeedOfLight, kernel_ms: float, slack: float = 0.9) -> bool:
    """True when ``kernel_ms`` is under ``slack`` x the floor: not a record, a verifier failure.

    The floor here is the lower of the floor over the ceilings used and the vendor-figure
    floor (measured ceilings can be beaten a little; the vendor's peaks cannot).
    """
    if not 0 < slack <= 1:
        raise ValueError(f"slack must be in (0, 1], got {slack}")
    _check_time("kernel_ms", kernel_ms)
    return kernel_ms < slack * min(sol.floor_ms, sol.vendor_floor_ms)


def with_measurement(sol: SpeedOfLight, kernel_ms: float, baseline_ms: float | None = None) -> SpeedOfLight:
    """``sol`` with a measured time: achieved TB/s and TFLOP/s, % of SOL, score (given a baseline)."""
    _check_time("kernel_ms", kernel_ms)
    if baseline_ms is not None:
        _check_time("baseline_ms", baseline_ms)
    seconds = kernel_ms * 1e-3
    achieved_tbs = achieved_tflops = pct = None
    if seconds > 0:
        achieved_tbs = sol.bytes_moved / seconds / 1e12 if sol.bytes_moved is not None else None
        achieved_tflops = sol.flops / seconds / 1e12 if sol.flops is not None else None
        pct = sol.floor_ms / kernel_ms * 100
    score = sol_score(kernel_ms, baseline_ms, sol.floor_ms) if baseline_ms is not None else None
    return sol.model_copy(update={
        "kernel_ms": kernel_ms,
        "baseline_ms": baseline_ms,
        "achieved_tbs": achieved_tbs,
        "achieved_tflops": achieved_tflops,
        "pct_of_sol": pct,
        "score": score,
        "faster_than_light": faster_than_light(sol, kernel_ms),
    })


def _tensors(obj: Any) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)


def _footprint(t: torch.Tensor) -> int:
    """Bytes a kernel must touch for ``t``: its elements, or less for a broadcast (stride-0) view."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
    return min(t.numel(), span) * t.element_size()


def _side_bytes(obj: Any) -> int:
    seen: set[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = set()
    total = 0
    for t in _tensors(obj):
        key = (t.data_ptr(), t.element_size(), tuple(t.shape), tuple(t.stride()))
        if key in seen:  # the same tensor passed twice is read (or written) once
            continue
        seen.add(key)
        total += _footprint(t)
    return total


def derive_bytes(inputs: Any, outputs: Any) -> int:
    """Fallback byte model: every tensor input read once plus every tensor output written once.

    ``inputs`` / ``outputs`` may be a tensor or nested lists, tuples and dicts of them;
    other values count nothing. A tensor given twice on one side counts once; a broadcast
    view counts its storage, not its expanded size (the floor must stay a lower bound).
    """
    return _side_bytes(inputs) + _side_bytes(outputs)
