"""The timing stage's figures as one typed model, read the same way everywhere.

``EvalResult.bench`` was a dict that the suite tables, the prompt context and the knowledge
base each re-parsed. It is now :class:`BenchResult`: results stored as JSON by earlier
versions (the same keys) still load into it. A speedup is *claimed* only when the p10-p90
intervals of both timings do not overlap (:func:`speedup_between`): overlapping intervals
read "≈ same speed", whatever the ratio of the medians.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Measurement(BaseModel):
    """One implementation timed on one GPU (``TimingResult``'s fields, plus reuse)."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")

    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    mean_ms: float | None = None
    min_ms: float | None = None
    trials: int = 0
    sync_ratio: float | None = None
    flags: list[str] = Field(default_factory=list)
    error: str | None = None
    #: a baseline taken from the run's cache (``baseline_cache.py``), and how old it was
    reused: bool = False
    age_s: float = 0.0

    @property
    def usable_ms(self) -> float | None:
        """The median when it is a real, positive measurement (None otherwise)."""
        ms = self.median_ms
        if self.error or ms is None or not math.isfinite(ms) or ms <= 0:
            return None
        return ms

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.p10_ms is None or self.p90_ms is None:
            return None
        return self.p10_ms, self.p90_ms


class Speedup(BaseModel):
    baseline: str
    ratio: float
    #: True only when the two p10-p90 intervals are disjoint
    claimed: bool
    text: str


def speedup_between(candidate: Measurement, baseline: Measurement, name: str) -> Speedup | None:
    """The candidate against one baseline; None when either was not measured."""
    cand_ms, base_ms = candidate.usable_ms, baseline.usable_ms
    if cand_ms is None or base_ms is None:
        return None
    ratio = base_ms / cand_ms
    a, b = candidate.interval, baseline.interval
    claimed = a is not None and b is not None and (a[1] < b[0] or b[1] < a[0])
    text = f"{ratio:.2f}x vs {name}" if claimed else f"≈ same speed as {name} ({ratio:.2f}x, intervals overlap)"
    return Speedup(baseline=name, ratio=ratio, claimed=claimed, text=text)


class BenchResult(BaseModel):
    """The candidate and its baselines at the problem's default sizes, on one GPU."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")

    device_name: str = ""
    sizes: dict[str, int] = Field(default_factory=dict)
    #: "candidate", "eager", "torch.compile", "liger" -> its measurement
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    #: what could not be measured, drift of a re-measured baseline, a shared GPU
    errors: dict[str, str] = Field(default_factory=dict)
    #: ``sol.SpeedOfLight`` as stored (pct_of_sol, achieved_tbs, floor_ms, bound, ...)
    sol: dict[str, Any] | None = None
    #: other processes seen on the GPU during timing (None: none, or not checked)
    shared_gpu: str | None = None
    gpu_check: str = ""

    def median(self, name: str) -> float | None:
        entry = self.measurements.get(name)
        return entry.usable_ms if entry is not None else None

    def speedup(self, name: str) -> Speedup | None:
        candidate, baseline = self.measurements.get("candidate"), self.measurements.get(name)
        if candidate is None or baseline is None:
            return None
        return speedup_between(candidate, baseline, name)

    def sol_value(self, key: str) -> Any:
        return (self.sol or {}).get(key)
