"""GPU timing: refuses without CUDA, sees patched timers, threads and deferred work.

The timing loop's logic (rotation, trial budget, the sync-ratio flag) runs here on a
fake clock whose "device" is the host; the real thing is in the tests marked ``gpu``.
"""

import threading
import time

import pytest
import torch

from kgen.evals import timing
from kgen.evals.timing import (
    TimingUnavailable,
    deferred_work,
    l2_flush_bytes,
    measure_copy_bandwidth,
    measure_matmul_tflops,
    plan_trials,
    thread_snapshot,
    threads_flag,
    time_on_gpu,
    timer_integrity,
)

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
    """Something patched perf_counter before kgen.evals.timing captured it."""
    fake = lambda: 0.0  # noqa: E731
    monkeypatch.setitem(timing._ORIGINAL, "time.perf_counter", fake)
    monkeypatch.setattr(time, "perf_counter", fake)
    flags = timer_integrity()
    assert len(flags) == 1
    assert flags[0].startswith("timer_patched: time.perf_counter was replaced before kgen.evals.timing")


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


def test_sync_ratio_flags_hidden_work_but_not_the_synchronizes_own_cost():
    ratio, flag = deferred_work(event_ms=0.1, sync_ms=0.33, overhead_ms=0.01)
    assert ratio == pytest.approx(3.2)
    assert flag.startswith("deferred_work: time with a device-wide sync is 3.2x the event time")
    # a 4 us kernel whose synced window is dominated by a 20 us synchronize
    ratio, flag = deferred_work(event_ms=0.004, sync_ms=0.025, overhead_ms=0.02)
    assert flag is None and ratio == pytest.approx(1.25)
    # 1.4x is within CUDA-L2's 1.5 threshold
    assert deferred_work(event_ms=1.0, sync_ms=1.41, overhead_ms=0.01)[1] is None


@pytest.mark.parametrize(
    ("event_ms", "sync_ms", "host_call_ms"),
    [(0.17, 0.265, 0.12),   # RMSNorm backward mutation, measured ratio ~1.5 with ~100 us of launch overhead
     (0.01, 0.031, 0.03),   # a 10 us kernel at ratio 2.1: Python and launch overhead, not hidden work
     (0.03, 0.10, 0.08)],   # three small launches: the GPU idled while the host issued them (3.3x)
    ids=["rmsnorm_bwd_1.5x", "tiny_kernel_2.1x", "three_small_launches_3.3x"],
)
def test_launch_overhead_of_an_honest_kernel_is_not_deferred_work(event_ms, sync_ms, host_call_ms):
    ratio, flag = deferred_work(event_ms, sync_ms, 0.0, host_call_ms)
    assert ratio > 1.5 and flag is None


@pytest.mark.parametrize(
    ("event_ms", "sync_ms", "host_call_ms"),
    [(0.01, 1.0, 0.02),     # four copies on a side stream, returned at once
     (0.2, 1.5, 0.05),      # half the work finished by a background thread
     (0.01, 0.6, 3.0)],     # a host that waits on other work: only 0.1 ms of its time is excused
    ids=["side_stream", "thread_finishes", "slow_host_hides_gpu_work"],
)
def test_hidden_gpu_work_is_still_deferred_work(event_ms, sync_ms, host_call_ms):
    _, flag = deferred_work(event_ms, sync_ms, 0.0, host_call_ms)
    assert flag is not None and flag.startswith("deferred_work")


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


def _loop(fn, sets, clock=None, **kw):
    options = dict(budget_s=0.05, warmup=2, min_trials=5, max_trials=50, check_sync=True)
    options.update(kw)
    return timing._timing_loop(clock or FakeClock(), fn, sets, **options)


def test_inputs_rotate_round_robin_and_every_trial_is_flushed():
    used = []
    clock = FakeClock()
    result = _loop(lambda tag: used.append(tag), [("a",), ("b",), ("c",)], clock=clock, max_trials=20)
    assert used[:6] == ["a", "b", "c", "a", "b", "c"]
    assert all(x != y for x, y in zip(used[:-1], used[1:], strict=True))  # no call reuses the last call's set
    assert result.trials == 20 and result.warmup == 2 and result.input_sets == 3
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
    cheat = time_on_gpu(side_stream_candidate, sets, budget_s=0.5)
    assert cheat.has_flag("deferred_work"), cheat.flags
    honest = time_on_gpu(honest_candidate, sets, budget_s=0.5)
    assert not honest.has_flag("deferred_work"), honest.flags
    assert honest.median_ms > 3 * cheat.median_ms


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_copy_bandwidth_and_matmul_rate_are_plausible():
    assert 0.5 < measure_copy_bandwidth() < 10.0
    assert 10.0 < measure_matmul_tflops(n=4096) < 5000.0
