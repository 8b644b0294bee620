"""The deferred-work decision on synthetic samples shaped like H100 measurements.

Honest kernels measured sync ratios of 1.0-2.1 (Python and launch overhead while the GPU idles
in a synced window); they must never be flagged. Work left on a side stream or finished by a
thread is GPU time past the timed stream's end and must be flagged, but only when it persists
on a second series.
"""

import random

import pytest

from kgen.evals.timing.deferred_work import (
    DEFERRED_SERIES,
    SyncSeries,
    calibrate,
    hidden_samples,
    judge,
    needs_remeasure,
    sync_ratio,
    threshold_ms,
)


def series(rng, *, gpu_ms, host_ms, bare_ms=0.008, hidden_ms=0.0, overlap=0.6, jitter=0.002, n=20):
    """Synced windows of a call: its host time partly overlaps the L2 flush (``overlap``), the
    GPU work follows, then any hidden work; bare windows are the synchronize alone."""
    synced, bare, host = [], [], []
    for _ in range(n):
        h = host_ms * rng.uniform(0.9, 1.1)
        b = bare_ms + rng.uniform(0, jitter)
        synced.append(b + (1 - overlap) * h + gpu_ms + hidden_ms + rng.uniform(0, jitter))
        bare.append(bare_ms + rng.uniform(0, jitter))
        host.append(h)
    return SyncSeries(synced_ms=synced, bare_ms=bare, host_ms=host)


@pytest.fixture
def rng():
    return random.Random(7)


@pytest.fixture
def honest_eager(rng):
    """The eager reference of a small problem: a few launches, ~40 us of host time."""
    return calibrate("eager reference", 0.03, series(rng, gpu_ms=0.03, host_ms=0.04))


@pytest.mark.parametrize(
    ("gpu_ms", "host_ms", "overlap"),
    [(0.010, 0.030, 0.6),   # a ~10 us Triton kernel: ratio about 2.1 from launch overhead alone
     (0.010, 0.050, 0.8),   # the same with a slower Python wrapper
     (0.170, 0.120, 0.2),   # RMSNorm backward mutation that read 1.5x on an H100
     (0.030, 0.080, 0.1),   # three small launches, the GPU idle between them
     (2.000, 0.030, 0.5)],  # a long kernel: ratio ~1.0
    ids=["tiny_2.1x", "tiny_slow_wrapper", "rmsnorm_bwd_1.5x", "three_launches", "long_kernel"],
)
def test_honest_kernels_are_never_flagged(rng, honest_eager, gpu_ms, host_ms, overlap):
    measured = [series(rng, gpu_ms=gpu_ms, host_ms=host_ms, overlap=overlap) for _ in range(DEFERRED_SERIES)]
    verdict = judge(gpu_ms, measured, honest_eager)
    assert not verdict.flagged and verdict.flag is None
    if gpu_ms <= 0.01:
        assert verdict.sync_ratio > 1.5  # what the fixed 1.5x threshold used to reject
    assert not needs_remeasure(gpu_ms, measured[:1], honest_eager)


def test_an_honest_kernel_is_not_flagged_without_a_calibration_either(rng):
    measured = [series(rng, gpu_ms=0.01, host_ms=0.03) for _ in range(2)]
    assert not judge(0.01, measured, None).flagged


@pytest.mark.parametrize(
    ("event_ms", "host_ms", "hidden_ms"),
    [(0.004, 0.015, 1.0),   # four copies on a side stream, returned at once (event sees nothing)
     (0.200, 0.050, 0.2),   # half the work finished by a background thread before the sync
     (1.000, 0.030, 0.3),   # a long kernel deferring a quarter of its work
     (0.010, 0.020, 0.05)], # a small kernel hiding 5x its reported time
    ids=["side_stream", "thread_finishes_half", "quarter_deferred", "small_hidden_5x"],
)
def test_persistent_hidden_work_is_flagged(rng, honest_eager, event_ms, host_ms, hidden_ms):
    first = series(rng, gpu_ms=event_ms, host_ms=host_ms, hidden_ms=hidden_ms)
    assert needs_remeasure(event_ms, [first], honest_eager)
    second = series(rng, gpu_ms=event_ms, host_ms=host_ms, hidden_ms=hidden_ms)
    verdict = judge(event_ms, [first, second], honest_eager)
    assert verdict.flagged and verdict.flag.startswith("deferred_work: ")
    assert "eager reference" in verdict.flag and "2 of 2 series" in verdict.flag
    assert all(h > verdict.threshold_ms for h in verdict.hidden_ms)


def test_hidden_work_that_vanishes_on_re_measure_is_not_flagged(rng, honest_eager):
    disturbed = series(rng, gpu_ms=0.05, host_ms=0.03, hidden_ms=0.5)  # another process's burst
    clean = series(rng, gpu_ms=0.05, host_ms=0.03)
    assert needs_remeasure(0.05, [disturbed], honest_eager)
    assert not needs_remeasure(0.05, [disturbed, clean], honest_eager)
    assert not judge(0.05, [disturbed, clean], honest_eager).flagged


def test_one_flagging_series_alone_never_flags(rng, honest_eager):
    only = series(rng, gpu_ms=0.004, host_ms=0.015, hidden_ms=1.0)
    assert not judge(0.004, [only], honest_eager).flagged


def test_a_noisy_calibration_raises_the_bar(rng):
    quiet = calibrate("eager reference", 0.03, series(rng, gpu_ms=0.03, host_ms=0.04, jitter=0.002))
    noisy = calibrate("eager reference", 0.03, series(rng, gpu_ms=0.03, host_ms=0.04, jitter=0.05))
    probe = series(rng, gpu_ms=0.05, host_ms=0.03)
    assert threshold_ms(0.05, noisy, probe) > threshold_ms(0.05, quiet, probe) + 0.05
    # 60 us hidden beats the quiet spread, not the noisy one
    hidden = [series(rng, gpu_ms=0.05, host_ms=0.03, hidden_ms=0.06) for _ in range(2)]
    assert judge(0.05, hidden, quiet).flagged and not judge(0.05, hidden, noisy).flagged


def test_a_small_share_of_a_long_call_is_not_flagged(rng, honest_eager):
    # 0.1 ms past a 1 ms kernel: beyond the noise, but a tenth of its time
    measured = [series(rng, gpu_ms=1.0, host_ms=0.03, hidden_ms=0.1) for _ in range(2)]
    assert not judge(1.0, measured, honest_eager).flagged


def test_the_arithmetic_of_hidden_time_and_ratio():
    s = SyncSeries(synced_ms=[0.33], bare_ms=[0.01], host_ms=[0.02])
    assert hidden_samples(0.1, s) == [pytest.approx(0.2)]
    assert sync_ratio(0.1, s) == pytest.approx(3.2)
    with pytest.raises(ValueError):
        judge(0.1, [], None)
