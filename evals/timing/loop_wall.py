"""Deferred work seen by the timed loop itself: its wall time against what its events account for.

The synced windows (``deferred_work.py``) are calls of their own, separate from the timed
trials whose median is reported. A candidate that can tell the two apart (in the timed loop
calls come back to back while the host runs ahead; synced windows are separated by device-wide
synchronizes) can leave work on a side stream or a thread only in the timed loop and do it in
place in every synced window. The timed loop cannot be told apart from the figure it reports:
from the first flush to the final synchronize the device ran every trial's flush, every trial's
timed work and whatever was left behind. So, over the whole loop,

    honest:   wall <= max(host time issuing the loop, sum of (flush + event sample) + kgen's copies) + jitter
    deferred: wall ~= sum of (flush + event sample) + kgen's copies + the work nobody waited for

(kgen's copies: the few sampled trials' input refresh and output clone, ``timed_samples.py``,
each timed by events of its own.)

The flush is timed on the host around a synchronize, an upper bound of its device time, so an
honest loop reads at most zero here. Work a side stream runs *under* a flush is not seen (it is
at most a flush's time per call, the bound the synced windows have too), and a loop that
switches between host-bound and device-bound trials may drain the queue now and then: both are
why a margin is needed, and a flag must hold on a second, fresh loop (:func:`judge_loops`).

Pure functions of host-clock stamps and event samples: tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

#: Unaccounted wall time under this (ms per trial) is a launch's and a synchronize's jitter,
#: spread over the trials; the synced windows' floor (``DEFERRED_MIN_EXCESS_MS``) is the same.
LOOP_MIN_EXCESS_MS = 0.01
#: Unaccounted time under this share of a trial's accounted time (flush + event) is not
#: flagged: an honest loop whose calls alternate between host- and device-bound lets the queue
#: drain for part of some trials, and a rejection must be beyond doubt.
LOOP_MIN_FRACTION = 0.25
#: Loops that must all flag before the flag is raised: one disturbed loop never rejects.
LOOP_SERIES = 2


class LoopWall(BaseModel):
    """Host-clock stamps of one timed loop, and its event samples (all ms)."""

    model_config = ConfigDict(frozen=True)

    #: from the first flush to the last end record, before the final synchronize
    host_issue_ms: float
    #: from the first flush to the final synchronize's return
    wall_ms: float
    #: one flush, timed on the host around a synchronize (at least its device time)
    flush_ms: float
    #: the trials' event samples, one per trial
    event_samples_ms: list[float]
    #: device time of kgen's own copies between trials (sampled inputs refreshed, outputs
    #: kept: ``timed_samples.py``), each timed by an event pair of its own
    bookkeeping_ms: float = 0.0

    @property
    def trials(self) -> int:
        return len(self.event_samples_ms)


class LoopJudgement(BaseModel):
    """What the timed loops' wall time showed, and whether that is deferred work."""

    #: wall time per trial that neither the host's issuing nor the timed device work explains (ms),
    #: one per loop, in the order measured
    unaccounted_ms: list[float]
    #: the per-trial time a loop had to exceed to count (ms)
    threshold_ms: float
    flagged: bool
    #: the ``deferred_work: ...`` flag when flagged
    flag: str | None = None


def combine_rounds(rounds: Sequence[LoopWall]) -> LoopWall:
    """The rounds of one timed loop (``stopping.py``: each ends with a synchronize, to read its
    samples) as one loop: their times summed, their samples in order. The gaps between rounds
    (reading the events, deciding) are left out: they are the host's, not the loop's. Work left
    behind in a round is waited for by that round's synchronize, so it is in that round's wall
    time; each round's own start and end lag is spread over its trials, at least
    ``stopping.MIN_SAMPLES`` of them in the first and more in every later one."""
    if not rounds:
        raise ValueError("no round to combine")
    return LoopWall(
        host_issue_ms=sum(r.host_issue_ms for r in rounds),
        wall_ms=sum(r.wall_ms for r in rounds),
        flush_ms=rounds[0].flush_ms,
        event_samples_ms=[ms for r in rounds for ms in r.event_samples_ms],
        bookkeeping_ms=sum(r.bookkeeping_ms for r in rounds),
    )


def unaccounted_ms(loop: LoopWall) -> float:
    """Wall time per trial beyond what the host's issuing or the device's timed work explains."""
    if loop.trials == 0:
        return 0.0
    device = sum(loop.event_samples_ms) + loop.trials * max(loop.flush_ms, 0.0) + max(loop.bookkeeping_ms, 0.0)
    return (loop.wall_ms - max(loop.host_issue_ms, device)) / loop.trials


def threshold_ms(loop: LoopWall) -> float:
    """The unaccounted time per trial beyond which a loop counts as leaving work behind."""
    if loop.trials == 0:
        return float("inf")
    accounted = max(loop.flush_ms, 0.0) + sum(loop.event_samples_ms) / loop.trials
    return max(LOOP_MIN_EXCESS_MS, LOOP_MIN_FRACTION * accounted)


def loop_flags(loop: LoopWall) -> bool:
    return unaccounted_ms(loop) > threshold_ms(loop)


def needs_another_loop(loops: Sequence[LoopWall]) -> bool:
    """Whether to time another loop before deciding: every one so far flags, and there are
    fewer than :data:`LOOP_SERIES`."""
    return bool(loops) and len(loops) < LOOP_SERIES and all(loop_flags(w) for w in loops)


def judge_loops(loops: Sequence[LoopWall]) -> LoopJudgement:
    """Deferred work only when every loop, :data:`LOOP_SERIES` of them at least, flags."""
    if not loops:
        raise ValueError("no timed loop to judge")
    excess = [unaccounted_ms(w) for w in loops]
    limit = max(threshold_ms(w) for w in loops)
    flagged = len(loops) >= LOOP_SERIES and all(loop_flags(w) for w in loops)
    flag = None
    if flagged:
        first = loops[0]
        flag = (
            f"deferred_work: the timed loop took {min(excess):.4f} ms per call more than its events "
            f"({sum(first.event_samples_ms) / first.trials:.4f} ms mean) and flushes account for, in "
            f"{len(loops)} of {len(loops)} loops: work left on other streams or threads while timed"
        )
    return LoopJudgement(unaccounted_ms=excess, threshold_ms=limit, flagged=flagged, flag=flag)
