"""The timed loop's wall-time check on loops simulated the way a GPU queue runs them.

A host issues, per trial, a flush, a start event, the call (Python, then its launches) and an
end event into a queue the device drains in order. Honest loops (device-bound, host-bound,
alternating, microsecond kernels whose synced ratio reads 2.1x) must never flag; work the
events did not see (left on a side stream, finished by a thread) must, on two loops.
"""

import random

import pytest

from kgen.evals.timing.loop_wall import (
    LOOP_SERIES,
    LoopWall,
    combine_rounds,
    judge_loops,
    loop_flags,
    needs_another_loop,
    threshold_ms,
    unaccounted_ms,
)


def simulate(rng, *, host_ms, gpu_ms, launch_at=0.8, flush_ms=0.06, deferred_ms=0.0, n=100, host_jitter=0.2,
             stall_every=0, stall_ms=0.0):
    """One timed loop: ``launch_at`` is how far into the call's host time its kernel is
    launched; ``deferred_ms`` of device time per call runs after the kernel, unseen by the end
    event; every ``stall_every`` trials the host is descheduled for ``stall_ms``."""
    host_t = dev_t = 0.0
    samples = []
    for i in range(n):
        h = host_ms * rng.uniform(1 - host_jitter, 1 + host_jitter)
        if stall_every and i % stall_every == stall_every - 1:
            h += stall_ms
        f = flush_ms * rng.uniform(0.85, 1.0)  # the host-timed flush is an upper bound
        host_t += 0.003                         # enqueueing the flush and the start event
        dev_t = max(dev_t, host_t) + f
        start = max(dev_t, host_t)
        kernel_end = max(dev_t, host_t + launch_at * h) + gpu_ms * rng.uniform(0.97, 1.03)
        host_t += h
        end = max(kernel_end, host_t)
        samples.append(end - start)
        dev_t = max(end, kernel_end + deferred_ms)
    issued = host_t
    wall = max(dev_t, host_t) + rng.uniform(0.005, 0.03)  # the final synchronize
    return LoopWall(host_issue_ms=issued, wall_ms=wall, flush_ms=flush_ms, event_samples_ms=samples)


HONEST = [
    dict(host_ms=0.02, gpu_ms=0.01),                     # a 10 us kernel, 20 us of Python: synced 2.1x
    dict(host_ms=0.05, gpu_ms=0.01, launch_at=0.9),      # the same behind a slower wrapper
    dict(host_ms=0.03, gpu_ms=2.0),                      # a long kernel, device-bound
    dict(host_ms=0.12, gpu_ms=0.17),                     # RMSNorm backward mutation (synced 1.5x)
    dict(host_ms=0.09, gpu_ms=0.06, host_jitter=0.6),    # alternating host- and device-bound
    dict(host_ms=0.3, gpu_ms=0.01, launch_at=0.1),       # host-bound: the queue is always empty
    dict(host_ms=0.02, gpu_ms=0.01, stall_every=10, stall_ms=0.5),  # the host descheduled now and then
]


@pytest.mark.parametrize("case", HONEST, ids=["tiny_2.1x", "slow_wrapper", "long_kernel", "rmsnorm_bwd",
                                              "alternating", "host_bound", "host_stalls"])
def test_honest_loops_never_flag(case):
    rng = random.Random(11)
    for _ in range(30):
        loops = [simulate(rng, **case) for _ in range(LOOP_SERIES)]
        assert not any(loop_flags(w) for w in loops), [unaccounted_ms(w) for w in loops]
        assert not judge_loops(loops).flagged
        assert not needs_another_loop(loops[:1])


@pytest.mark.parametrize(
    ("case", "deferred_ms"),
    [(dict(host_ms=0.015, gpu_ms=0.002), 1.0),   # everything on a side stream: events see ~nothing
     (dict(host_ms=0.02, gpu_ms=0.5), 0.5),      # a thread finishes half the work after return
     (dict(host_ms=0.02, gpu_ms=1.0), 0.4),      # a long kernel deferring 30% of its work
     (dict(host_ms=0.02, gpu_ms=0.01), 0.05)],   # a small kernel hiding 5x its reported time
    ids=["side_stream", "thread_half", "long_kernel_30pct", "small_hidden_5x"],
)
def test_work_the_events_did_not_see_is_flagged(case, deferred_ms):
    rng = random.Random(5)
    first = simulate(rng, **case, deferred_ms=deferred_ms)
    assert needs_another_loop([first])
    verdict = judge_loops([first, simulate(rng, **case, deferred_ms=deferred_ms)])
    assert verdict.flagged and verdict.flag.startswith("deferred_work: ") and "2 of 2 loops" in verdict.flag
    assert all(u > verdict.threshold_ms for u in verdict.unaccounted_ms)


def test_a_loop_disturbed_once_is_not_flagged():
    rng = random.Random(6)
    disturbed = simulate(rng, host_ms=0.02, gpu_ms=0.05, deferred_ms=0.4)  # a neighbour's burst
    clean = simulate(rng, host_ms=0.02, gpu_ms=0.05)
    assert needs_another_loop([disturbed]) and not needs_another_loop([disturbed, clean])
    assert not judge_loops([disturbed, clean]).flagged
    assert not judge_loops([disturbed]).flagged  # one loop alone never flags


def test_a_small_share_hidden_under_a_long_kernel_is_not_flagged():
    rng = random.Random(8)
    loops = [simulate(rng, host_ms=0.02, gpu_ms=2.0, deferred_ms=0.1) for _ in range(2)]
    assert not judge_loops(loops).flagged


def test_the_arithmetic():
    loop = LoopWall(host_issue_ms=1.0, wall_ms=12.0, flush_ms=0.05, event_samples_ms=[0.05] * 10)
    assert unaccounted_ms(loop) == pytest.approx((12.0 - 1.0) / 10)  # the host issued longer than the device worked
    assert threshold_ms(loop) == pytest.approx(0.025)
    host_bound = LoopWall(host_issue_ms=30.0, wall_ms=30.02, flush_ms=0.05, event_samples_ms=[0.05] * 10)
    assert unaccounted_ms(host_bound) == pytest.approx(0.002) and not loop_flags(host_bound)
    empty = LoopWall(host_issue_ms=0.0, wall_ms=0.0, flush_ms=0.05, event_samples_ms=[])
    assert unaccounted_ms(empty) == 0.0 and not loop_flags(empty)
    with pytest.raises(ValueError):
        judge_loops([])


def test_kgens_own_copies_between_trials_are_accounted_for():
    """The sampled trials' input refresh and output clone (``timed_samples.py``) are device time
    of kgen's own: timed by their own events, they never read as work left behind."""
    loop = LoopWall(host_issue_ms=1.0, wall_ms=8.0, flush_ms=0.05, event_samples_ms=[0.05] * 10)
    assert loop_flags(loop)  # 7 ms nobody accounted for
    with_copies = loop.model_copy(update={"bookkeeping_ms": 7.0})
    assert unaccounted_ms(with_copies) == pytest.approx(0.0) and not loop_flags(with_copies)


#: the round sizes of a 200-trial timing that never settles (``stopping.next_round``)
ROUNDS = [20, 10, 15, 23, 34, 51, 47]


def _rounds(rng, **case):
    """One timing's loop as rounds, each starting on an idle device (the round before ended
    with a synchronize), combined the way the timing loop combines them."""
    return combine_rounds([simulate(rng, **case, n=n) for n in ROUNDS])


@pytest.mark.parametrize("case", HONEST, ids=["tiny_2.1x", "slow_wrapper", "long_kernel", "rmsnorm_bwd",
                                              "alternating", "host_bound", "host_stalls"])
def test_honest_loops_in_rounds_never_flag(case):
    """Each round's start and end lag (the device idle while the host issues its first trial,
    the final synchronize) is spread over the round's trials: no honest loop flags for it."""
    rng = random.Random(12)
    for _ in range(20):
        loops = [_rounds(rng, **case) for _ in range(LOOP_SERIES)]
        assert not any(loop_flags(w) for w in loops), [unaccounted_ms(w) for w in loops]


@pytest.mark.parametrize(
    ("case", "deferred_ms"),
    [(dict(host_ms=0.015, gpu_ms=0.002), 1.0), (dict(host_ms=0.02, gpu_ms=0.5), 0.5),
     (dict(host_ms=0.02, gpu_ms=1.0), 0.4), (dict(host_ms=0.02, gpu_ms=0.01), 0.05)],
    ids=["side_stream", "thread_half", "long_kernel_30pct", "small_hidden_5x"],
)
def test_work_left_behind_in_rounds_is_flagged(case, deferred_ms):
    """Each round's synchronize waits for what its calls left behind: the rounds' summed wall
    time holds all of it."""
    rng = random.Random(5)
    loops = [_rounds(rng, **case, deferred_ms=deferred_ms) for _ in range(LOOP_SERIES)]
    assert judge_loops(loops).flagged, [unaccounted_ms(w) for w in loops]


def test_rounds_combine_by_summing_their_times_and_keeping_their_samples_in_order():
    a = LoopWall(host_issue_ms=1.0, wall_ms=2.0, flush_ms=0.05, event_samples_ms=[0.1, 0.2], bookkeeping_ms=0.3)
    b = LoopWall(host_issue_ms=0.5, wall_ms=1.5, flush_ms=0.05, event_samples_ms=[0.3])
    both = combine_rounds([a, b])
    assert (both.host_issue_ms, both.wall_ms, both.bookkeeping_ms) == (1.5, 3.5, 0.3)
    assert both.event_samples_ms == [0.1, 0.2, 0.3] and both.trials == 3 and both.flush_ms == 0.05
    assert combine_rounds([a]) == a
    with pytest.raises(ValueError):
        combine_rounds([])
