"""Baselines kept across runs in ``$KGEN_HOME``, and the one policy for reusing them.

Eager PyTorch, ``torch.compile`` and Liger are the same programs for every candidate of a
problem on one GPU with one set of libraries: timing them again in every run cost each run's
first candidate seconds (``torch.compile`` compiling in a fresh process most of them). So the
trusted baseline job (``baselines/job.py``) keeps them here, one JSON entry per key
(``baseline_cache.cache_key`` of the problem file's digest, its sizes, the policies, the
device's name and the libraries' versions), written atomically.

The policy, in one place (:func:`figures_from_store`):

* **no entry** (or one that cannot be read, or lacks an eager figure): every baseline is
  measured, and kept;
* **an entry**: eager alone is timed again (cheap: no compile) and compared with the stored
  eager figure (:func:`eager_drift`). Within it, the stored figures are reused, with their
  age. Outside it, the device or its software changed under the same key (clocks, a driver,
  a neighbour that stayed): every baseline is measured again, kept, and the figures say so.

The job is started once per key per kgen process (``baselines/service.py``), so an entry is
re-checked once per run, never re-measured per candidate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationError

from kgen.core.config import kgen_home
from kgen.evals.baselines.messages import BASELINES, BaselineFigures
from kgen.evals.timing.baseline_cache import write_atomically
from kgen.evals.timing.bench_result import Measurement

#: How far the re-checked eager median may stand outside the stored eager p10-p90 interval,
#: as a share of that interval's ends, before the entry counts as drifted. A median inside
#: ``[p10 * (1 - t), p90 * (1 + t)]`` is the same device: run-to-run noise on an idle H100
#: moves medians of memory-bound kernels by a few per cent, a clock or driver change by more.
DRIFT_TOLERANCE = 0.10


class StoredBaselines(BaseModel):
    """One entry: the baselines measured together, under one key."""

    key: str
    #: what the key was made of (problem digest, sizes, policies, device, versions), for people
    parts: dict[str, Any] = Field(default_factory=dict)
    measured_at: float
    measurements: dict[str, Measurement]
    #: baselines not measured at the time and why (Liger not installed, not wired)
    errors: dict[str, str] = Field(default_factory=dict)


def default_store_dir() -> Path:
    """``$KGEN_HOME/cache/baselines``: beside the compilers' caches, kept across runs."""
    return kgen_home() / "cache" / "baselines"


def entry_path(directory: str | Path, key: str) -> Path:
    return Path(directory) / f"{key}.json"


def read_entry(directory: str | Path, key: str) -> tuple[StoredBaselines | None, str | None]:
    """The entry for ``key``, or None and why it was ignored (no file is no reason: a first
    measurement). An entry under another key, or without a usable eager figure (the re-check
    has nothing to compare with), is ignored like a corrupt one."""
    path = entry_path(directory, key)
    try:
        text = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as exc:
        return None, f"unreadable baseline store entry {path.name} ignored ({exc.strerror or exc})"
    try:
        entry = StoredBaselines.model_validate_json(text)
    except (ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"corrupt baseline store entry {path.name} ignored and measured again ({first})"
    if entry.key != key:
        return None, f"baseline store entry {path.name} holds key {entry.key}: ignored and measured again"
    eager = entry.measurements.get("eager")
    if eager is None or eager.usable_ms is None:
        return None, f"baseline store entry {path.name} has no eager figure to re-check: measured again"
    return entry, None


def write_entry(directory: str | Path, entry: StoredBaselines) -> str | None:
    """Keep ``entry``; a store that cannot be written costs the next run a measurement, never
    this one its figures (the note says so)."""
    path = entry_path(directory, entry.key)
    try:
        write_atomically(path, entry)
    except OSError as exc:
        return f"baseline store entry {path.name} not written ({exc.strerror or exc})"
    return None


def drift_interval(stored: Measurement, tolerance: float = DRIFT_TOLERANCE) -> tuple[float, float] | None:
    """The stored eager p10-p90 widened by ``tolerance`` (its median alone when no interval
    was recorded); None without a usable stored figure."""
    if stored.usable_ms is None:
        return None
    low, high = stored.interval or (stored.usable_ms, stored.usable_ms)
    return low * (1 - tolerance), high * (1 + tolerance)


def eager_drift(stored: Measurement, recheck: Measurement, tolerance: float = DRIFT_TOLERANCE) -> str | None:
    """Why the stored eager figure no longer describes this device, or None when it does.

    Drifted: the re-check's median lies outside :func:`drift_interval` (the stored p10-p90
    widened by ``tolerance``), or the re-check measured nothing usable."""
    window = drift_interval(stored, tolerance)
    median = recheck.usable_ms
    if window is None:
        return "the stored eager figure is not usable"
    if median is None:
        return f"the eager re-check measured nothing usable ({recheck.error or 'no time'})"
    if window[0] <= median <= window[1]:
        return None
    return (f"eager re-checked at {median:.4f} ms, outside the stored p10-p90 "
            f"{stored.p10_ms or stored.usable_ms:.4f}-{stored.p90_ms or stored.usable_ms:.4f} ms "
            f"widened by {tolerance:.0%} ({window[0]:.4f}-{window[1]:.4f} ms)")


class BaselineTimings(Protocol):
    """What the policy asks of the job: the eager re-check, and a measurement of baselines.
    On a GPU each one builds what it times first and then takes a turn alone on the GPU;
    tests pass fakes."""

    def recheck_eager(self) -> Measurement:
        """Eager timed again the way the stored figure was."""

    def measure(self, names: Sequence[str]) -> tuple[dict[str, Measurement], dict[str, str]]:
        """The named baselines measured; those that could not be, with why."""


def _reused(entry: StoredBaselines, age_s: float) -> dict[str, Measurement]:
    return {name: m.model_copy(update={"reused": True, "age_s": round(age_s, 1)})
            for name, m in entry.measurements.items()}


def _measure_and_keep(directory: str | Path | None, key: str, parts: dict[str, Any], timings: BaselineTimings,
                      at: float) -> tuple[dict[str, Measurement], dict[str, str]]:
    """Every baseline measured, kept when eager was (an entry must be re-checkable)."""
    measurements, errors = timings.measure(BASELINES)
    errors = dict(errors)
    eager = measurements.get("eager")
    if directory is not None and eager is not None and eager.usable_ms is not None:
        entry = StoredBaselines(key=key, parts=parts, measured_at=at, measurements=measurements, errors=errors)
        if (note := write_entry(directory, entry)) is not None:
            errors["baselines store"] = note
    return measurements, errors


def figures_from_store(directory: str | Path | None, key: str, parts: dict[str, Any], timings: BaselineTimings,
                       now: Callable[[], float] = time.time) -> BaselineFigures:
    """The baselines for ``key`` under the store's policy (module doc). ``directory`` None:
    measured and not kept (the GPU is shared, or no store was asked for)."""
    at = now()
    if directory is None:
        measurements, errors = _measure_and_keep(None, key, parts, timings, at)
        return BaselineFigures(key=key, measurements=measurements, errors=errors, origin="measured")
    entry, note = read_entry(directory, key)
    if entry is None:
        measurements, errors = _measure_and_keep(directory, key, parts, timings, at)
        if note:
            errors["baselines store"] = "; ".join(filter(None, [note, errors.get("baselines store")]))
        return BaselineFigures(key=key, measurements=measurements, errors=errors, origin="measured")
    try:
        recheck = timings.recheck_eager()
    except Exception as exc:  # noqa: BLE001 - a re-check that fails trusts nothing stored
        recheck = Measurement(error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    stored_eager = entry.measurements["eager"]
    drift = eager_drift(stored_eager, recheck)
    checked = (f"eager re-checked: median {recheck.usable_ms:.4f} ms against the stored "
               f"{stored_eager.usable_ms:.4f} ms" if recheck.usable_ms is not None else None)
    if drift is None:
        age_s = max(0.0, at - entry.measured_at)
        return BaselineFigures(key=key, measurements=_reused(entry, age_s), errors=dict(entry.errors),
                               origin="reused", recheck=checked)
    measurements, errors = _measure_and_keep(directory, key, parts, timings, now())
    errors["baselines drift"] = f"drift: {drift}; every baseline measured again"
    return BaselineFigures(key=key, measurements=measurements, errors=errors, origin="remeasured_after_drift",
                           recheck=checked)
