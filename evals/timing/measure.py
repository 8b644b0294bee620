"""GPU timing done the way a careful engineer does it by hand.

``time_on_gpu(fn, input_sets)`` is the one way kgen times a kernel (candidates
and the eager / ``torch.compile`` baselines alike, in the same process):

* **Warm-up first.** ``warmup`` calls (at least one: the first call compiles)
  run before any timed trial. Each warm-up call is timed on the host clock
  (device synchronized on both sides); they give the per-trial cost estimate.
* **Trials fit the budget.** trials = budget / (L2-flush time + median
  warm-up call after the first), clamped to ``[min_trials, max_trials]``.
  The first warm-up call is left out of the estimate when there are others:
  it carries compilation and autotuning. That is the cap.
* **Trials stop when they know** (``stopping.py``). The timed trials run in
  rounds (the stopping rule's floor, ``MIN_SAMPLES``, first; then half again
  the trials so far); after each, the median's distribution-free confidence
  interval is read, and the loop stops once it is within 1% of the median, or,
  given ``rank_against_ms`` (the current best candidate's median), once it lies
  wholly beyond the best by the ranking margin; else at the cap. The result
  says how many trials ran, of how many planned, and why it stopped
  (``stop_reason``). What every check gets whatever the stop: at least
  ``MIN_SAMPLES`` timed trials (or every planned one where fewer fit the
  budget), as before any stop was possible; the deferred-work windows sized by
  the planned trials, not by those that ran (``sync_windows``), so that check
  gets exactly the evidence a full-budget timing gives it; the timed-output
  check's calls drawn uniformly among the trials that ran (reservoir sampling,
  ``timed_samples.py``); the loop's wall time judged over all its rounds
  (``loop_wall.combine_rounds``); and the speed-of-light re-check re-timed with
  the precision rule alone (``timing_stage.py``).
* **CUDA events, one pair per trial, read once per round.** Each trial records
  its own start and end event on the stream that was current when timing
  began; nothing is read until the round's one final
  ``torch.cuda.synchronize()``, so reading a timer never stalls the queue
  between trials of a round. The median is reported (with mean, min, p10,
  p90 and the median's confidence interval).
* **L2 flushed before each trial** by writing (``zero_``) a buffer of twice
  the device's L2 (``get_device_properties().L2_cache_size``; a 256 MB buffer
  when the property is missing), enqueued before the start event.
* **Inputs rotated in an order no candidate can predict** over ``input_sets``
  across warm-up, timed and sync trials alike: each call gets a set drawn at
  random from a private generator among those other than the last call's, so
  no call uses the buffers of the call before it (given two or more sets) and
  neither the call count nor the addresses seen so far tell which comes next
  (``timed_samples.py``). A flag says when two sets share a tensor.
* **Timed outputs sampled** (given a ``sampler``, ``timed_samples.py``): a few
  timed calls, drawn at random, get fresh values written into their buffers
  before their flush and have their outputs cloned after their end event; each
  of those copies is bracketed by an event pair of its own, so the loop's
  wall-time check counts it as accounted for. The caller compares the kept
  outputs with a reference afterwards.
* **L2 state.** Before each timed run the persisting L2 state is reset (its
  lines, its limit, the timed stream's access window: ``l2_state.py``); the
  result says what the reset did (``l2_state``).
* **Deferred work.** Events on one stream see only that stream: a candidate
  that launches its work on a side stream (or from another thread) and returns
  at once times as almost nothing. So a smaller number of trials is also timed
  with the end event recorded *after* a device-wide ``torch.cuda.synchronize()``
  (record start, call, synchronize the whole device, record end), interleaved
  with the same window around no call (the synchronize's own cost), and the
  call's host time is taken in each. ``deferred_work.py`` decides from those
  samples, against the same windows around an honest op timed in the same
  process (:func:`calibrate_sync`, given as ``calibration``), and only when a
  fresh second series agrees. The host clock is not used for the GPU side of
  this comparison: host-side launch overhead differs between a queue that runs
  ahead and one drained every call. Work a background thread launches *after*
  the synchronize is not seen here; the thread check below catches the thread.
  The synced windows are calls of their own: a candidate that defers only while
  calls come back to back is caught instead by the timed loop's own wall time,
  which its events and flushes must explain (``loop_wall.py``, again on two loops).
* **Timer identity.** At import this module captures ``torch.cuda.Event``,
  its ``record``/``elapsed_time``/``synchronize``, ``torch.cuda.synchronize``
  and ``time.perf_counter``, and times only through those captured objects.
  Before and after timing it checks that the public names still point at
  them, and that the captured ones come from torch / the ``time`` module
  (in case something patched them before this module was imported); any
  difference is the flag ``timer_patched``.
* **Threads.** Threads of the process (``/proc/self/task``; Python threads
  where there is no ``/proc``) are listed after CUDA set-up, after warm-up
  and after timing; new ones give the flag ``threads_started``, saying in
  which phase (compilers may start worker threads during warm-up; a thread
  born during the timed trials is suspect).

Without CUDA every entry point raises :class:`TimingUnavailable`: kgen never
reports a time it did not measure.
"""

from __future__ import annotations

import inspect
import math
import os
import statistics
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from pydantic import Field

from kgen.errors import KgenError
from kgen.evals.timing.deferred_work import (
    SyncCalibration,
    SyncSeries,
    calibrate,
    judge,
    needs_remeasure,
)
from kgen.evals.timing.l2_state import reset_persisting_l2
from kgen.evals.timing.loop_wall import LoopWall, combine_rounds, judge_loops, needs_another_loop
from kgen.evals.timing.stopping import (
    DEFAULT_RULE,
    StoppingRule,
    StopReason,
    decide,
    median_interval,
    next_round,
)
from kgen.evals.timing.timed_samples import InputOrder, TimedSampler
from kgen.evals.verdict import ResultModel

NO_GPU_MESSAGE = (
    "timings need a CUDA GPU: torch.cuda.is_available() is False on this machine, "
    "and kgen never reports a time it did not measure"
)

#: the flush buffer when the device does not report its L2 size
L2_FALLBACK_BYTES = 256 * 1024 * 1024

class TimingUnavailable(KgenError, RuntimeError):
    """No CUDA GPU here: nothing can be timed, and no number is invented instead."""


class TimingResult(ResultModel):
    """One function timed on one GPU: the distribution of its per-call time and the warnings."""

    median_ms: float
    mean_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    #: timed trials (event pairs) the statistics above come from
    trials: int
    #: the trials the budget allowed (the cap); ``trials`` is fewer when the stopping rule stopped
    planned_trials: int = 0
    #: why the timed trials ended (``stopping.StopReason``)
    stop_reason: StopReason = StopReason.CAP
    #: rounds the timed trials ran in (one synchronize and one read of the events each)
    rounds: int = 1
    #: the median's distribution-free confidence interval (ms; ``stopping.median_interval``)
    median_interval_ms: tuple[float, float] | None = None
    #: the best candidate's median the trials were ranked against (ms); None: precision alone
    rank_against_ms: float | None = None
    #: untimed calls before the first trial
    warmup: int
    #: distinct input sets the calls were drawn from (in a random order)
    input_sets: int
    #: bytes written before each trial to flush L2
    l2_flush_bytes: int
    #: (median with a device-wide synchronize inside the window - bare synchronize) / median_ms;
    #: None when not measured (reported; the deferred-work decision is ``deferred_work.judge``)
    sync_ratio: float | None = None
    #: median GPU time per call past the timed stream's end, per synced series measured (ms)
    sync_hidden_ms: list[float] = Field(default_factory=list)
    #: the hidden time a series had to exceed to count as deferred work (ms)
    sync_threshold_ms: float | None = None
    #: the honest op the threshold was calibrated on; None: not calibrated
    sync_calibration: SyncCalibration | None = None
    sync_trials: int = 0
    #: per timed loop: wall time per call its events and flushes did not explain (ms; ``loop_wall.py``)
    loop_unaccounted_ms: list[float] = Field(default_factory=list)
    #: raw median (ms) of the trials with a device-wide synchronize inside the window
    sync_median_ms: float | None = None
    #: median (ms) of the same window around no call: the synchronize's own cost
    sync_overhead_ms: float | None = None
    #: "name: detail" warnings: deferred_work, timer_patched, threads_started, stream_changed,
    #: inputs_reused, budget_exceeded
    flags: list[str] = Field(default_factory=list)
    device_name: str = ""
    budget_s: float = 0.0
    #: what resetting the persisting L2 state before the run did (``l2_state.py``)
    l2_state: str = ""
    #: timed trials whose outputs were kept for a check afterwards (``timed_samples.py``)
    sampled_trials: list[int] = Field(default_factory=list)

    def flag_names(self) -> list[str]:
        """The flags' names (the part before the colon), in order."""
        return [f.split(":", 1)[0] for f in self.flags]

    def has_flag(self, name: str) -> bool:
        return name in self.flag_names()


# --------------------------------------------------------------------------------------
# Timer identity
# --------------------------------------------------------------------------------------

_TORCH_DIR = Path(torch.__file__).resolve().parent


def _lookup(name: str) -> Any:
    """The object a dotted public name points at *now*: "torch.cuda.Event.record"."""
    head, *rest = name.split(".")
    obj: Any = {"torch": torch, "time": time}[head]
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


#: what timing uses, captured when this module is imported. The Python wrappers of
#: ``torch.cuda.Event`` call their base class (torch's C event type) at call time, so its
#: methods are captured too and timing calls them directly.
_TIMER_NAMES = (
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.Event.__base__.record",
    "torch.cuda.Event.__base__.elapsed_time",
    "torch.cuda.synchronize",
    "torch._C._cuda_synchronize",
    "time.perf_counter",
)
#: None where this torch build lacks the name (a CPU build has no C event methods)
_ORIGINAL: dict[str, Any] = {name: _lookup(name) for name in _TIMER_NAMES}
_EVENT: Any = _ORIGINAL["torch.cuda.Event"]
_RECORD: Callable[..., Any] = _ORIGINAL["torch.cuda.Event.__base__.record"] or _ORIGINAL["torch.cuda.Event.record"]
_ELAPSED: Callable[[Any, Any], float] = (
    _ORIGINAL["torch.cuda.Event.__base__.elapsed_time"] or _ORIGINAL["torch.cuda.Event.elapsed_time"]
)
_SYNCHRONIZE: Callable[..., Any] = _ORIGINAL["torch.cuda.synchronize"]
_PERF: Callable[[], float] = _ORIGINAL["time.perf_counter"]


def _genuine(name: str, obj: Any) -> bool:
    """Whether ``obj`` is what torch / the time module define under ``name``."""
    if name == "time.perf_counter":
        return getattr(obj, "__self__", None) is sys.modules["time"] and getattr(obj, "__name__", "") == "perf_counter"
    if isinstance(obj, (types.FunctionType, type)):
        # Python code: torch's own source file, under the expected name
        if getattr(obj, "__qualname__", "").split(".")[-1] != name.split(".")[-1]:
            return False
        try:
            source = Path(inspect.getfile(obj)).resolve()
        except (TypeError, OSError):
            return False
        return source.is_relative_to(_TORCH_DIR)
    # compiled code (torch._C functions, C type methods): not something Python code defines
    return type(obj).__module__ == "builtins" and not isinstance(obj, types.MethodType)


def _describe(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{module}.{qualname}"


def timer_integrity() -> list[str]:
    """``timer_patched`` flags: a timing primitive replaced since import, or not torch's own."""
    flags = []
    for name, original in _ORIGINAL.items():
        now = _lookup(name)
        if original is None and now is None:
            continue  # not part of this torch build
        if now is not original:
            flags.append(f"timer_patched: {name} is not the original (now {_describe(now)})")
        elif not _genuine(name, original):
            flags.append(
                f"timer_patched: {name} was replaced before kgen.evals.timing.measure was imported "
                f"(it is {_describe(original)})"
            )
    return flags


# --------------------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------------------


def thread_snapshot() -> dict[int, str]:
    """The process's live threads, id -> name: OS threads from /proc (named as Python names
    them where they are Python threads), else Python threads."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {t.ident or 0: t.name for t in threading.enumerate()}
    python_names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    threads: dict[int, str] = {}
    for tid in tids:
        if int(tid) in python_names:
            threads[int(tid)] = python_names[int(tid)]
            continue
        try:
            threads[int(tid)] = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:  # ended between the listing and the read
            continue
    return threads


def threads_flag(before: dict[int, str], after: dict[int, str], phase: str) -> str | None:
    """A ``threads_started`` flag when ``after`` has threads ``before`` did not."""
    new = {tid: name for tid, name in after.items() if tid not in before}
    if not new:
        return None
    names = ", ".join(sorted({name or "?" for name in new.values()}))
    return f"threads_started: {len(new)} new thread(s) during {phase} ({names})"


# --------------------------------------------------------------------------------------
# Pure helpers (unit-tested without a GPU)
# --------------------------------------------------------------------------------------


def l2_flush_bytes(props: Any) -> int:
    """Twice the device's L2 (``props.L2_cache_size``), or 256 MB when it does not say."""
    l2 = getattr(props, "L2_cache_size", 0) or 0
    return 2 * int(l2) if l2 > 0 else L2_FALLBACK_BYTES


def plan_trials(per_trial_s: float, budget_s: float, min_trials: int, max_trials: int) -> int:
    """How many trials fit the budget at ``per_trial_s`` each, within [min_trials, max_trials]."""
    if not per_trial_s > 0 or not math.isfinite(per_trial_s):
        return max_trials if per_trial_s == 0 else min_trials
    return max(min_trials, min(max_trials, int(budget_s / per_trial_s)))


def sync_windows(planned_trials: int) -> int:
    """Synced windows per deferred-work series: a fifth of the planned trials, 5 to 50. Sized
    by the trials the budget allowed, not by those an early stop ran: the deferred-work check
    gets the same evidence however soon the median is known."""
    return max(5, min(50, planned_trials // 5))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] of already sorted values."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors(item)]
    return []


def input_reuse_flags(input_sets: Sequence[Sequence[Any]]) -> list[str]:
    """``inputs_reused`` when a call could touch the buffers of the call before it: any two
    sets sharing a tensor (the order is random, so any two may follow each other)."""
    n = len(input_sets)
    if n == 1:
        if _tensors(list(input_sets[0])):
            return ["inputs_reused: one input set: every trial reads the same buffers (L2 is still flushed)"]
        return []
    shared = []
    for i in range(n):
        ptrs = {t.data_ptr() for t in _tensors(list(input_sets[i])) if t.numel()}
        for j in range(i + 1, n):
            if any(t.numel() and t.data_ptr() in ptrs for t in _tensors(list(input_sets[j]))):
                shared.append(f"{i}-{j}")
    if shared:
        return [f"inputs_reused: input sets share a tensor ({', '.join(shared)})"]
    return []


def _stats(samples_ms: Sequence[float]) -> dict[str, float]:
    s = sorted(samples_ms)
    return {
        "median_ms": statistics.median(s),
        "mean_ms": statistics.fmean(s),
        "min_ms": s[0],
        "p10_ms": percentile(s, 10),
        "p90_ms": percentile(s, 90),
    }


# --------------------------------------------------------------------------------------
# The timing loop
# --------------------------------------------------------------------------------------


class _CudaClock:
    """The device primitives the loop needs, all through the objects captured at import."""

    def __init__(self, device: int):
        self.device = device
        self.stream = torch.cuda.current_stream(device)
        self.flush_bytes = l2_flush_bytes(torch.cuda.get_device_properties(device))
        self._flush_buffer = torch.empty(self.flush_bytes, dtype=torch.uint8, device=device)
        self.device_name = torch.cuda.get_device_name(device)

    def flush(self) -> None:
        self._flush_buffer.zero_()

    def event(self) -> Any:
        return _EVENT(enable_timing=True)

    def record(self, event: Any) -> None:
        _RECORD(event, self.stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(_ELAPSED(start, end))

    def synchronize(self) -> None:
        _SYNCHRONIZE(self.device)

    def now(self) -> float:
        return _PERF()

    def stream_flag(self) -> str | None:
        current = torch.cuda.current_stream(self.device)
        if current != self.stream:
            return "stream_changed: fn left a different current stream than the one being timed"
        return None

    def reset_l2(self) -> str:
        """The persisting L2 state reset (``l2_state.py``); what was done, in words."""
        return reset_persisting_l2(self.stream.cuda_stream).describe()


class _Caller:
    """``fn`` called on the input set each call draws (``InputOrder``): the one place a call is made."""

    def __init__(self, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]]):
        self.fn = fn
        self.sets = [tuple(s) for s in input_sets]
        self.order = InputOrder(len(self.sets))

    def run(self, index: int) -> Any:
        return self.fn(*self.sets[index])

    def __call__(self) -> Any:
        return self.run(self.order.next())


def _check_arguments(input_sets: Sequence[Sequence[Any]], budget_s: float, warmup: int,
                     min_trials: int, max_trials: int) -> None:
    if len(input_sets) == 0:
        raise ValueError("input_sets is empty: pass at least one sequence of arguments (e.g. [()])")
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive, got {budget_s}")
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 (the first call compiles), got {warmup}")
    if min_trials < 1 or max_trials < min_trials:
        raise ValueError(f"need 1 <= min_trials <= max_trials, got {min_trials}, {max_trials}")


def _timing_loop(clock: Any, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], *,
                 budget_s: float, warmup: int, min_trials: int, max_trials: int,
                 check_sync: bool, calibration: SyncCalibration | None = None,
                 sampler: TimedSampler | None = None, stopping: StoppingRule | None = DEFAULT_RULE,
                 rank_against_ms: float | None = None) -> TimingResult:
    call = _Caller(fn, input_sets)
    flags = timer_integrity() + input_reuse_flags(call.sets)

    clock.synchronize()
    l2_state = clock.reset_l2()
    threads_start = thread_snapshot()

    # The flush's own cost, then the warm-up calls, each timed on the host (synchronized).
    t0 = clock.now()
    clock.flush()
    clock.synchronize()
    flush_s = clock.now() - t0
    warm_s, flush_warm_s = [], [flush_s]
    for _ in range(warmup):
        t0 = clock.now()
        clock.flush()
        clock.synchronize()
        flush_warm_s.append(clock.now() - t0)
        t0 = clock.now()
        call()
        clock.synchronize()
        warm_s.append(clock.now() - t0)
    threads_warm = thread_snapshot()
    if flag := clock.stream_flag():
        flags.append(flag)

    per_trial_s = flush_s + statistics.median(warm_s[1:] or warm_s)
    trials = plan_trials(per_trial_s, budget_s * (0.8 if check_sync else 1.0), min_trials, max_trials)

    # A flush timed around a synchronize on an idle device: at least its device time (the
    # median leaves out the first, which may load the fill kernel).
    flush_ms = statistics.median(flush_warm_s[1:] or flush_warm_s) * 1000.0
    run = _adaptive_trials(clock, call, trials, min_trials, budget_s, flush_ms, sampler, stopping, rank_against_ms)
    samples = run.samples
    late = run.reason is StopReason.BUDGET_EXCEEDED
    if late:
        flags.append(f"budget_exceeded: stopped after {len(samples)} of {trials} planned trials")
    stats = _stats(samples)
    loop_judgement = None
    if check_sync:
        # The loop's own wall time must be explained by its events and flushes: work left
        # behind only while the calls come back to back is not seen by the synced windows.
        # A loop that is not explained is timed again, fresh (as many trials as the first
        # ran, in one round), before anything is flagged.
        loops = [run.loop]
        while needs_another_loop(loops):
            loops.append(_timed_trials(clock, call, len(samples), min_trials, _deadline(clock, budget_s),
                                       flush_ms)[1])
        loop_judgement = judge_loops(loops)
        if loop_judgement.flag:
            flags.append(loop_judgement.flag)

    judgement = None
    sync_median = overhead_median = None
    sync_trials = 0
    if check_sync:
        # Same window with a device-wide synchronize before the end event, interleaved with
        # the same window around no call (the synchronize's own cost). A series that flags is
        # measured again, fresh: one disturbed series never rejects a kernel.
        sync_trials = sync_windows(len(samples) if late else trials)
        series = [_sync_series(clock, call, sync_trials)]
        while needs_remeasure(stats["median_ms"], series, calibration):
            series.append(_sync_series(clock, call, sync_trials))
        judgement = judge(stats["median_ms"], series, calibration)
        sync_median, overhead_median = statistics.median(series[-1].synced_ms), statistics.median(series[-1].bare_ms)
        if judgement.flag:
            flags.append(judgement.flag)

    threads_end = thread_snapshot()
    for before, after, phase in ((threads_start, threads_warm, "warm-up"),
                                 (threads_warm, threads_end, "the timed trials")):
        if flag := threads_flag(before, after, phase):
            flags.append(flag)
    if (flag := clock.stream_flag()) and flag not in flags:
        flags.append(flag)
    flags += [f for f in timer_integrity() if f not in flags]

    return TimingResult(
        **stats,
        trials=len(samples),
        planned_trials=trials,
        stop_reason=run.reason,
        rounds=run.rounds,
        median_interval_ms=median_interval(samples, (stopping or DEFAULT_RULE).confidence),
        rank_against_ms=rank_against_ms,
        warmup=warmup,
        input_sets=len(call.sets),
        l2_flush_bytes=clock.flush_bytes,
        sync_ratio=judgement.sync_ratio if judgement else None,
        sync_hidden_ms=judgement.hidden_ms if judgement else [],
        sync_threshold_ms=judgement.threshold_ms if judgement else None,
        sync_calibration=calibration if check_sync else None,
        sync_trials=sync_trials,
        loop_unaccounted_ms=loop_judgement.unaccounted_ms if loop_judgement else [],
        sync_median_ms=sync_median,
        sync_overhead_ms=overhead_median,
        flags=flags,
        device_name=clock.device_name,
        budget_s=budget_s,
        l2_state=l2_state,
        sampled_trials=sorted(sampler.chosen) if sampler is not None else [],
    )


class _TimedRun(NamedTuple):
    """The timed trials of one timing, over all their rounds."""

    samples: list[float]
    #: the rounds as one loop (``loop_wall.combine_rounds``)
    loop: LoopWall
    reason: StopReason
    rounds: int


def _deadline(clock: Any, budget_s: float) -> float:
    """When a timed loop stops past its minimum: a host-bound fn far slower than its warm-up."""
    return clock.now() + 2 * budget_s + 1.0


def _adaptive_trials(clock: Any, call: _Caller, cap: int, min_trials: int, budget_s: float, flush_ms: float,
                     sampler: TimedSampler | None, stopping: StoppingRule | None,
                     rank_against_ms: float | None) -> _TimedRun:
    """Rounds of timed trials (``stopping.next_round``) until the stopping rule settles the
    median, the ``cap`` is reached or the deadline passes; without a rule, one round of ``cap``
    trials. Each round is read after its own final synchronize, never between its trials."""
    deadline = _deadline(clock, budget_s)
    floor = stopping.min_samples if stopping is not None else cap
    samples: list[float] = []
    rounds: list[LoopWall] = []
    reason = StopReason.CAP
    while size := next_round(len(samples), cap, floor):
        got, loop, late = _timed_trials(clock, call, size, min_trials, deadline, flush_ms, sampler,
                                        first_trial=len(samples))
        samples += got
        rounds.append(loop)
        if late:
            reason = StopReason.BUDGET_EXCEEDED
            break
        if stopping is not None and (decision := decide(samples, stopping, rank_against_ms)).stop:
            reason = decision.reason or reason
            break
    return _TimedRun(samples=samples, loop=combine_rounds(rounds), reason=reason, rounds=len(rounds))


def _timed_trials(clock: Any, call: _Caller, trials: int, min_trials: int, deadline: float,
                  flush_ms: float, sampler: TimedSampler | None = None, first_trial: int = 0
                  ) -> tuple[list[float], LoopWall, bool]:
    """One timed loop (or round): an event pair per trial, nothing read until one final
    synchronize. Also the loop's host-clock stamps (``loop_wall.py`` judges them) and whether it
    stopped at the ``deadline`` (never before ``min_trials`` counting the ``first_trial`` trials
    of earlier rounds). Trials are numbered from ``first_trial`` for the ``sampler``.

    A trial the ``sampler`` chose gets fresh input values before its flush and its outputs
    cloned after its end event, each copy inside an event pair of its own: device time the
    loop's wall-time check counts as kgen's, not as work the candidate left behind."""
    events = [(clock.event(), clock.event()) for _ in range(trials)]
    bookkeeping: list[tuple[Any, Any]] = []
    done, late = 0, False
    began = clock.now()
    for trial, (start, end) in enumerate(events, start=first_trial):
        index = call.order.next()
        sampled = sampler is not None and sampler.wants(trial)
        if sampled:
            bookkeeping.append((clock.event(), clock.event()))
            clock.record(bookkeeping[-1][0])
            sampler.before(trial, index, call.sets[index])
            clock.record(bookkeeping[-1][1])
        clock.flush()
        clock.record(start)
        result = call.run(index)
        clock.record(end)
        if sampled:
            bookkeeping.append((clock.event(), clock.event()))
            clock.record(bookkeeping[-1][0])
            sampler.after(result)
            clock.record(bookkeeping[-1][1])
        del result
        done += 1
        if first_trial + done >= min_trials and clock.now() > deadline:
            late = True
            break
    issued = clock.now()
    clock.synchronize()
    ended = clock.now()
    samples = [clock.elapsed_ms(s, e) for s, e in events[:done]]
    loop = LoopWall(host_issue_ms=(issued - began) * 1000.0, wall_ms=(ended - began) * 1000.0,
                    flush_ms=flush_ms, event_samples_ms=samples,
                    bookkeeping_ms=sum(clock.elapsed_ms(s, e) for s, e in bookkeeping))
    return samples, loop, late


def _sync_series(clock: Any, call: Callable[[], Any], n: int) -> SyncSeries:
    """``n`` synced windows (record start, call, device-wide synchronize, record end), the same
    window around no call, interleaved, and the call's host time, all in ms."""
    synced, bare, host = [], [], []
    for _ in range(n):
        for with_call, out in ((True, synced), (False, bare)):
            start, end = clock.event(), clock.event()
            clock.flush()
            clock.record(start)
            if with_call:
                t0 = clock.now()
                call()
                host.append((clock.now() - t0) * 1000.0)
            clock.synchronize()
            clock.record(end)
            clock.synchronize()
            out.append(clock.elapsed_ms(start, end))
    return SyncSeries(synced_ms=synced, bare_ms=bare, host_ms=host)


def _calibration_loop(clock: Any, op: str, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]],
                      windows: int) -> SyncCalibration:
    """An honest op timed as a candidate is (events, then synced and bare windows): the noise
    that a deferred-work flag must beat in this process."""
    call = _Caller(fn, input_sets)
    for _ in range(2):  # warm-up: the first call may compile
        call()
    clock.synchronize()
    events = [(clock.event(), clock.event()) for _ in range(windows)]
    for start, end in events:
        clock.flush()
        clock.record(start)
        call()
        clock.record(end)
    clock.synchronize()
    event_median = statistics.median(clock.elapsed_ms(s, e) for s, e in events)
    return calibrate(op, event_median, _sync_series(clock, call, windows))


def calibrate_sync(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], op: str,
                   windows: int = 20) -> SyncCalibration:
    """Time an honest op (``fn``, e.g. the problem's eager reference on the candidate's inputs)
    the way the deferred-work check times a candidate, on the current CUDA device."""
    _require_cuda()
    _check_arguments(input_sets, 1.0, 1, windows, windows)
    return _calibration_loop(_CudaClock(torch.cuda.current_device()), op, fn, input_sets, windows)


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        raise TimingUnavailable(NO_GPU_MESSAGE)


def _device_index(device: int | str | torch.device | None) -> int:
    if device is None:
        return torch.cuda.current_device()
    device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if device.type != "cuda":
        raise ValueError(f"timings need a CUDA device, got {device}")
    return device.index if device.index is not None else torch.cuda.current_device()


def time_on_gpu(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], *, budget_s: float = 1.0,
                warmup: int = 3, min_trials: int = 10, max_trials: int = 500,
                check_sync: bool = True, calibration: SyncCalibration | None = None,
                sampler: TimedSampler | None = None, stopping: StoppingRule | None = DEFAULT_RULE,
                rank_against_ms: float | None = None) -> TimingResult:
    """Time ``fn(*input_sets[i])``, ``i`` drawn at random per call, on the current CUDA device
    (see the module doc).

    The timed trials stop once ``stopping`` (``stopping.StoppingRule``) says the median is
    settled: precise enough, or, given ``rank_against_ms`` (the current best candidate's
    median), clearly slower or faster than it; at the budget's cap otherwise. ``stopping=None``
    runs every planned trial. Baselines pass no ``rank_against_ms``: they are never ranked.

    ``calibration`` (from :func:`calibrate_sync`) is what the deferred-work check judges
    against; without it the check falls back to the call's own bare-synchronize spread.
    ``sampler`` (``timed_samples.TimedSampler``) keeps a few timed calls' outputs, on fresh
    input values, for the caller to check.

    Raises :class:`TimingUnavailable` without CUDA. Exceptions from ``fn`` propagate.
    """
    _require_cuda()
    _check_arguments(input_sets, budget_s, warmup, min_trials, max_trials)
    device = torch.cuda.current_device()
    clock = _CudaClock(device)
    return _timing_loop(clock, fn, input_sets, budget_s=budget_s, warmup=warmup,
                        min_trials=min_trials, max_trials=max_trials, check_sync=check_sync,
                        calibration=calibration, sampler=sampler, stopping=stopping,
                        rank_against_ms=rank_against_ms)


def measure_copy_bandwidth(device: int | str | torch.device | None = None, nbytes: int = 2**30) -> float:
    """Device-to-device copy bandwidth in TB/s, counting bytes read plus bytes written.

    Copies a random ``nbytes`` buffer into another (median of the timed trials).
    """
    _require_cuda()
    if nbytes <= 0:
        raise ValueError(f"nbytes must be positive, got {nbytes}")
    index = _device_index(device)
    with torch.cuda.device(index):
        src = torch.empty(nbytes, dtype=torch.uint8, device=index).random_()  # never zeros
        dst = torch.empty_like(src)
        result = time_on_gpu(dst.copy_, [(src,)], budget_s=0.5, warmup=3, min_trials=10,
                             max_trials=100, check_sync=False)
    return 2 * nbytes / (result.median_ms * 1e-3) / 1e12


def measure_matmul_tflops(device: int | str | torch.device | None = None, n: int = 8192,
                          dtype: torch.dtype = torch.bfloat16) -> float:
    """Dense ``n x n x n`` matrix-product rate in TFLOP/s (2 n^3 per product) through ``torch.mm``.

    Whatever library torch dispatches to (cuBLAS) at its current settings: for float32 the
    rate depends on ``torch.backends.cuda.matmul.allow_tf32``.
    """
    _require_cuda()
    index = _device_index(device)
    with torch.cuda.device(index):
        a = torch.randn(n, n, device=index).to(dtype)  # random data: zeros can run faster
        b = torch.randn(n, n, device=index).to(dtype)
        c = torch.empty(n, n, dtype=dtype, device=index)
        result = time_on_gpu(lambda: torch.mm(a, b, out=c), [()], budget_s=1.0, warmup=3,
                             min_trials=10, max_trials=100, check_sync=False)
    return 2 * n**3 / (result.median_ms * 1e-3) / 1e12
