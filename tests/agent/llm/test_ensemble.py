"""The ensemble spreads a generation's requests over models in proportion to their weights."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from kgen.agent.llm.ensemble import Ensemble
from kgen.agent.llm.models import parse_model

GPT = parse_model("openai:gpt-5*2")
CLAUDE = parse_model("anthropic:claude-sonnet-4-5")
LOCAL = parse_model("ollama:qwen2.5-coder:7b*0.5")


def test_six_candidates_over_weights_two_to_one_are_four_and_two():
    plan = Ensemble([GPT, CLAUDE]).allocate(6)
    assert Counter(s.label for s in plan) == {GPT.label: 4, CLAUDE.label: 2}
    # Interleaved: the first requests already reach every model.
    assert {plan[0].label, plan[1].label} == {GPT.label, CLAUDE.label}


def test_leftover_requests_go_to_the_largest_remainders_then_to_earlier_models():
    three = [parse_model(f"openai:m{i}") for i in range(3)]
    assert [Counter(Ensemble(three).allocate(4))[s] for s in three] == [2, 1, 1]
    # shares of 5 over 2 : 1 : 0.5 are 2.86 / 1.43 / 0.71: floors 2+1+0, the two leftovers go
    # to the largest remainders (.86 and .71), not to the middle model
    counts = Counter(Ensemble([GPT, CLAUDE, LOCAL]).allocate(5))
    assert [counts[GPT], counts[CLAUDE], counts[LOCAL]] == [3, 1, 1]


def test_fractional_weights_allocate_exactly_without_float_drift():
    specs = [parse_model(f"openai:m{i}*{w}") for i, w in enumerate((0.5, 0.3, 0.2))]
    counts = Counter(Ensemble(specs).allocate(10))
    assert [counts[s] for s in specs] == [5, 3, 2]


@pytest.mark.parametrize("n", range(0, 23))
def test_allocation_always_sums_to_n_and_stays_within_one_of_each_share(n):
    ensemble = Ensemble([GPT, CLAUDE, LOCAL])
    plan = ensemble.allocate(n)
    assert len(plan) == n
    total = sum(ensemble.weights)
    counts = Counter(plan)
    for spec in ensemble.specs:
        share = n * spec.weight / total
        assert math.floor(share) <= counts[spec] <= math.ceil(share)
    assert plan == ensemble.allocate(n)  # deterministic


def test_pick_follows_the_weights_and_is_reproducible_from_the_seed():
    ensemble = Ensemble([GPT, CLAUDE])
    picks = [ensemble.pick(random.Random(7)) for _ in range(3)]
    assert picks[0] == picks[1] == picks[2]
    rng = random.Random(1234)
    counts = Counter(ensemble.pick(rng) for _ in range(6000))
    assert counts[GPT] / 6000 == pytest.approx(2 / 3, abs=0.03)


def test_an_empty_ensemble_or_negative_count_is_refused():
    with pytest.raises(ValueError):
        Ensemble([])
    with pytest.raises(ValueError):
        Ensemble([GPT]).allocate(-1)
