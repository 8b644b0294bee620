"""The stopping rule on synthetic samples: tight timings stop at the floor, noisy ones run to the
cap, a candidate clearly slower (or faster) than the best stops once that is settled, and one
near the best needs the precision a timing without a best needs."""

import math
import random

import pytest

from kgen.evals.timing.stopping import (
    DEFAULT_RULE,
    MIN_SAMPLES,
    StoppingRule,
    StopReason,
    decide,
    median_interval,
    next_round,
)

CAP = 500


def _draws(median: float, spread: float, seed: int):
    """Log-normal samples (a timing's right skew) with the given median and relative spread."""
    rng = random.Random(seed)
    return lambda: median * math.exp(rng.gauss(0.0, spread))


def _run(draw, cap: int = CAP, rank_against_ms: float | None = None, rule: StoppingRule = DEFAULT_RULE):
    """Rounds as ``measure._adaptive_trials`` runs them: (samples taken, the last decision)."""
    samples: list[float] = []
    decision = None
    while size := next_round(len(samples), cap, rule.min_samples):
        samples += [draw() for _ in range(size)]
        decision = decide(samples, rule, rank_against_ms)
        if decision.stop:
            break
    return len(samples), decision


def test_a_tight_timing_stops_at_the_floor():
    taken, decision = _run(_draws(1.0, 0.002, seed=1))
    assert taken == MIN_SAMPLES and decision.stop and decision.reason is StopReason.PRECISION
    low, high = decision.interval_ms
    assert low <= decision.median_ms <= high and high - low < 0.02


def test_a_noisy_timing_runs_to_the_cap():
    taken, decision = _run(_draws(1.0, 0.3, seed=2))
    assert taken == CAP and not decision.stop and decision.reason is None


def test_clearly_slower_than_the_best_stops_early_and_without_a_best_does_not():
    draw = _draws(2.0, 0.04, seed=3)
    taken, decision = _run(draw, rank_against_ms=1.0)
    assert taken == MIN_SAMPLES and decision.reason is StopReason.RANKED_SLOWER
    unranked, plain = _run(_draws(2.0, 0.04, seed=3))
    assert unranked > 3 * MIN_SAMPLES and plain.reason in (StopReason.PRECISION, None)


def test_clearly_faster_than_the_best_stops_early():
    taken, decision = _run(_draws(0.5, 0.04, seed=4), rank_against_ms=1.0)
    assert taken == MIN_SAMPLES and decision.reason is StopReason.RANKED_FASTER


def test_near_the_best_ranking_cannot_decide_and_precision_is_needed():
    """1% slower than the best, within the margin: only the precision rule can stop it, and at
    the same trial as a timing with no best at all."""
    taken, decision = _run(_draws(1.01, 0.04, seed=5), rank_against_ms=1.0)
    assert decision.reason is StopReason.PRECISION and taken > 2 * MIN_SAMPLES
    unranked, _ = _run(_draws(1.01, 0.04, seed=5))
    assert unranked == taken


def test_a_wildly_noisy_candidate_far_slower_than_the_best_still_needs_its_median_within_5_percent():
    """Ranked already at the floor, but the median the deferred-work check subtracts must be
    known to 5% first."""
    draw = _draws(10.0, 0.25, seed=6)
    samples = [draw() for _ in range(MIN_SAMPLES)]
    low, _ = median_interval(samples)
    assert low > 1.03 and not decide(samples, rank_against_ms=1.0).stop
    taken, decision = _run(_draws(10.0, 0.25, seed=6), rank_against_ms=1.0)
    assert taken > 3 * MIN_SAMPLES and decision.reason is StopReason.RANKED_SLOWER
    low, high = decision.interval_ms
    assert max(decision.median_ms - low, high - decision.median_ms) <= 0.05 * decision.median_ms


def test_never_before_the_floor_even_when_every_sample_agrees():
    assert not decide([1.0] * (MIN_SAMPLES - 1)).stop
    assert not decide([5.0] * (MIN_SAMPLES - 1), rank_against_ms=1.0).stop
    assert decide([1.0] * MIN_SAMPLES).reason is StopReason.PRECISION
    assert not decide([]).stop


def test_a_best_that_is_no_time_is_ignored():
    samples = [2.0 * (1 + 0.03 * ((i % 7) - 3)) for i in range(40)]  # interval +-3%: not precise
    for best in (None, 0.0, -1.0, math.nan, math.inf):
        assert not decide(samples, rank_against_ms=best).stop
    assert decide(samples, rank_against_ms=1.0).reason is StopReason.RANKED_SLOWER


def test_the_interval_is_order_statistics_of_the_right_ranks():
    assert median_interval([1.0] * 5) is None  # 2 * 2^-5 > 5%: no 95% interval from 5 samples
    assert median_interval([]) is None
    samples = list(range(20, 0, -1))
    assert median_interval(samples) == (6, 15)  # P(Binomial(20, 1/2) <= 5) = 2.07% per side
    assert median_interval(list(range(1, 101))) == (40, 61)
    assert median_interval(list(range(1, 11)), confidence=0.99) == (1, 10)


@pytest.mark.parametrize("n", [6, 20, 45])
def test_the_interval_holds_the_median_at_least_as_often_as_promised(n):
    """Distribution-free: on a heavily skewed distribution too (exponential, median ln 2)."""
    rng = random.Random(n)
    runs = 4000
    hits = 0
    for _ in range(runs):
        low, high = median_interval([rng.expovariate(1.0) for _ in range(n)])
        hits += low <= math.log(2) <= high
    # at least 95% coverage, with 4 standard errors for the simulation
    assert hits / runs >= 0.95 - 4 * math.sqrt(0.95 * 0.05 / runs), hits / runs


def test_rounds_start_at_the_floor_grow_by_half_and_end_at_the_cap():
    sizes, done = [], 0
    while size := next_round(done, CAP):
        sizes.append(size)
        done += size
    assert sizes[0] == MIN_SAMPLES and done == CAP and len(sizes) <= 10
    assert sizes[1] == MIN_SAMPLES // 2
    assert next_round(0, 7) == 7 and next_round(7, 7) == 0  # a cap under the floor: one round
    assert next_round(0, CAP, min_samples=CAP) == CAP  # no rule: one round of the whole cap
