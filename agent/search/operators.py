"""Search operators and the policy that picks them by how well they worked in this run.

An operator is a way to make a candidate: ``generate`` (a fresh kernel from a model),
``improve`` (a model rewrites one parent, shown its measurements), ``fix`` (a model
repairs a rejected candidate, shown the verifier's evidence), ``crossover`` (a model
combines two parents), ``mutate`` (one or two tunables moved, no model) and ``sweep``
(every remaining point of a small tunable space, or one knob's whole line, no model).

Published searches (OpenEvolve, the AI CUDA Engineer, KernelEvolve) spend most of
their budget where it pays: the policy here gives each generation's slots to the
operators in proportion to their recent success, with a floor so an operator that
failed early still gets tried again. Success is measured, never claimed: a
candidate *improved* when it passed and its time on its target beat its best
parent's (for an operator without parents, the best kernel known before its
generation) by more than the timing noise.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, Field

from kgen.agent.candidates import CandidateRecord

#: operators that need a model; ``mutate`` and ``sweep`` only move tunables
MODEL_OPERATORS = ("generate", "improve", "crossover", "fix")
TUNING_OPERATORS = ("mutate", "sweep")
#: a time must beat the reference by this share to count as an improvement: honest kernels'
#: repeated timings on an H100 spread by about 1% (docs/benchmarks.md), so less is noise
IMPROVEMENT_MARGIN = 0.01
#: how many of an operator's latest outcomes its success rate is taken over
RECENT_WINDOW = 8
#: every available operator keeps at least this share of the weight
FLOOR_SHARE = 0.1


class Outcome(BaseModel):
    """What one evaluated candidate did for its operator."""

    candidate: str
    operator: str
    target: str
    generation: int
    passed: bool
    #: None when it could not be judged (no timing on the target: CPU runs, another GPU)
    improved: bool | None = None
    #: reference time / candidate time on the target, when both were measured there
    gain: float | None = None


class OperatorStats(BaseModel):
    """An operator's record in one run: tried, passed, improved, and its recent outcomes."""

    operator: str
    tried: int = 0
    passed: int = 0
    improved: int = 0
    #: improvement outcomes, oldest first (None: not judged)
    recent: list[bool | None] = Field(default_factory=list)

    @property
    def success_rate(self) -> float | None:
        """Share of judged recent outcomes that improved; None before any was judged."""
        judged = [x for x in self.recent[-RECENT_WINDOW:] if x is not None]
        return sum(judged) / len(judged) if judged else None


def _best_time_before(records: Sequence[CandidateRecord], target: str, generation: int) -> float | None:
    times = [t for r in records if r.passed and r.generation < generation
             and (t := r.time_on(target)) is not None]
    return min(times, default=None)


def outcome_of(record: CandidateRecord, records: Sequence[CandidateRecord]) -> Outcome | None:
    """How ``record`` did against what it started from; None for a candidate not yet evaluated
    or a re-measure of a known kernel (it is the reference, not an operator's work)."""
    if record.status == "pending" or record.kind == "baseline":
        return None
    by_id = {r.id: r for r in records}
    target = record.target
    parent_times = [t for p in record.parent_ids
                    if p in by_id and by_id[p].passed and (t := by_id[p].time_on(target)) is not None]
    reference = min(parent_times) if parent_times else _best_time_before(records, target, record.generation)
    time = record.time_on(target) if record.passed else None
    improved: bool | None
    gain = None
    if not record.passed:
        improved = False
    elif time is None or reference is None:
        improved = None
    else:
        gain = reference / time
        improved = time < reference * (1 - IMPROVEMENT_MARGIN)
    return Outcome(candidate=record.id, operator=record.kind, target=target, generation=record.generation,
                   passed=record.passed, improved=improved, gain=gain)


def operator_stats(records: Sequence[CandidateRecord]) -> dict[str, OperatorStats]:
    """Per operator, in the order candidates were made: the run's record (report and policy)."""
    stats: dict[str, OperatorStats] = {}
    for record in sorted(records, key=lambda r: (r.generation, r.id)):
        outcome = outcome_of(record, records)
        if outcome is None:
            continue
        entry = stats.setdefault(outcome.operator, OperatorStats(operator=outcome.operator))
        entry.tried += 1
        entry.passed += outcome.passed
        entry.improved += bool(outcome.improved)
        entry.recent.append(outcome.improved)
    return stats


def operator_weights(stats: dict[str, OperatorStats], available: Sequence[str],
                     priors: dict[str, float] | None = None) -> dict[str, float]:
    """Each available operator's share of the next slots: its recent success (a Beta(1, 1)
    mean over judged outcomes, or its prior before any), floored so none starves."""
    if not available:
        return {}
    raw: dict[str, float] = {}
    for name in available:
        entry = stats.get(name)
        judged = [x for x in (entry.recent[-RECENT_WINDOW:] if entry else []) if x is not None]
        prior = (priors or {}).get(name, 1.0)
        raw[name] = prior * (sum(judged) + 1) / (len(judged) + 2) if judged else prior * 0.5
    total = sum(raw.values())
    floor = FLOOR_SHARE / len(available)
    shares = {k: max(v / total, floor) for k, v in raw.items()}
    norm = sum(shares.values())
    return {k: v / norm for k, v in shares.items()}


def allocate(weights: dict[str, float], n: int, rng: random.Random) -> list[str]:
    """``n`` operator slots by largest remainder of ``weights``; ties broken by ``rng``, so a
    run's seed reproduces its choices."""
    if n <= 0 or not weights:
        return []
    exact = {k: w * n for k, w in weights.items()}
    counts = {k: int(v) for k, v in exact.items()}
    order = sorted(exact, key=lambda k: (-(exact[k] - counts[k]), rng.random()))
    for name in order[: n - sum(counts.values())]:
        counts[name] += 1
    return [name for name in weights for _ in range(counts[name])]
