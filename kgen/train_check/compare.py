"""The kernel run against stock: loss curves within the noise band, parameter drift per module.

The band is the per-step gap between two stock runs (the reference run, and the same run with
its parameters jittered by one bf16 rounding step: `loop.jitter_parameters`), kept as its running
maximum (early gaps are small and would make the band too tight at the start), widened by
``factor`` and floored at ``floor`` (absolute loss). The kernel run agrees when every step's gap
to the reference stays inside, and no module's parameters drifted further from the reference's
than ``factor`` times the jittered run's drift of that module (plus the floor on relative L2).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

#: how much wider than the stock noise the kernel run may stray
DEFAULT_FACTOR = 3.0
#: absolute loss gap always allowed (a band of exactly zero would refuse any rounding)
LOSS_FLOOR = 1e-3
#: relative L2 drift always allowed per module
DRIFT_FLOOR = 1e-3


class Band(BaseModel):
    """The allowed gap to the reference run at each step."""

    noise: list[float]
    allowed: list[float]
    factor: float


class ModuleDrift(BaseModel):
    """One module's parameters after training: relative L2 to the reference run."""

    module: str
    kernel: float
    noise: float
    allowed: float
    ok: bool


def noise_band(reference: list[float], jittered: list[float], factor: float = DEFAULT_FACTOR) -> Band:
    """The running maximum of |reference - jittered| per step, widened by ``factor``."""
    noise, running = [], 0.0
    for a, b in zip(reference, jittered, strict=False):
        running = max(running, abs(a - b))
        noise.append(running)
    return Band(noise=noise, allowed=[max(factor * n, LOSS_FLOOR) for n in noise], factor=factor)


def steps_outside(band: Band, reference: list[float], kernel: list[float]) -> list[int]:
    """Steps where the kernel run's loss left the band (a missing or non-finite loss is outside)."""
    outside = []
    for step, allowed in enumerate(band.allowed):
        if step >= len(kernel) or not math.isfinite(kernel[step]) or abs(kernel[step] - reference[step]) > allowed:
            outside.append(step)
    return outside


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else name


def _relative_l2(params: dict[str, Any], reference: dict[str, Any], names: list[str]) -> float:
    import torch

    diff = sum(float(torch.sum((params[n] - reference[n]) ** 2)) for n in names)
    norm = sum(float(torch.sum(reference[n] ** 2)) for n in names)
    return math.sqrt(diff / norm) if norm > 0 else math.sqrt(diff)


def module_drift(reference: dict[str, Any], jittered: dict[str, Any], kernel: dict[str, Any],
                 factor: float = DEFAULT_FACTOR) -> list[ModuleDrift]:
    """Per module (a parameter's owner), the kernel run's and the jittered run's drift from the reference."""
    by_module: dict[str, list[str]] = {}
    for name in reference:
        by_module.setdefault(_module(name), []).append(name)
    rows = []
    for module, names in by_module.items():
        k = _relative_l2(kernel, reference, names)
        n = _relative_l2(jittered, reference, names)
        allowed = max(factor * n, DRIFT_FLOOR)
        rows.append(ModuleDrift(module=module, kernel=k, noise=n, allowed=allowed, ok=math.isfinite(k) and k <= allowed))
    return rows
