"""When a timing has seen enough: the median's confidence interval decides, not a fixed budget.

A fixed budget spends the same seconds on a kernel whose every trial reads the same time as
on one whose trials scatter. The timing loop (``measure.py``) instead runs its trials in
rounds and, after each, asks :func:`decide` whether the samples so far settle what the
timing is for:

* **Precision.** A distribution-free confidence interval of the median, from order
  statistics (:func:`median_interval`: the number of samples under the true median is
  Binomial(n, 1/2) whatever the distribution, so ranks of the sorted samples bound it), lies
  within :data:`REL_PRECISION` of the median on both sides. More trials would not move the
  reported median by more than the run-to-run drift already admits.
* **Ranking.** Given the current best candidate's median (``rank_against_ms``), the whole
  interval lies above ``best * (1 + RANK_MARGIN)`` (clearly slower) or below
  ``best * (1 - RANK_MARGIN)`` (clearly faster): whichever way more trials went, the
  candidate's place against the best would not change. The interval must still be within
  :data:`RANK_PRECISION` of the median: the median is also what the deferred-work and
  wall-time checks subtract from their windows, and what the report prints.

Neither before :data:`MIN_SAMPLES` samples (the floor of evidence the other checks rely on),
and never past the cap the caller planned (the budget): a timing that is still too noisy at
the cap stops there, as every timing did before. Baselines are timed with the precision rule
alone (they are never ranked against a candidate).

Pure functions of the samples: tested without a GPU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from enum import Enum
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

#: Coverage of the median's interval. A wrong stop needs the true median outside the
#: interval (at most 5% of timings) *and*, for a ranking, outside the margin beyond it too;
#: a miss then costs precision, never correctness (every check still runs).
CONFIDENCE = 0.95
#: Half-width of the interval, as a share of the median, that counts as precise. Two timings
#: of the same kernel on one GPU agree to about 3% (``tests/evals/timing/test_measure.py``'s
#: GPU test); a 1% interval is well inside that, so more trials would only refine noise that
#: the next run does not reproduce. Speedups and percent-of-SOL are printed to 2 digits.
REL_PRECISION = 0.01
#: How far past the best's median the whole interval must lie to rank the candidate: the
#: best's own median carries the same ~3% run-to-run drift (it was timed in another process,
#: perhaps minutes earlier), so a candidate is ranked only where that drift cannot reverse it.
RANK_MARGIN = 0.03
#: The widest interval (as a share of the median, each side) a ranking may stop on. The
#: median is the event time the deferred-work check subtracts from each synced window
#: (``deferred_work.py``, which flags only hidden time past 20% of it) and the loop's
#: wall-time check subtracts from its wall time (``loop_wall.py``: 25%); a median known to 5%
#: leaves both margins at least three quarters of their room, as a full-budget timing did.
RANK_PRECISION = 0.05
#: Samples before any stop. At 20 the 95% interval is [x(6), x(15)]: five samples on each side
#: lie outside it, so a burst from a neighbour or one clock change cannot end a timing; p10 and
#: p90 (the speedup claim's interval, ``bench_result.py``) are each interpolated between two
#: samples of their own; the timed-output check draws its few calls (``timed_samples.py``)
#: from a loop several times their number; and the loop's wall-time check (``loop_wall.py``)
#: spreads one round's start and end lag over at least 20 trials (5% of a trial's accounted
#: time, under its 25% margin).
MIN_SAMPLES = 20
#: Each round after the first adds this share of the trials so far: a stop comes at most 1.5x
#: after the point where it could have, and a 500-trial cap is reached in 9 rounds (each
#: round ends with one device-wide synchronize, microseconds against the trials it holds).
ROUND_GROWTH = 0.5


class StopReason(str, Enum):
    """Why a timing ended."""

    #: the median's interval is within REL_PRECISION of it
    PRECISION = "precision"
    #: the whole interval lies above the best's median by RANK_MARGIN
    RANKED_SLOWER = "ranked_slower"
    #: the whole interval lies below the best's median by RANK_MARGIN
    RANKED_FASTER = "ranked_faster"
    #: every planned trial ran (the budget or max_trials) without either deciding
    CAP = "cap"
    #: the host clock passed the loop's deadline (a call far slower than its warm-up)
    BUDGET_EXCEEDED = "budget_exceeded"


class StoppingRule(BaseModel):
    """The constants above, as one value a caller can pass (tests tighten or loosen them)."""

    model_config = ConfigDict(frozen=True)

    min_samples: int = MIN_SAMPLES
    confidence: float = CONFIDENCE
    rel_precision: float = REL_PRECISION
    rank_margin: float = RANK_MARGIN
    rank_precision: float = RANK_PRECISION


#: the rule every timing uses unless its caller says otherwise
DEFAULT_RULE = StoppingRule()


class StopDecision(BaseModel):
    """What the samples so far settle."""

    model_config = ConfigDict(frozen=True)

    stop: bool
    #: None while the timing goes on
    reason: StopReason | None = None
    samples: int
    median_ms: float
    #: the median's confidence interval (ms); None: too few samples for one at this confidence
    interval_ms: tuple[float, float] | None = None


@lru_cache(maxsize=1024)
def _lower_rank(n: int, confidence: float) -> int:
    """The largest 1-based rank ``k`` with P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2,
    so that [x(k), x(n + 1 - k)] holds the median with at least ``confidence``; 0 when none."""
    tail = (1.0 - confidence) / 2.0
    total = 2**n
    cumulative, k = 0, 0
    for i in range(n // 2 + 1):
        cumulative += math.comb(n, i)  # now P(B <= i) * 2^n
        if cumulative / total > tail:
            break
        k = i + 1
    return k


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """A distribution-free ``confidence`` interval of the median (order statistics); None when
    there are too few samples for one (fewer than 6 at 95%)."""
    n = len(samples)
    if n == 0:
        return None
    k = _lower_rank(n, confidence)
    if k == 0:
        return None
    ordered = sorted(samples)
    return ordered[k - 1], ordered[n - k]


def decide(samples: Sequence[float], rule: StoppingRule = DEFAULT_RULE,
           rank_against_ms: float | None = None) -> StopDecision:
    """Whether the samples so far settle the timing: never before ``rule.min_samples``; then
    when the median's interval is precise enough, or (given the best's median) lies wholly
    beyond the best by the margin and within the ranking's coarser precision."""
    n = len(samples)
    median = statistics.median(samples) if n else math.nan
    interval = median_interval(samples, rule.confidence)
    if n < rule.min_samples or interval is None:
        return StopDecision(stop=False, samples=n, median_ms=median, interval_ms=interval)
    low, high = interval
    half_width = max(median - low, high - median)
    reason = None
    if half_width <= rule.rel_precision * median:
        reason = StopReason.PRECISION
    elif (rank_against_ms is not None and math.isfinite(rank_against_ms) and rank_against_ms > 0
          and half_width <= rule.rank_precision * median):
        if low > rank_against_ms * (1.0 + rule.rank_margin):
            reason = StopReason.RANKED_SLOWER
        elif high < rank_against_ms * (1.0 - rule.rank_margin):
            reason = StopReason.RANKED_FASTER
    return StopDecision(stop=reason is not None, reason=reason, samples=n, median_ms=median, interval_ms=interval)


def next_round(done: int, cap: int, min_samples: int = MIN_SAMPLES) -> int:
    """How many trials the next round runs: the floor first, then :data:`ROUND_GROWTH` of those
    so far, never past ``cap`` (0 once it is reached)."""
    if done >= cap:
        return 0
    if done < min_samples:
        return min(min_samples, cap) - done
    return min(cap - done, max(1, math.ceil(done * ROUND_GROWTH)))
