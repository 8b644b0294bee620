"""Timed calls a candidate cannot predict: the random order of input sets, and the sampled
calls whose buffers get fresh values and whose outputs are kept.

On the CPU the loop runs on a fake clock whose "device" is the host (as in
``test_measure.py``); the tests marked ``gpu`` run the same on a real device.
"""

import random
import time

import pytest
import torch

from kgen.evals.timing import measure as timing
from kgen.evals.timing.stopping import StoppingRule, StopReason
from kgen.evals.timing.timed_samples import InputOrder, TimedSampler

CUDA = torch.cuda.is_available()


def test_the_order_never_repeats_a_set_and_follows_no_cycle():
    order = InputOrder(3, random.Random(1))
    drawn = [order.next() for _ in range(300)]
    assert all(a != b for a, b in zip(drawn, drawn[1:], strict=False))
    assert {0, 1, 2} == set(drawn)
    assert sum(drawn[i] == drawn[i + 3] for i in range(len(drawn) - 3)) < 250  # round robin would be all
    assert [InputOrder(1).next() for _ in range(3)] == [0, 0, 0]
    firsts = [InputOrder(4).next() for _ in range(40)]
    assert len(set(firsts)) > 1  # each order seeded from the OS, not from a shared generator
    with pytest.raises(ValueError):
        InputOrder(0)


def test_a_sampled_call_gets_values_its_buffers_never_held():
    fresh = [(torch.full((4,), 10.0),), (torch.full((4,), 20.0),)]
    sampler = TimedSampler(fresh, count=2, rng=random.Random(3))
    assert sampler.wants(0) and sampler.wants(1)  # the first `count` calls are always taken
    buffers = (torch.zeros(4),)
    sampler.before(0, 0, buffers)
    first = buffers[0].clone()
    assert first[0].item() in (10.0, 20.0)
    sampler.after(buffers[0] * 2)
    sampler.before(1, 0, buffers)  # the same buffers again: the other fresh values
    assert buffers[0][0].item() != first[0].item()
    sampler.after([buffers[0] * 2])
    a, b = sampler.samples
    assert sampler.inputs_of(a, [buffers])[0][0].item() == first[0].item()
    assert a.outputs[0][0].item() == 2 * first[0].item()  # cloned: later writes do not reach it
    assert b.fresh != a.fresh and b.outputs[0][0].item() == 2 * buffers[0][0].item()
    assert sampler.chosen == {0, 1}


def _kept(count, calls, rng):
    """The calls a sampler keeps out of ``calls``, each taken call run through before/after."""
    sampler = TimedSampler([], count=count, rng=rng)
    held = []
    for trial in range(calls):
        if sampler.wants(trial):
            sampler.before(trial, 0, (torch.zeros(1),))
            sampler.after(torch.full((1,), float(trial)))
        held.append(len(sampler.samples))
    assert max(held) <= count  # never more outputs kept than `count`
    assert all(s.outputs[0].item() == s.trial for s in sampler.samples)  # each kept call's own output
    return sampler.chosen


def test_kept_calls_are_a_uniform_draw_of_those_that_ran_wherever_the_loop_stops():
    """Reservoir sampling: a timing that stops early (``stopping.py``) checks calls from all
    of its trials alike, the last ones as much as the first."""
    rng = random.Random(11)
    for stop_at in (5, 20, 60):
        counts = [0] * stop_at
        runs = 3000
        for _ in range(runs):
            kept = _kept(3, stop_at, rng)
            assert len(kept) == 3 and all(0 <= t < stop_at for t in kept)
            for t in kept:
                counts[t] += 1
        expected = runs * 3 / stop_at
        # each call kept with probability 3/n: within 5 standard deviations for every call
        sd = (runs * (3 / stop_at) * (1 - 3 / stop_at)) ** 0.5
        assert all(abs(c - expected) <= 5 * sd + 1 for c in counts), (stop_at, counts)
    assert _kept(3, 2, rng) == {0, 1}  # fewer calls than `count`: every call


def test_the_sampler_is_asked_once_per_call_in_order():
    sampler = TimedSampler([], count=1, rng=random.Random(0))
    assert sampler.wants(0)
    with pytest.raises(ValueError, match="expected call 1"):
        sampler.wants(2)
    assert not TimedSampler([], count=0).wants(0)


def test_without_fresh_values_a_sample_is_judged_on_its_own_values():
    own = [(torch.ones(3),), (torch.ones(3) * 2,)]
    sampler = TimedSampler([], count=1, rng=random.Random(0))
    sampler.before(4, 1, own[1])
    sampler.after(own[1][0] + 1)
    sample = sampler.samples[0]
    assert sample.fresh is None and sampler.inputs_of(sample, own) is own[1]


class FakeEvent:
    t = None


class FakeClock:
    """The host as the device: events read the host clock, nothing is deferred."""

    flush_bytes = 1
    device_name = "fake"

    def flush(self):
        pass

    def event(self):
        return FakeEvent()

    def record(self, event):
        event.t = time.perf_counter()

    def elapsed_ms(self, start, end):
        return (end.t - start.t) * 1e3

    def synchronize(self):
        pass

    def now(self):
        return time.perf_counter()

    def stream_flag(self):
        return None

    def reset_l2(self):
        return "fake"


def _relu(x):
    return torch.clamp(x, min=0)


def _address_cache(sets):
    """What a candidate caching by input address does: right while the buffers keep their values
    (every set seen once before timing, so a sampled call is never the first on its buffers)."""
    kept = {}

    def fn(x):
        if x.data_ptr() not in kept:
            kept[x.data_ptr()] = _relu(x)
        return kept[x.data_ptr()]

    for args in sets:
        fn(*args)
    return fn


def _wrong_samples(sampler, sets):
    return [s.trial for s in sampler.samples
            if not torch.equal(s.outputs[0], _relu(sampler.inputs_of(s, sets)[0]))]


def _timed(fn, sets, fresh, clock, **kw):
    sampler = TimedSampler(fresh)
    result = timing._timing_loop(clock, fn, sets, budget_s=0.05, warmup=2, min_trials=10, max_trials=40,
                                 check_sync=kw.pop("check_sync", False), sampler=sampler, **kw)
    return result, sampler


def _sets(device, n):
    return [(torch.randn(1 << 12, device=device),) for _ in range(n)]


def test_an_address_keyed_cache_returns_wrong_sampled_outputs_and_an_honest_call_does_not():
    sets, fresh = _sets("cpu", 3), _sets("cpu", 2)
    result, sampler = _timed(_address_cache(sets), sets, fresh, FakeClock())
    assert len(sampler.samples) == 3 and result.sampled_trials == sorted(s.trial for s in sampler.samples)
    assert _wrong_samples(sampler, sets) == [s.trial for s in sampler.samples]
    sets = _sets("cpu", 3)
    result, sampler = _timed(_relu, sets, fresh, FakeClock())
    assert len(sampler.samples) == 3 and _wrong_samples(sampler, sets) == []


def test_an_early_stop_still_checks_three_calls_drawn_from_the_trials_that_ran():
    sets, fresh = _sets("cpu", 3), _sets("cpu", 2)
    sampler = TimedSampler(fresh)
    result = timing._timing_loop(FakeClock(), _address_cache(sets), sets, budget_s=5.0, warmup=2, min_trials=10,
                                 max_trials=400, check_sync=False, sampler=sampler,
                                 stopping=StoppingRule(min_samples=20, rel_precision=10.0))
    assert result.stop_reason is StopReason.PRECISION and result.trials == 20 < result.planned_trials
    assert len(sampler.samples) == 3 and max(result.sampled_trials) < result.trials
    assert _wrong_samples(sampler, sets) == [s.trial for s in sampler.samples]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_sampled_outputs_catch_an_address_cache_and_pass_honest_work():
    sets, fresh = _sets("cuda", 3), _sets("cuda", 2)
    sampler = TimedSampler(fresh)
    cached = timing.time_on_gpu(_address_cache(sets), sets, budget_s=0.3, check_sync=False, sampler=sampler)
    assert len(sampler.samples) == 3 and len(_wrong_samples(sampler, sets)) == 3, cached.flags
    honest_sets = _sets("cuda", 3)
    calibration = timing.calibrate_sync(_relu, honest_sets, "relu")
    sampler = TimedSampler(fresh)
    honest = timing.time_on_gpu(_relu, honest_sets, budget_s=0.3, calibration=calibration, sampler=sampler)
    assert _wrong_samples(sampler, honest_sets) == []
    # kgen's copies around the sampled trials are accounted for: no deferred-work flag
    assert not honest.has_flag("deferred_work"), (honest.flags, honest.loop_unaccounted_ms)
    assert "persisting lines reset" in honest.l2_state, honest.l2_state
