"""Figures measured once per run, not once per candidate: the device's copy bandwidth and
matmul rate (the speed-of-light floor's ceilings), and the keys and atomic writes the
baselines' own store (``evals/baselines/kept_figures.py``) uses too.

Re-measuring the device's figures for each candidate cost seconds an evaluation and made the
floor drift between candidates of one run. So a run keeps them in a directory it owns: an
entry is reused until it is :data:`MAX_AGE_S` old or has served :data:`MAX_USES`
evaluations, then measured again; a re-measure whose p10-p90 interval does not overlap the
old one is reported as drift. The candidate itself is always timed fresh, and eager PyTorch,
``torch.compile`` and Liger are the trusted baseline job's (``evals/baselines/``).

Several evaluations may run at once: entries are written to a temporary file and renamed
into place, and an unreadable entry is measured again, never trusted. The use count is read,
incremented and written without a lock: two evaluations at once may count as one use, which
delays a re-measure by a use, never reuses a stale entry past :data:`MAX_AGE_S`. An entry that
cannot be written costs only its reuse (:class:`CacheWriteWarning`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

#: Re-measure a baseline after this long: a GPU's clocks and neighbours change over a run.
MAX_AGE_S = 1800.0
#: ...or after serving this many evaluations, so a long run still samples the device again.
MAX_USES = 25


class CachedValue(BaseModel):
    key: str
    measured_at: float
    uses: int = 0
    value: dict[str, Any]


class CacheOutcome(BaseModel):
    value: dict[str, Any]
    reused: bool
    age_s: float = 0.0
    #: set when a re-measure's interval does not overlap the previous measurement's
    drift: str | None = None
    #: set when the stored entry was corrupt or unreadable and was ignored
    note: str | None = None


def cache_key(**parts: Any) -> str:
    """A stable key from the parts that make a measurement comparable."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class CorruptEntryWarning(UserWarning):
    """A cache file that could not be read: it is measured again and overwritten."""


def _read(path: Path) -> tuple[CachedValue | None, str | None]:
    """The entry at ``path``, or None and why (no file is no reason: a first measurement)."""
    try:
        text = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no entry yet; a write will say if it cannot be
        return None, None
    except OSError as exc:
        return None, f"unreadable baseline cache entry {path.name} ignored ({exc.strerror or exc})"
    try:
        return CachedValue.model_validate_json(text), None
    except (ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"corrupt baseline cache entry {path.name} ignored and measured again ({first})"


class CacheWriteWarning(UserWarning):
    """A cache entry that could not be written: the measurement stands, only its reuse is lost."""


def write_atomically(path: Path, entry: BaseModel) -> None:
    """``entry`` as JSON at ``path``, written to a temporary file and renamed into place: a
    reader at the same moment sees the old entry or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(entry.model_dump_json())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _store(path: Path, entry: CachedValue) -> str | None:
    """Write ``entry``; a cache that cannot be written (a full disk, a folder that is a file)
    costs the next evaluation a re-measure, never this evaluation its figure."""
    try:
        write_atomically(path, entry)
    except OSError as exc:
        note = f"baseline cache entry {path.name} not written ({exc.strerror or exc})"
        warnings.warn(note, CacheWriteWarning, stacklevel=3)
        return note
    return None


def _notes(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def _interval(value: dict[str, Any]) -> tuple[float, float] | None:
    low, high = value.get("p10_ms"), value.get("p90_ms")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return float(low), float(high)
    return None


def _drift(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    a, b = _interval(old), _interval(new)
    if a is None or b is None or (a[0] <= b[1] and b[0] <= a[1]):
        return None
    return (f"drift: re-measured p10-p90 {b[0]:.4f}-{b[1]:.4f} ms, previously {a[0]:.4f}-{a[1]:.4f} ms "
            "(the device's speed changed during the run)")


def cached(
    directory: str | Path | None, key: str, measure: Callable[[], dict[str, Any]], now: Callable[[], float] = time.time
) -> CacheOutcome:
    """The cached value for ``key``, or ``measure()`` stored under it. No directory: measured."""
    if directory is None:
        return CacheOutcome(value=measure(), reused=False)
    path = Path(directory) / f"{key}.json"
    entry, note = _read(path)
    if note:
        warnings.warn(note, CorruptEntryWarning, stacklevel=2)
    t = now()
    if entry is not None and entry.key == key and t - entry.measured_at < MAX_AGE_S and entry.uses < MAX_USES:
        entry.uses += 1
        written = _store(path, entry)
        return CacheOutcome(value=entry.value, reused=True, age_s=max(0.0, t - entry.measured_at), note=written)
    value = measure()
    drift = _drift(entry.value, value) if entry is not None and entry.key == key else None
    written = _store(path, CachedValue(key=key, measured_at=t, uses=1, value=value))
    return CacheOutcome(value=value, reused=False, drift=drift, note=_notes(note, written))
