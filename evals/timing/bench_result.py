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

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kgen.evals.problem.format import sizes_text
from kgen.evals.timing.deferred_work import SyncCalibration


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
    #: a baseline taken from a cache (the run's, ``baseline_cache.py``, or the store kept
    #: across runs, ``baselines/kept_figures.py``), and how old it was
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
    """The candidate against one baseline: the medians' ratio, and whether it can be claimed."""

    baseline: str
    #: baseline median / candidate median (above 1: the candidate is faster)
    ratio: float
    #: the p10-p90 intervals (ms) the claim was judged on; None where one was not recorded
    candidate_interval: tuple[float, float] | None = None
    baseline_interval: tuple[float, float] | None = None
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
    return Speedup(baseline=name, ratio=ratio, candidate_interval=a, baseline_interval=b, claimed=claimed,
                   text=speedup_text(ratio, name, claimed))


def speedup_text(ratio: float, baseline: str, claimed: bool) -> str:
    """How a speedup reads wherever it is printed (results, run logs, the knowledge base): a
    figure "vs" the baseline only when claimed, "≈ same speed" with the ratio otherwise."""
    if claimed:
        return f"{ratio:.2f}x vs {baseline}"
    return f"≈ same speed as {baseline} ({ratio:.2f}x, intervals overlap)"


class BenchResult(BaseModel):
    """The candidate and its baselines at the problem's default sizes, on one GPU."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")

    device_name: str = ""
    sizes: dict[str, int] = Field(default_factory=dict)
    #: "candidate", "eager", "torch.compile", "liger", "quack" -> its measurement
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    #: what could not be measured, drift of a re-measured baseline, a shared GPU
    errors: dict[str, str] = Field(default_factory=dict)
    #: ``sol.SpeedOfLight`` as stored (pct_of_sol, achieved_tbs, floor_ms, bound, ...)
    sol: dict[str, Any] | None = None
    #: other processes seen on the GPU during timing (None: none, or not checked)
    shared_gpu: str | None = None
    gpu_check: str = ""
    #: the honest op the candidate's deferred-work check was judged against (None: not calibrated)
    sync_calibration: SyncCalibration | None = None
    #: where the timing stage's seconds went ("setup", "inputs", "calibration", "candidate",
    #: "recheck", "baselines", "sol"): what a faster search loop has to shorten
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    #: a first candidate time under the speed-of-light floor and its re-measurement
    #: (``floor_recheck.FloorRecheck`` as stored); None: the first time was possible
    floor_recheck: dict[str, Any] | None = None
    #: that first candidate measurement, kept beside the re-measured one in ``measurements``
    under_floor: Measurement | None = None
    #: where the baselines came from when the trusted baseline job timed them
    #: (``baselines/merge.py``: measured, reused from the store after an eager re-check,
    #: measured again after drift); None: timed in the candidate's verifier
    baselines: str | None = None
    #: the versions the baselines were timed with (torch, liger_kernel, quack_kernels)
    baseline_versions: dict[str, str] = Field(default_factory=dict)

    @field_validator("measurements", mode="before")
    @classmethod
    def _stored_measurements(cls, value: Any) -> Any:
        """Dicts stored by earlier versions: an entry that is not a mapping (a bare number or a
        message where a baseline failed) becomes a measurement with that median or error."""
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for name, entry in value.items():
            if isinstance(entry, (int, float)) and not isinstance(entry, bool):
                out[name] = {"median_ms": float(entry)}
            elif isinstance(entry, str):
                out[name] = {"error": entry}
            else:
                out[name] = entry
        return out

    @field_validator("errors", mode="before")
    @classmethod
    def _stored_errors(cls, value: Any) -> Any:
        """Earlier versions' errors could hold non-text details; they are kept as text."""
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else str(v) for k, v in value.items()}
        return value

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

    def lines(self) -> list[str]:
        """The figures as short lines for a terminal: each timing with its interval and whether
        it was reused from a cache, each speedup as claimed or "≈ same speed"."""
        out = [f"timed on {self.device_name or 'an unnamed GPU'} at {_sizes(self.sizes)}"]
        for name, m in self.measurements.items():
            if m.usable_ms is None:
                out.append(f"{name}: not measured ({m.error or 'no time'})")
                continue
            span = f" (p10-p90 {m.p10_ms:.4f}-{m.p90_ms:.4f})" if m.interval else ""
            reused = f", reused ({m.age_s:.0f} s old)" if m.reused else ""
            out.append(f"{name}: {m.usable_ms:.4f} ms{span}, {m.trials} trials{reused}")
        for name in self.measurements:
            if name != "candidate" and (speedup := self.speedup(name)) is not None:
                out.append(speedup.text)
        if (pct := self.sol_value("pct_of_sol")) is not None:
            out.append(f"{pct:.0f}% of speed-of-light")
        if self.baselines:
            out.append(self.baselines)
        if self.shared_gpu:
            out.append(self.shared_gpu)
        out += [f"{key}: {why}" for key, why in self.errors.items() if key != "shared_gpu"]
        return out


def _sizes(sizes: dict[str, int]) -> str:
    return sizes_text(sizes) or "its default sizes"
