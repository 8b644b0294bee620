"""Jobs spread over lanes, and what happens when a lane is lost.

Each lane has ``slots`` places; a thread per place takes the next job from one queue shared
by every caller of the executor (a suite's problems run at once, each batch queues its
candidates, and the lanes take them in order). When a lane ends under a job
(:class:`~kgen.evals.executors.interface.LaneLost`: its process died, its Ray node was lost)
the lane is replaced and the job is tried once more, on another lane where there is one; a
job lost twice is ``inconclusive (worker_killed)``. A verifier killed from outside inside a
lane (``worker_killed`` from the lane itself) is tried once more the same way. A job's first
and second tries are both recorded (``Placement.attempt``). Nothing finished is lost: each
result reaches ``on_result`` as it arrives.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kgen.core.text import counted
from kgen.evals.executors.interface import LaneLost, LaneStopped, OnResult, OnStart, Stop
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.placement import Placement
from kgen.evals.result import EvalResult
from kgen.evals.sandbox import lifecycle
from kgen.evals.verdict import InconclusiveCause

#: tries per job: the first, and one more after a lost lane or a killed verifier
TRIES = 2


class LaneHandle(ABC):
    """A lane seen from the caller: runs one job at a time per slot, blocking."""

    placement: Placement
    slots: int

    @abstractmethod
    def run(self, job: EvalJob, *, together: bool) -> EvalResult:
        """The job's result; raises :class:`LaneLost` if the lane ends under it, and
        ``KgenUsageError`` for a job the lane cannot start (the caller's mistake)."""

    @abstractmethod
    def close(self) -> None:
        """End the lane and everything it started."""


@dataclass
class _Task:
    job: EvalJob
    index: int
    batch: _Batch
    attempt: int = 1
    #: the lane that lost it: the retry goes elsewhere where another lane lives
    avoid: str | None = None


@dataclass
class _Batch:
    size: int
    together: bool
    on_result: OnResult
    stop: Stop
    on_start: OnStart
    results: dict[int, EvalResult | None] = field(default_factory=dict)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def finish(self, index: int, result: EvalResult | None) -> None:
        if result is not None:
            try:
                self.on_result(index, result)
            except BaseException as exc:  # the caller's own callback failed: raised in the caller
                self.fail(exc)
        with self.lock:
            self.results[index] = result
            if len(self.results) == self.size:
                self.done.set()

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            self.error = self.error or exc
        self.done.set()


class LaneDispatcher:
    """The queue and the lane threads. ``start_lane(i)`` starts (or restarts) lane ``i``."""

    def __init__(self, start_lane: Callable[[int], LaneHandle], count: int,
                 say: Callable[[str], None] | None = None) -> None:
        self._start_lane = start_lane
        self._say = say or (lambda line: None)
        self._cv = threading.Condition()
        self._queue: deque[_Task] = deque()
        self._closed = False
        self._lanes: list[LaneHandle] = _start_all(start_lane, count)
        self._replaced = [0] * count
        self._busy = [0] * count  # jobs running per lane: a job goes to the least busy lane
        self._threads = [threading.Thread(target=self._serve, args=(i, s), daemon=True, name=f"kgen-lane{i}-{s}")
                         for i, lane in enumerate(self._lanes) for s in range(lane.slots)]
        for thread in self._threads:
            thread.start()

    def lanes(self) -> list[Placement]:
        return [lane.placement for lane in self._lanes]

    def handles(self) -> list[LaneHandle]:
        """The lanes now (a replaced lane's successor in its place): for tests and reports."""
        return list(self._lanes)

    def busy_handles(self) -> list[LaneHandle]:
        """The lanes running a job now."""
        with self._cv:
            return [lane for lane, busy in zip(self._lanes, self._busy, strict=True) if busy]

    def capacity(self) -> int:
        return sum(lane.slots for lane in self._lanes)

    def replacements(self) -> int:
        return sum(self._replaced)

    def evaluate(self, jobs: Sequence[EvalJob], on_result: OnResult, stop: Stop, on_start: OnStart,
                 together: bool) -> list[EvalResult]:
        if not jobs:
            return []
        batch = _Batch(size=len(jobs), together=together, on_result=on_result, stop=stop, on_start=on_start)
        with self._cv:
            self._queue.extend(_Task(job=job, index=i, batch=batch) for i, job in enumerate(jobs))
            self._cv.notify_all()
        while not batch.done.wait(0.2):  # a short wait: Ctrl-C reaches the caller's thread
            lifecycle.raise_if_ending()
        lifecycle.raise_if_ending()  # the jobs ended because kgen is stopping: so does the caller
        if batch.error is not None:
            raise batch.error
        return [r for i in range(len(jobs)) if (r := batch.results.get(i)) is not None]

    def close(self) -> None:
        with self._cv:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            self._cv.notify_all()
        for task in left:
            task.batch.finish(task.index, None)
        for lane in self._lanes:
            lane.close()

    # -- lane threads ---------------------------------------------------------------

    def _next(self, lane: int, slot: int) -> _Task | None:
        """The first queued task this slot may take: a job run alone (not side by side: a
        self-test's problem, a lone candidate) only in a lane's first slot, so a lane runs
        at most one of those at a time; a retry elsewhere than the lane that lost it."""
        with self._cv:
            while not self._closed:
                name = self._lanes[lane].placement.lane
                if self._least_busy(lane):
                    for task in self._queue:
                        if slot > 0 and not task.batch.together:
                            continue
                        if task.avoid != name or len(self._lanes) == 1:
                            self._queue.remove(task)
                            self._busy[lane] += 1
                            return task
                self._cv.wait(0.5)
            return None

    def _least_busy(self, lane: int) -> bool:
        """Whether ``lane`` runs no more jobs than any other lane: a batch of eight on four
        GPUs runs two on each, not eight on the first lane whose thread woke."""
        return self._busy[lane] <= min(self._busy)

    def _done(self, lane: int) -> None:
        with self._cv:
            self._busy[lane] -= 1
            self._cv.notify_all()

    def _serve(self, lane: int, slot: int) -> None:
        while (task := self._next(lane, slot)) is not None:
            try:
                self._run(lane, task)
            finally:
                self._done(lane)

    def _run(self, lane: int, task: _Task) -> None:
        batch = task.batch
        if batch.error is not None or lifecycle.ending() is not None or (task.attempt == 1 and batch.stop()):
            batch.finish(task.index, None)
            return
        if task.attempt == 1:
            batch.on_start(task.index)
        handle = self._lanes[lane]
        try:
            # a timed job always takes its turn: other batches' jobs may share its GPU
            result = handle.run(task.job, together=batch.together or task.job.options.bench)
        except LaneLost as lost:
            if isinstance(lost, LaneStopped) or self._closed or (why := lifecycle.ending()) is not None:
                why = str(lost) if isinstance(lost, LaneStopped) else (why or "kgen closed its lanes")
                batch.finish(task.index, task.job.no_verdict(
                    handle.placement.model_copy(update={"attempt": task.attempt}), InconclusiveCause.STOPPED,
                    f"{why} and ended lane {handle.placement.label} mid-run: no verdict on the candidate"))
                return
            self._replace(lane, handle, str(lost))
            self._retry_or_give_up(task, handle.placement, f"its lane {handle.placement.label} was lost ({lost})")
            return
        except BaseException as exc:  # a usage error: the caller's mistake, raised in the caller
            batch.fail(exc)
            return
        result.placement = (result.placement or handle.placement).model_copy(update={"attempt": task.attempt})
        if result.inconclusive is InconclusiveCause.WORKER_KILLED and task.attempt < TRIES:
            self._retry_or_give_up(task, handle.placement, result.reason)
            return
        batch.finish(task.index, result)

    def _retry_or_give_up(self, task: _Task, placement: Placement, why: str) -> None:
        if task.attempt < TRIES:
            self._say(f"{task.job.candidate}: {why}; trying it once more"
                      f"{' on another lane' if len(self._lanes) > 1 else ''}")
            with self._cv:
                self._queue.appendleft(_Task(job=task.job, index=task.index, batch=task.batch,
                                             attempt=task.attempt + 1, avoid=placement.lane))
                self._cv.notify_all()
            return
        task.batch.finish(task.index, _lost(task, placement, why))

    def _replace(self, lane: int, handle: LaneHandle, why: str) -> None:
        """Start a new lane in place of one lost (once: its other slots' threads find it done)."""
        with self._cv:
            if self._lanes[lane] is not handle or self._closed:
                return
            self._replaced[lane] += 1
        self._say(f"lane {handle.placement.label} was lost ({why}): starting a new one")
        handle.close()
        started = time.monotonic()
        try:
            fresh = self._start_lane(lane)
        except Exception as exc:  # no new lane: the others go on; this lane's threads retry later
            self._say(f"lane {handle.placement.label} could not be started again: {exc}")
            return
        with self._cv:
            self._lanes[lane] = fresh
        self._say(f"lane {fresh.placement.label} started again in {time.monotonic() - started:.1f} s")


def _start_all(start_lane: Callable[[int], LaneHandle], count: int) -> list[LaneHandle]:
    """Every lane, started at once (each loads torch and kgen: seconds apiece)."""
    lanes: list[LaneHandle | None] = [None] * count
    errors: list[BaseException] = []

    def start(i: int) -> None:
        try:
            lanes[i] = start_lane(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for lane in lanes:
            if lane is not None:
                lane.close()
        raise errors[0]
    return [lane for lane in lanes if lane is not None]


def _lost(task: _Task, placement: Placement, why: str) -> EvalResult:
    """The result of a job lost on every try: no verdict, and said why."""
    return task.job.no_verdict(
        placement.model_copy(update={"attempt": task.attempt}), InconclusiveCause.WORKER_KILLED,
        f"lost on {counted(task.attempt, 'try', 'tries')}: {why}; the fault is the machine's or kgen's, "
        "no verdict on the candidate")
