"""Operators' outcomes and the policy that shares a generation's slots by recent success.

A person sees this as "the search spent its budget on what worked in this run": an
operator whose children beat their parents gets more slots, one that keeps failing
gets fewer but never none, and nothing is judged from a time measured elsewhere.
"""

from __future__ import annotations

import random
from collections import Counter

from kgen.agent.candidates import CandidateRecord
from kgen.agent.search.operators import (
    FLOOR_SHARE,
    allocate,
    operator_stats,
    operator_weights,
    outcome_of,
)

H100 = "NVIDIA H100 80GB HBM3"


def rec(cid: str, kind: str, time_ms: float | None = None, *, parents: list[str] | None = None,
        verdict: str = "passed", device: str = H100) -> CandidateRecord:
    return CandidateRecord(id=cid, generation=int(cid[1]), target="h100", kind=kind, origin="model",
                           parent_ids=parents or [], status="evaluated", verdict=verdict, time_ms=time_ms,
                           device_name=device if time_ms is not None else "")


RECORDS = [
    rec("g0-k", "baseline", 2.0),
    rec("g1-a", "improve", 1.0, parents=["g0-k"]),             # 2x: improved
    rec("g1-b", "improve", 1.995, parents=["g0-k"]),           # inside the noise margin
    rec("g1-c", "fix", verdict="rejected", parents=["g0-x"]),  # failed
    rec("g1-d", "generate", 1.5),                              # beats the best before gen 1
    rec("g2-e", "crossover", 0.9, parents=["g1-a", "g1-d"]),   # beats the faster parent
    rec("g2-f", "mutate", 3.0, parents=["g1-a"]),              # slower than its parent
]


def test_outcomes_compare_with_the_best_parent_or_the_best_before():
    outcomes = {r.id: outcome_of(r, RECORDS) for r in RECORDS}
    assert outcomes["g0-k"] is None  # a re-measure is the reference, no operator's work
    assert outcomes["g1-a"].improved and outcomes["g1-a"].gain == 2.0
    assert outcomes["g1-b"].improved is False
    assert outcomes["g1-c"].improved is False and not outcomes["g1-c"].passed
    assert outcomes["g1-d"].improved and round(outcomes["g1-d"].gain, 3) == 1.333
    assert outcomes["g2-e"].improved and round(outcomes["g2-e"].gain, 3) == 1.111
    assert outcomes["g2-f"].improved is False


def test_a_time_from_another_gpu_is_not_judged():
    records = [rec("g0-k", "baseline", 2.0), rec("g1-a", "improve", 0.1, parents=["g0-k"],
                                                 device="AMD Instinct MI300X")]
    outcome = outcome_of(records[1], records)
    assert outcome.passed and outcome.improved is None and outcome.gain is None


def test_stats_count_tried_passed_and_improved_per_operator():
    stats = operator_stats(RECORDS)
    assert set(stats) == {"improve", "fix", "generate", "crossover", "mutate"}
    assert (stats["improve"].tried, stats["improve"].passed, stats["improve"].improved) == (2, 2, 1)
    assert stats["improve"].success_rate == 0.5
    assert (stats["fix"].tried, stats["fix"].passed, stats["fix"].improved) == (1, 0, 0)
    assert stats["crossover"].success_rate == 1.0


def test_weights_follow_recent_success_with_a_floor():
    stats = operator_stats(RECORDS)
    weights = operator_weights(stats, ["crossover", "fix", "mutate", "generate"])
    assert abs(sum(weights.values()) - 1) < 1e-9
    assert weights["crossover"] == weights["generate"] > weights["mutate"]  # 1 of 1 each; mutate 0 of 1
    assert weights["fix"] < weights["crossover"]
    assert min(weights.values()) >= FLOOR_SHARE / 4 / 1.01


def test_before_any_outcome_the_priors_decide():
    weights = operator_weights({}, ["improve", "generate"], {"improve": 1.0, "generate": 0.5})
    assert weights["improve"] > weights["generate"]
    assert operator_weights({}, []) == {}


def test_allocation_gives_every_slot_and_is_reproducible():
    weights = {"improve": 0.5, "crossover": 0.3, "fix": 0.2}
    slots = allocate(weights, 10, random.Random(3))
    assert Counter(slots) == {"improve": 5, "crossover": 3, "fix": 2}
    assert allocate(weights, 4, random.Random(1)) == allocate(weights, 4, random.Random(1))
    assert len(allocate(weights, 4, random.Random(1))) == 4
    assert allocate(weights, 0, random.Random(1)) == []


def test_a_successful_operator_gets_more_slots_than_a_failing_one():
    records = [rec("g0-k", "baseline", 4.0)]
    for i in range(4):
        records.append(rec(f"g1-i{i}", "improve", 4.0 / (2 + i), parents=["g0-k"]))
        records.append(rec(f"g1-c{i}", "crossover", 5.0, parents=["g0-k", "g0-k"]))
    slots = Counter(allocate(operator_weights(operator_stats(records), ["improve", "crossover"]), 8,
                             random.Random(0)))
    assert slots["improve"] > slots["crossover"] >= 1
