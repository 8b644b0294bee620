"""Deciding whether a timed call left work behind: judged against an honest op, never a fixed ratio.

CUDA events on one stream see only that stream. A call that launches its work on a side
stream (or from a thread) and returns at once times as almost nothing. The timing loop
therefore also times *synced windows*: record start, call, synchronize the whole device,
record end, interleaved with *bare windows* (the same without the call: the synchronize's own
cost). An honest call's synced window is at most its GPU time (the event median) plus the host
time spent issuing it (the GPU may idle while Python and the launches run), so per window

    hidden = (synced - bare) - event median - host time of the call

is zero or below for honest work, up to noise, and is GPU time nobody waited for when work was
deferred. A fixed threshold on ``synced / event`` rejected honest kernels (a 10 us kernel with
Python launch overhead reads 2.1x); here the noise is measured instead: the same windows around
an honest op (the problem's eager reference on the same inputs, in the same process) give the
spread of ``hidden`` that this GPU, driver and host produce for work that hides nothing. A call
is flagged only when its median hidden time is beyond that honest spread by a margin, is a real
share of its own time, and stays so on a fresh re-measurement (:func:`judge`).

Everything here is a pure function of measured samples, so each rule is tested without a GPU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

#: Below this much hidden time (ms) a synchronize's own jitter dominates whatever is measured.
DEFERRED_MIN_EXCESS_MS = 0.01
#: The hidden time must exceed the honest op's p90 by this many honest spreads (p90 - p10 of
#: its hidden time plus that of the bare synchronize): a spread is what honest work produced
#: here, and three of them leaves room for a noisier moment than the calibration saw.
DEFERRED_MARGIN_SPREADS = 3.0
#: Hidden time under this share of the call's own event median is not flagged: deferring less
#: than a fifth of the work changes the reported time by under 1.25x, within what the
#: interval of a timing already admits, and a rejection must be beyond doubt.
DEFERRED_MIN_FRACTION = 0.2
#: Series that must all flag before the flag is raised: one disturbed series never rejects.
DEFERRED_SERIES = 2


class SyncSeries(BaseModel):
    """One series of interleaved synced and bare windows (ms), and the call's host time (ms)."""

    model_config = ConfigDict(frozen=True)

    synced_ms: list[float]
    bare_ms: list[float]
    host_ms: list[float]


class SyncCalibration(BaseModel):
    """The hidden time an honest op shows in this process: the noise a flag must beat."""

    #: what was timed as the honest op ("eager reference", "device copy", ...)
    op: str
    event_median_ms: float
    hidden_p10_ms: float
    hidden_median_ms: float
    hidden_p90_ms: float
    #: p90 - p10 of the bare synchronize in the calibration windows
    bare_spread_ms: float
    windows: int

    @property
    def spread_ms(self) -> float:
        return max(self.hidden_p90_ms - self.hidden_p10_ms, 0.0) + max(self.bare_spread_ms, 0.0)


class DeferredJudgement(BaseModel):
    """What the synced windows of one call showed, and whether that is deferred work."""

    #: (synced median - bare median) / event median, reported for comparison with older runs
    sync_ratio: float
    #: median hidden time per series (ms), in the order measured
    hidden_ms: list[float] = Field(default_factory=list)
    #: the hidden time a series must exceed to count (ms)
    threshold_ms: float
    flagged: bool
    #: the ``deferred_work: ...`` flag when flagged
    flag: str | None = None


def _quantile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def hidden_samples(event_median_ms: float, series: SyncSeries) -> list[float]:
    """Per synced window: GPU time the call's own stream did not account for (ms)."""
    return [
        (synced - bare) - event_median_ms - max(host, 0.0)
        for synced, bare, host in zip(series.synced_ms, series.bare_ms, series.host_ms, strict=True)
    ]


def sync_ratio(event_median_ms: float, series: SyncSeries) -> float:
    """``(synced median - bare median) / event median``: the figure older versions judged alone."""
    excess = max(statistics.median(series.synced_ms) - statistics.median(series.bare_ms), 0.0)
    if event_median_ms > 0:
        return excess / event_median_ms
    return math.inf if excess > 0 else 1.0


def calibrate(op: str, event_median_ms: float, series: SyncSeries) -> SyncCalibration:
    """The honest op's hidden-time distribution: timed the same way as any call."""
    hidden = hidden_samples(event_median_ms, series)
    return SyncCalibration(
        op=op,
        event_median_ms=event_median_ms,
        hidden_p10_ms=_quantile(hidden, 0.1),
        hidden_median_ms=statistics.median(hidden),
        hidden_p90_ms=_quantile(hidden, 0.9),
        bare_spread_ms=_quantile(series.bare_ms, 0.9) - _quantile(series.bare_ms, 0.1),
        windows=len(hidden),
    )


def threshold_ms(event_median_ms: float, calibration: SyncCalibration | None, series: SyncSeries) -> float:
    """The median hidden time beyond which a series counts as deferred work.

    Without a calibration (no honest op could be timed), the call's own bare-synchronize spread
    stands in for the honest spread and zero for the honest p90.
    """
    if calibration is not None:
        base, spread = max(calibration.hidden_p90_ms, 0.0), calibration.spread_ms
    else:
        base, spread = 0.0, _quantile(series.bare_ms, 0.9) - _quantile(series.bare_ms, 0.1)
    return max(
        base + max(DEFERRED_MARGIN_SPREADS * spread, DEFERRED_MIN_EXCESS_MS),
        DEFERRED_MIN_FRACTION * max(event_median_ms, 0.0),
    )


def series_flags(event_median_ms: float, series: SyncSeries, calibration: SyncCalibration | None) -> bool:
    """Whether one series' median hidden time is past the threshold."""
    hidden = statistics.median(hidden_samples(event_median_ms, series))
    return hidden > threshold_ms(event_median_ms, calibration, series)


def judge(
    event_median_ms: float, series: Sequence[SyncSeries], calibration: SyncCalibration | None
) -> DeferredJudgement:
    """Deferred work only when every series, :data:`DEFERRED_SERIES` of them at least, flags.

    The timing loop measures a second series only when the first flags; fewer series than
    required never flag (a single disturbed series must not reject an honest kernel).
    """
    if not series:
        raise ValueError("no synced series to judge")
    hidden = [statistics.median(hidden_samples(event_median_ms, s)) for s in series]
    limit = max(threshold_ms(event_median_ms, calibration, s) for s in series)
    flagged = len(series) >= DEFERRED_SERIES and all(series_flags(event_median_ms, s, calibration) for s in series)
    ratio = sync_ratio(event_median_ms, series[-1])
    flag = None
    if flagged:
        against = f"an honest {calibration.op}'s p90 of {calibration.hidden_p90_ms:.4f} ms" if calibration else (
            "no honest op (not calibrated)")
        flag = (
            f"deferred_work: {min(hidden):.4f} ms per call ran on the GPU after the timed stream's end "
            f"({ratio:.1f}x the event time of {event_median_ms:.4f} ms with a device-wide sync), in "
            f"{len(series)} of {len(series)} series, against {against}: work left on other streams or threads"
        )
    return DeferredJudgement(sync_ratio=ratio, hidden_ms=hidden, threshold_ms=limit, flagged=flagged, flag=flag)


def needs_remeasure(event_median_ms: float, series: Sequence[SyncSeries], calibration: SyncCalibration | None) -> bool:
    """Whether the loop must measure another series before deciding: every one so far flags,
    and there are fewer than :data:`DEFERRED_SERIES`."""
    return len(series) < DEFERRED_SERIES and all(series_flags(event_median_ms, s, calibration) for s in series)
