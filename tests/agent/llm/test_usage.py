"""Usage ledger: what a run's LLM calls cost, kept across a resume, never invented."""

from __future__ import annotations

import json

import pytest
from llm_server import Reply

from kgen.agent.llm.completion import Completion
from kgen.agent.llm.models import parse_model
from kgen.agent.llm.providers import make_client
from kgen.agent.llm.usage import UsageLedger, cost_usd, price_for


def completion(model: str, inp: int, out: int, cost: float | None) -> Completion:
    return Completion(text="x", model=model, input_tokens=inp, output_tokens=out, cost_usd=cost,
                      seconds=0.5, finish_reason="stop")


def test_list_prices_apply_to_official_models_and_their_dated_snapshots():
    assert price_for(parse_model("openai:gpt-4o-mini")) == (0.15, 0.60)
    assert price_for(parse_model("anthropic:claude-sonnet-4-5-20250929")) == (3.0, 15.0)
    assert price_for(parse_model("openai:gpt-4o-2024-08-06")) == price_for(
        parse_model("openai:gpt-4o")
    )
    # a million tokens each way of gpt-4o-mini: 0.15 + 0.60
    assert cost_usd(parse_model("openai:gpt-4o-mini"), 1_000_000, 1_000_000) == pytest.approx(0.75)


@pytest.mark.parametrize(
    "text",
    [
        "openai:some-future-model",  # unknown
        "anthropic:claude-imaginary-9",
        "ollama:qwen2.5-coder:7b",  # local
        "openai:gpt-4o@https://proxy.example.org/v1",  # known name, but someone else's price
    ],
)
def test_no_cost_is_invented_for_unknown_or_self_hosted_models(text):
    assert price_for(parse_model(text)) is None
    assert cost_usd(parse_model(text), 1000, 1000) is None


def test_ledger_totals_per_model_and_counts_unpriced_calls():
    ledger = UsageLedger()
    ledger.add(completion("openai:gpt-5", 1000, 200, 0.003))
    ledger.add(completion("openai:gpt-5", 500, 100, 0.0015))
    ledger.add(completion("ollama:qwen", 800, 400, None))
    gpt = ledger.models["openai:gpt-5"]
    assert (gpt.calls, gpt.input_tokens, gpt.output_tokens) == (2, 1500, 300)
    assert gpt.cost_usd == pytest.approx(0.0045)
    local = ledger.models["ollama:qwen"]
    assert (local.calls, local.cost_usd, local.unpriced_calls) == (1, None, 1)
    assert ledger.total_tokens == 3000
    assert ledger.total_calls == 3
    assert ledger.total_cost_usd == pytest.approx(0.0045)
    assert ledger.unpriced_calls == 1


def test_ledger_round_trips_through_json_for_resume():
    ledger = UsageLedger()
    ledger.add(completion("openai:gpt-5", 1000, 200, 0.003))
    ledger.add(completion("local:m@http://127.0.0.1:8000/v1", 10, 20, None))
    saved = ledger.model_dump_json()
    restored = UsageLedger.model_validate(json.loads(saved))
    assert restored == ledger
    assert json.loads(saved)["total_tokens"] == 1230  # the saved file shows the totals too
    restored.add(completion("openai:gpt-5", 1, 1, 0.001))  # a resumed run keeps counting
    assert restored.models["openai:gpt-5"].calls == 2
    assert UsageLedger.model_validate_json(restored.model_dump_json()) == restored


def test_merging_ledgers_adds_them_up():
    a, b = UsageLedger(), UsageLedger()
    a.add(completion("openai:gpt-5", 10, 1, 0.01))
    b.add(completion("openai:gpt-5", 20, 2, 0.02))
    b.add(completion("anthropic:claude-haiku-4-5", 5, 5, None))
    a.merge(b)
    assert a.models["openai:gpt-5"].input_tokens == 30
    assert a.total_cost_usd == pytest.approx(0.03)
    assert a.unpriced_calls == 1


def test_ledger_totals_match_the_usage_the_servers_reported(llm_server):
    llm_server.script("openai", [Reply.text("a", input_tokens=100, output_tokens=10),
                                 Reply.text("b", input_tokens=200, output_tokens=20)])
    llm_server.script("anthropic", [Reply.text("c", input_tokens=300, output_tokens=30)])
    ledger = UsageLedger()
    clients = [
        make_client(parse_model(f"openai:qwen@{llm_server.openai_base_url}"), timeout_s=2),
        make_client(parse_model(f"anthropic:claude-x@{llm_server.anthropic_base_url}"),
                    api_key="sk-test", timeout_s=2),
    ]
    for client in (clients[0], clients[0], clients[1]):
        ledger.add(client.complete("s", "u", max_tokens=50, temperature=0))
    assert ledger.models[clients[0].label].model_dump() == {
        "calls": 2, "input_tokens": 300, "output_tokens": 30,
        "seconds": pytest.approx(ledger.models[clients[0].label].seconds),
        "cost_usd": None, "unpriced_calls": 2,
    }
    assert ledger.models[clients[1].label].input_tokens == 300
    assert ledger.total_tokens == 660
    assert ledger.total_cost_usd == 0.0 and ledger.unpriced_calls == 3
