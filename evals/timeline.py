"""Where an evaluation's seconds go: named spans, each marked whether it keeps the GPU busy.

Every speed change to the evaluation engine is judged by this breakdown, so it must account
for (nearly) all of an evaluation's ``EvalResult.seconds``. A :class:`Span` starts at an epoch
time (``time.time()``, not the monotonic clock) so that the spans the parent records and
those the verifier child records in its own process line up on one axis. Spans nest: one
recorded while another is open is named ``outer.inner`` (``correctness.trial``); the
top-level spans of one evaluation do not overlap, and what they leave unaccounted is an
explicit ``other`` span.

The GPU-busy fraction is the union of the GPU spans over a wall interval divided by its
length: overlapping GPU spans (nested ones, or evaluations verified in parallel) count once.

Pure Python and pydantic: the parent, the summary and the report read it without torch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from pydantic import BaseModel, Field, PrivateAttr

#: The name of the span that holds what no other top-level span accounts for.
OTHER = "other"
#: Joins a nested span's name to the names of the spans open around it.
SEPARATOR = "."


class Span(BaseModel):
    """One named stretch of an evaluation; ``gpu``: it keeps the GPU busy (kernels, device
    copies), not merely holds it while the host works."""

    name: str
    #: epoch seconds (``time.time()``): comparable across processes on one host
    start: float
    seconds: float
    gpu: bool = False

    @property
    def end(self) -> float:
        return self.start + self.seconds

    @property
    def top_level(self) -> bool:
        return SEPARATOR not in self.name


class Timeline(BaseModel):
    """The spans of one evaluation (or of two merged: a verification and its timing), in the
    order they ended; ``span`` marks one in a line, nested spans named after the open ones."""

    spans: list[Span] = Field(default_factory=list)
    _open: list[str] = PrivateAttr(default_factory=list)

    def _named(self, name: str) -> str:
        return SEPARATOR.join([*self._open, name])

    def add(self, name: str, start: float, seconds: float, gpu: bool = False) -> Span:
        """A span measured elsewhere, nested under the spans open now."""
        span = Span(name=self._named(name), start=start, seconds=max(0.0, seconds), gpu=gpu)
        self.spans.append(span)
        return span

    def lap(self, name: str, since: float, gpu: bool = False) -> float:
        """A span from ``since`` to now; returns now, the next lap's ``since``."""
        now = time.time()
        self.add(name, since, now - since, gpu)
        return now

    @contextmanager
    def span(self, name: str, gpu: bool = False) -> Iterator[None]:
        """Time the block as one span; recorded also when the block raises (a rejection ends
        a stage by raising, and its seconds were spent all the same)."""
        start = time.time()
        full = self._named(name)
        self._open.append(name)
        try:
            yield
        finally:
            self._open.pop()
            self.spans.append(Span(name=full, start=start, seconds=max(0.0, time.time() - start), gpu=gpu))

    def extend(self, spans: Iterable[Span]) -> None:
        self.spans.extend(spans)

    def add_child(self, child: Timeline, launched: float, returned: float, start_name: str,
                  report_written: float | None) -> None:
        """The verifier child's own spans, and around them what only the parent saw of the
        child's run from ``launched`` to ``returned``: ``start_name`` up to the child's first
        span (a cold start's interpreter and imports, or a spare's hand-over), ``report`` up
        to when its last report was written (the file's modification time), ``exit`` from
        then until the parent had the child's end; for a child that never finished its
        report (killed, timed out) the stretch after its last top-level span is
        ``unreported`` (``report_written`` None), and for one that recorded no span the whole
        run is ``child``."""
        top = child.top_level()
        if not top:
            self.add("child", launched, returned - launched)
            self.extend(child.spans)
            return
        first, last = min(s.start for s in top), max(s.end for s in top)
        self.add(start_name, launched, first - launched)
        self.extend(child.spans)
        if report_written is not None:
            # a file's time comes from the kernel's coarse clock (a few ms behind time.time())
            written = min(max(report_written, last), returned)
            self.add("report", last, written - last)
            self.add("exit", written, returned - written)
        else:
            self.add("unreported", last, returned - last)

    def top_level(self) -> list[Span]:
        return [s for s in self.spans if s.top_level]

    def accounted_s(self) -> float:
        """Seconds the top-level spans account for, ``other`` excluded."""
        return sum(s.seconds for s in self.top_level() if s.name != OTHER)

    def add_other(self, total_s: float) -> None:
        """The seconds of ``total_s`` the top-level spans leave unaccounted, as one ``other``
        span placed after the last one (a remainder, not a measured stretch)."""
        left = total_s - sum(s.seconds for s in self.top_level())
        if left > 0:
            end = max((s.end for s in self.spans), default=time.time())
            self.spans.append(Span(name=OTHER, start=end, seconds=left))

    def totals(self) -> dict[str, float]:
        """Seconds per span name (every nesting level), in the order the names first ended."""
        return phase_totals([self])

    def wall(self) -> tuple[float, float] | None:
        """The first start and the last end, None for an empty timeline."""
        if not self.spans:
            return None
        return min(s.start for s in self.spans), max(s.end for s in self.spans)

    def gpu_busy_fraction(self) -> float | None:
        """The union of the GPU spans over this timeline's own wall interval."""
        return busy_fraction([self])


def phase_totals(timelines: Iterable[Timeline]) -> dict[str, float]:
    """Seconds per span name summed over several evaluations (rounded to the millisecond)."""
    totals: dict[str, float] = {}
    for timeline in timelines:
        for span in timeline.spans:
            totals[span.name] = totals.get(span.name, 0.0) + span.seconds
    return {name: round(seconds, 3) for name, seconds in totals.items()}


def union_seconds(intervals: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """Length of the union of ``(start, end)`` intervals clipped to ``[start, end]``: time
    covered by at least one of them, overlaps counted once."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if min(b, end) > max(a, start))
    covered, reach = 0.0, start
    for a, b in clipped:
        if b <= reach:
            continue
        covered += b - max(a, reach)
        reach = b
    return covered


def busy_fraction(timelines: Iterable[Timeline], wall: tuple[float, float] | None = None) -> float | None:
    """The share of ``wall`` during which at least one GPU span of ``timelines`` ran; ``wall``
    defaults to the first start to the last end over all of them. None: no span, or no time."""
    timelines = list(timelines)
    if wall is None:
        walls = [w for t in timelines if (w := t.wall()) is not None]
        if not walls:
            return None
        wall = min(w[0] for w in walls), max(w[1] for w in walls)
    start, end = wall
    if end <= start:
        return None
    gpu = [(s.start, s.end) for t in timelines for s in t.spans if s.gpu]
    return union_seconds(gpu, start, end) / (end - start)


class PhaseClock:
    """Seconds per phase of a timing (the verifier's timing stage, the baseline job), each lap
    ending the phase it names; with a timeline, each phase is also one of its spans
    (``timing.<phase>`` under the stage), marked ``gpu`` where the phase keeps the GPU busy."""

    def __init__(self, timeline: Timeline | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()
        self._timeline = timeline
        self._last_epoch = time.time()

    def lap(self, name: str, gpu: bool = False) -> None:
        now = time.monotonic()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 3)
        self._last = now
        if self._timeline is not None:
            self._last_epoch = self._timeline.lap(name, self._last_epoch, gpu)
