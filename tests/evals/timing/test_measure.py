"""GPU timing: refuses without CUDA, sees patched timers, threads and deferred work.

The timing loop's logic (rotation, trial budget, the sync-ratio flag) runs here on a
fake clock whose "device" is the host; the real thing is in the tests marked ``gpu``.
"""

import math
import random
import threading
import time

import pytest
import torch

from kgen.evals.timing import measure as timing
from kgen.evals.timing.measure import (
    TimingUnavailable,
    l2_flush_bytes,
    measure_copy_bandwidth,
    measure_matmul_tflops,
    plan_trials,
    sync_windows,
    thread_snapshot,
    threads_flag,
    time_on_gpu,
    timer_integrity,
)
from kgen.evals.timing.stopping import MIN_SAMPLES, StoppingRule, StopReason

CUDA = torch.cuda.is_available()


# --------------------------------------------------------------------------------------
# No GPU: a clear refusal, never a number
# --------------------------------------------------------------------------------------


@pytest.mark.skipif(CUDA, reason="checks the refusal without CUDA")
@pytest.mark.parametrize("call", [
    lambda: time_on_gpu(lambda: None, [()]),
    lambda: measure_copy_bandwidth(),
    lambda: measure_matmul_tflops(),
], ids=["time_on_gpu", "measure_copy_bandwidth", "measure_matmul_tflops"])
def test_without_cuda_every_entry_point_refuses(call):
    with pytest.raises(TimingUnavailable, match="timings need a CUDA GPU"):
        call()
    assert issubclass(TimingUnavailable, RuntimeError)


# --------------------------------------------------------------------------------------
# Timer identity and threads
# --------------------------------------------------------------------------------------


def test_untouched_timers_pass():
    assert timer_integrity() == []


def test_a_patched_elapsed_time_is_flagged(monkeypatch):
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.001)
    flags = timer_integrity()
    assert len(flags) == 1 and flags[0].startswith("timer_patched: torch.cuda.Event.elapsed_time")


def test_a_patched_synchronize_and_a_replaced_event_class_are_flagged(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "Event", type("Event", (), {}))
    flags = timer_integrity()
    assert any("torch.cuda.synchronize is not the original" in f for f in flags)
    assert any("torch.cuda.Event is not the original" in f for f in flags)


def test_a_timer_replaced_before_import_is_flagged(monkeypatch):
    """Something patched perf_counter before kgen.evals.timing.measure captured it."""
    fake = lambda: 0.0  # noqa: E731
    monkeypatch.setitem(timing._ORIGINAL, "time.perf_counter", fake)
    monkeypatch.setattr(time, "perf_counter", fake)
    flags = timer_integrity()
    assert len(flags) == 1
    assert flags[0].startswith("timer_patched: time.perf_counter was replaced before kgen.evals.timing.measure")


def test_a_thread_started_in_between_is_flagged():
    before = thread_snapshot()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="sneaky-launcher")
    worker.start()
    try:
        flag = threads_flag(before, thread_snapshot(), "the timed trials")
    finally:
        stop.set()
        worker.join()
    assert flag == "threads_started: 1 new thread(s) during the timed trials (sneaky-launcher)"
    assert threads_flag(before, before, "warm-up") is None


# --------------------------------------------------------------------------------------
# Pure arithmetic
# --------------------------------------------------------------------------------------


def test_flush_buffer_is_twice_l2_or_256_mb():
    class Props:
        L2_cache_size = 50 * 2**20

    assert l2_flush_bytes(Props()) == 100 * 2**20
    assert l2_flush_bytes(object()) == 256 * 2**20
    Props.L2_cache_size = 0
    assert l2_flush_bytes(Props()) == 256 * 2**20


def test_trials_fit_the_budget_within_bounds():
    assert plan_trials(0.002, 1.0, 10, 500) == 500
    assert plan_trials(0.01, 1.0, 10, 500) == 100
    assert plan_trials(0.5, 1.0, 10, 500) == 10
    assert plan_trials(0.0, 1.0, 10, 500) == 500


# --------------------------------------------------------------------------------------
# The loop on a fake clock (events read the host clock; "synchronize" runs deferred work)
# --------------------------------------------------------------------------------------


class FakeEvent:
    t = None


class FakeClock:
    flush_bytes = 123
    device_name = "fake"

    def __init__(self):
        self.side_stream = []  # work a candidate left behind, run at synchronize
        self.flushes = 0

    def flush(self):
        self.flushes += 1

    def event(self):
        return FakeEvent()

    def record(self, event):
        event.t = time.perf_counter()

    def elapsed_ms(self, start, end):
        return (end.t - start.t) * 1e3

    def synchronize(self):
        while self.side_stream:
            self.side_stream.pop()()

    def now(self):
        return time.perf_counter()

    def stream_flag(self):
        return None

    def reset_l2(self):
        return "fake L2 reset"


def _loop(fn, sets, clock=None, **kw):
    options = dict(budget_s=0.05, warmup=2, min_trials=5, max_trials=50, check_sync=True)
    options.update(kw)
    return timing._timing_loop(clock or FakeClock(), fn, sets, **options)


def test_inputs_come_in_an_unpredictable_order_and_every_trial_is_flushed():
    used = []
    clock = FakeClock()
    result = _loop(lambda tag: used.append(tag), [("a",), ("b",), ("c",)], clock=clock, max_trials=20)
    assert all(x != y for x, y in zip(used[:-1], used[1:], strict=True))  # no call reuses the last call's set
    assert set(used) == {"a", "b", "c"}
    # not the round-robin cycle a candidate could follow by its call count (odds 2^-30 by chance)
    assert any(used[i] != used[i + 3] for i in range(len(used) - 3))
    assert result.trials == 20 and result.warmup == 2 and result.input_sets == 3
    assert result.l2_state == "fake L2 reset" and result.sampled_trials == []
    # one flush per warm-up, trial and sync-window (with and without the call), plus the probe
    assert clock.flushes == 1 + 2 + 20 + 2 * result.sync_trials
    assert len(used) == 2 + 20 + result.sync_trials


def test_trials_adapt_to_the_time_per_call():
    slow = _loop(lambda: time.sleep(0.02), [()], budget_s=0.05, min_trials=3)
    assert slow.trials == 3
    medium = _loop(lambda: time.sleep(0.001), [()], budget_s=0.1, min_trials=5, max_trials=500)
    assert 15 <= medium.trials <= 100
    assert 1.0 <= medium.median_ms < 10.0  # time.sleep(0.001) sleeps at least 1 ms


def test_work_left_for_later_is_flagged_as_deferred():
    clock = FakeClock()

    def side_stream_candidate():
        clock.side_stream.append(lambda: time.sleep(0.003))

    result = _loop(side_stream_candidate, [()], clock=clock)
    assert result.has_flag("deferred_work"), result.flags
    assert result.sync_ratio > 10

    honest = _loop(lambda: time.sleep(0.003), [()])
    assert not honest.has_flag("deferred_work"), honest.flags
    assert honest.sync_ratio == pytest.approx(1.0, abs=0.3)


def test_the_flag_needs_a_second_series_and_is_judged_against_the_honest_op():
    clock = FakeClock()
    calibration = timing._calibration_loop(clock, "honest sleep", lambda: time.sleep(0.001), [()], 10)
    assert calibration.op == "honest sleep" and calibration.windows == 10
    assert calibration.event_median_ms >= 1.0 and calibration.hidden_median_ms < 0.5

    calls = []
    clock = FakeClock()

    def defers_only_while_disturbed():
        # hidden work in the first synced series only (after 2 warm-up calls and 5 trials),
        # as a neighbour's burst would look
        calls.append(1)
        if 2 + 5 < len(calls) <= 2 + 5 + 5:
            clock.side_stream.append(lambda: time.sleep(0.003))

    passing = _loop(defers_only_while_disturbed, [()], clock=clock, max_trials=5, min_trials=5,
                    calibration=calibration)
    assert not passing.has_flag("deferred_work"), passing.flags
    assert len(passing.sync_hidden_ms) == 2 and passing.sync_hidden_ms[0] > passing.sync_threshold_ms
    assert passing.sync_calibration == calibration

    cheat_clock = FakeClock()
    cheat = _loop(lambda: cheat_clock.side_stream.append(lambda: time.sleep(0.003)), [()], clock=cheat_clock,
                  calibration=calibration)
    assert cheat.has_flag("deferred_work") and len(cheat.sync_hidden_ms) == 2
    assert any("honest sleep" in f for f in cheat.flags if f.startswith("deferred_work"))


def _defers_between_synchronizes(clock, delay_s):
    """A cheat that tells the timed loop (calls back to back) from the synced windows (a
    synchronize before each call) by watching the clock's synchronizes: it leaves ``delay_s`` of
    work behind only when no synchronize came since its last call. Counting rather than timing
    the gap keeps it exact on a loaded host."""
    plain_synchronize = clock.synchronize
    seen = {"synchronizes": 0, "at_last_call": -1}

    def synchronize():
        seen["synchronizes"] += 1
        plain_synchronize()

    clock.synchronize = synchronize

    def adaptive():
        if seen["synchronizes"] == seen["at_last_call"]:
            clock.side_stream.append(lambda: time.sleep(delay_s))
        else:
            time.sleep(delay_s)
        seen["at_last_call"] = seen["synchronizes"]

    return adaptive


def test_work_left_behind_only_in_the_timed_loop_is_flagged_by_its_wall_time():
    """A candidate that tells the timed loop (calls back to back, the host running ahead) from
    the synced windows (calls separated by synchronizes) defers only in the loop: every synced
    window is honest, and the loop's wall time gives it away."""
    clock = FakeClock()
    adaptive = _defers_between_synchronizes(clock, delay_s=0.003)
    cheat = _loop(adaptive, [()], clock=clock)
    assert cheat.median_ms < 0.5 and cheat.sync_hidden_ms and max(cheat.sync_hidden_ms) < cheat.sync_threshold_ms
    loop_flag = next(f for f in cheat.flags if f.startswith("deferred_work"))
    assert "timed loop" in loop_flag and len(cheat.loop_unaccounted_ms) == 2
    assert min(cheat.loop_unaccounted_ms) > 1.0  # of 3 ms deferred (a busy host misjudges a few calls)

    honest = _loop(lambda: time.sleep(0.003), [()], clock=clock)
    assert not honest.has_flag("deferred_work") and len(honest.loop_unaccounted_ms) == 1, honest.flags


class ScriptedClock(FakeClock):
    """Trials read the times ``draw`` gives (ms), whatever the call did: the stopping rule's
    inputs under the test's control (no synced windows, no sampler: only trials read events)."""

    def __init__(self, draw):
        super().__init__()
        self.draw = draw
        self.synchronizes = 0

    def elapsed_ms(self, start, end):
        return self.draw()

    def synchronize(self):
        self.synchronizes += 1
        super().synchronize()


#: synchronizes before the timed trials with two warm-up calls (``_loop``'s default)
BEFORE_TRIALS = 1 + 1 + 2 * 2


def _scripted(median, spread, seed=0, **kw):
    rng = random.Random(seed)
    clock = ScriptedClock(lambda: median * math.exp(rng.gauss(0.0, spread)))
    options = dict(budget_s=5.0, max_trials=400, check_sync=False)
    options.update(kw)
    return _loop(lambda: None, [()], clock=clock, **options), clock


def test_a_tight_timing_stops_at_the_floor_and_says_why():
    result, clock = _scripted(1.0, 0.002)
    assert result.trials == MIN_SAMPLES and result.planned_trials == 400 and result.rounds == 1
    assert result.stop_reason is StopReason.PRECISION and not result.has_flag("budget_exceeded")
    low, high = result.median_interval_ms
    assert low <= result.median_ms <= high
    # one synchronize per round: the events are read once per round, never between its trials
    # before the trials: one to start, one around the flush probe, two per warm-up call
    assert clock.synchronizes == BEFORE_TRIALS + 1


def test_a_noisy_timing_runs_every_planned_trial_in_rounds():
    result, clock = _scripted(1.0, 0.3)
    assert result.trials == result.planned_trials == 400 and result.stop_reason is StopReason.CAP
    assert 2 < result.rounds <= 10 and clock.synchronizes == BEFORE_TRIALS + result.rounds


def test_a_candidate_clearly_slower_than_the_best_stops_early():
    ranked, _ = _scripted(2.0, 0.04, seed=3, rank_against_ms=1.0)
    assert ranked.trials == MIN_SAMPLES and ranked.stop_reason is StopReason.RANKED_SLOWER
    assert ranked.rank_against_ms == 1.0
    alone, _ = _scripted(2.0, 0.04, seed=3)  # a baseline: precision alone
    assert alone.trials > 3 * MIN_SAMPLES and alone.rank_against_ms is None


def test_without_a_stopping_rule_every_planned_trial_runs_in_one_round():
    result, clock = _scripted(1.0, 0.002, stopping=None)
    assert result.trials == 400 and result.rounds == 1 and result.stop_reason is StopReason.CAP


def test_an_early_stop_keeps_the_deferred_work_windows_of_the_planned_trials():
    """The synced windows are sized by the budget's trials (400 here: 50 windows), not by the 20
    an early stop ran; the loop's wall time is judged over every round."""
    clock = FakeClock()
    result = _loop(lambda: None, [()], clock=clock, budget_s=5.0, max_trials=400,
                   stopping=StoppingRule(rel_precision=1e9))
    assert result.trials == MIN_SAMPLES and result.planned_trials == 400
    assert result.sync_trials == sync_windows(400) == 50 and len(result.loop_unaccounted_ms) == 1


def test_work_left_behind_in_the_timed_loop_is_seen_across_rounds():
    """A timing split into rounds (each read after its own synchronize) still sees work left
    behind in the loop: each round's synchronize waits for it."""
    clock = FakeClock()
    adaptive = _defers_between_synchronizes(clock, delay_s=0.002)

    never_precise = StoppingRule(min_samples=5, rel_precision=0.0)
    cheat = _loop(adaptive, [()], clock=clock, budget_s=0.5, max_trials=20, stopping=never_precise)
    assert cheat.rounds > 1 and cheat.trials == 20, cheat
    assert any("timed loop" in f for f in cheat.flags if f.startswith("deferred_work")), cheat.flags
    honest = _loop(lambda: time.sleep(0.002), [()], clock=clock, budget_s=0.5, max_trials=20,
                   stopping=never_precise)
    assert honest.rounds > 1 and not honest.has_flag("deferred_work"), honest.flags


def test_a_timer_patched_during_the_calls_is_flagged_and_not_used(monkeypatch):
    def patching_candidate():
        monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.0)
        time.sleep(0.001)

    result = _loop(patching_candidate, [()], check_sync=False)
    assert result.has_flag("timer_patched")
    assert result.median_ms > 0.5  # timed through the captured originals


def test_a_thread_started_by_the_candidate_is_flagged():
    stop = threading.Event()
    started = []

    def threading_candidate():
        if not started:
            started.append(threading.Thread(target=stop.wait, name="kgen-test-bg"))
            started[0].start()

    try:
        result = _loop(threading_candidate, [()])
    finally:
        stop.set()
        for t in started:
            t.join()
    assert any(f.startswith("threads_started: 1 new thread(s) during warm-up (kgen-test-bg)")
               for f in result.flags), result.flags


def test_shared_buffers_between_consecutive_sets_are_flagged():
    x = torch.ones(4)
    result = _loop(lambda a: None, [(x,), (x,)], check_sync=False)
    assert result.has_flag("inputs_reused")
    fresh = _loop(lambda a: None, [(torch.ones(4),), (torch.ones(4),)], check_sync=False)
    assert not fresh.has_flag("inputs_reused")


def test_bad_arguments_are_refused_before_anything_runs():
    with pytest.raises(ValueError):
        timing._check_arguments([], 1.0, 3, 10, 500)
    with pytest.raises(ValueError):
        timing._check_arguments([()], 1.0, 0, 10, 500)
    with pytest.raises(ValueError):
        timing._check_arguments([()], 1.0, 3, 10, 5)


# --------------------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------------------


def _copy_sets(nbytes=256 * 2**20, sets=2):
    return [(torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(),
             torch.empty(nbytes, dtype=torch.uint8, device="cuda")) for _ in range(sets)]


def _copy(src, dst):
    dst.copy_(src)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_timing_a_copy_twice_agrees_within_3_percent():
    sets = _copy_sets()
    first = time_on_gpu(_copy, sets)
    second = time_on_gpu(_copy, sets)
    assert abs(first.median_ms - second.median_ms) / min(first.median_ms, second.median_ms) < 0.03
    for r in (first, second):
        assert r.trials >= 10 and r.l2_flush_bytes > 0 and r.input_sets == 2
        assert not r.has_flag("deferred_work") and not r.has_flag("timer_patched"), r.flags
        assert r.sync_ratio is not None and r.sync_ratio < 1.5
        assert r.min_ms <= r.p10_ms <= r.median_ms <= r.p90_ms


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_a_side_stream_candidate_is_flagged_as_deferred_work():
    side = torch.cuda.Stream()

    def side_stream_candidate(src, dst):
        with torch.cuda.stream(side):
            for _ in range(4):
                dst.copy_(src)
        # returns without making the current stream wait

    def honest_candidate(src, dst):
        with torch.cuda.stream(side):
            for _ in range(4):
                dst.copy_(src)
        torch.cuda.current_stream().wait_stream(side)

    sets = _copy_sets()
    calibration = timing.calibrate_sync(_copy, sets, "device copy")
    cheat = time_on_gpu(side_stream_candidate, sets, budget_s=0.5, calibration=calibration)
    assert cheat.has_flag("deferred_work"), cheat.flags
    honest = time_on_gpu(honest_candidate, sets, budget_s=0.5, calibration=calibration)
    assert not honest.has_flag("deferred_work"), honest.flags
    assert honest.median_ms > 3 * cheat.median_ms


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_deferring_only_in_the_timed_loop_is_flagged():
    """A candidate deferring to a side stream only while calls come back to back: every
    synced window sees honest work; the timed loop's wall time does not."""
    side = torch.cuda.Stream()
    last = {"t": 0.0}

    def adaptive(src, dst):
        if time.perf_counter() - last["t"] < 40e-6:  # the timed loop: the host runs ahead
            with torch.cuda.stream(side):
                for _ in range(4):
                    dst.copy_(src)
        else:  # after a synchronize: a synced window, do it in place
            for _ in range(4):
                dst.copy_(src)
        last["t"] = time.perf_counter()

    sets = _copy_sets()
    calibration = timing.calibrate_sync(_copy, sets, "device copy")
    cheat = time_on_gpu(adaptive, sets, budget_s=0.5, calibration=calibration)
    assert cheat.has_flag("deferred_work"), (cheat.flags, cheat.loop_unaccounted_ms, cheat.sync_hidden_ms)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_a_worker_thread_finishing_the_work_after_return_is_flagged():
    """A worker thread started before timing (so no new thread is seen) launches the copies
    on a side stream after the call has returned."""
    side = torch.cuda.Stream()
    sets = _copy_sets()
    calibration = timing.calibrate_sync(_copy, sets, "device copy")
    jobs, stop = [], threading.Event()

    def worker():
        with torch.cuda.stream(side):
            while not stop.is_set():
                if jobs:
                    src, dst = jobs.pop()
                    for _ in range(4):
                        dst.copy_(src)
                else:
                    time.sleep(1e-5)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        finished_later = time_on_gpu(lambda src, dst: jobs.append((src, dst)), sets, budget_s=0.5,
                                     calibration=calibration)
    finally:
        stop.set()
        thread.join()
    assert finished_later.has_flag("deferred_work"), (finished_later.flags, finished_later.loop_unaccounted_ms)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_tiny_honest_kernels_are_not_deferred_work():
    """Microsecond kernels with Python overhead (sync ratios up to ~2 on an H100) pass."""
    small = [(torch.randn(4096, device="cuda"),) for _ in range(3)]
    calibration = timing.calibrate_sync(lambda x: x * 2.0, small, "scale")

    def several_launches(x):
        return torch.nn.functional.silu(x * 2.0 + 1.0).sum()

    for fn in (lambda x: x * 2.0, several_launches, lambda x: x.float().add_(1)):
        for _ in range(3):
            result = time_on_gpu(fn, small, budget_s=0.3, calibration=calibration)
            assert not result.has_flag("deferred_work"), (result.flags, result.sync_hidden_ms)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_copy_bandwidth_and_matmul_rate_are_plausible():
    assert 0.5 < measure_copy_bandwidth() < 10.0
    assert 10.0 < measure_matmul_tflops(n=4096) < 5000.0
