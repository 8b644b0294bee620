"""Structured output: JSON from any model, validated, repaired once with the error shown."""

from __future__ import annotations

import pytest
from llm_server import Reply
from pydantic import BaseModel, Field

from kgen.agent.llm.models import parse_model
from kgen.agent.llm.providers import ProviderError, make_client
from kgen.agent.llm.structured_output import ReplyNotValid, complete_json, extract_json
from kgen.agent.llm.usage import UsageLedger


class TilePlan(BaseModel):
    kernel: str
    block_size: int = Field(gt=0)


def openai_client(server):
    return make_client(parse_model(f"openai:coder@{server.openai_base_url}"), timeout_s=2,
                       max_retries=0)


def test_fenced_json_in_prose_is_extracted_and_validated(llm_server):
    llm_server.script("openai", [Reply.text(
        'Here is the plan:\n```json\n{"kernel": "rmsnorm_bwd", "block_size": 1024}\n```\nDone.'
    )])
    plan, completions = complete_json(openai_client(llm_server), "You plan kernels.",
                                      "Plan RMSNorm backward.", TilePlan)
    assert plan == TilePlan(kernel="rmsnorm_bwd", block_size=1024)
    assert len(completions) == 1
    system = llm_server.requests[0].messages[0]["content"]
    assert system.startswith("You plan kernels.")
    assert '"block_size"' in system  # the schema was part of the request


def test_an_invalid_reply_is_repaired_with_the_validation_error(llm_server):
    llm_server.script("openai", [
        Reply.text('{"kernel": "softmax", "block_size": "big"}', input_tokens=50, output_tokens=8),
        Reply.text('{"kernel": "softmax", "block_size": 256}', input_tokens=90, output_tokens=8),
    ])
    ledger = UsageLedger()
    plan, completions = complete_json(openai_client(llm_server), "sys", "Plan softmax.",
                                      TilePlan, ledger=ledger)
    assert plan.block_size == 256
    assert len(completions) == 2
    repair = llm_server.requests[1].messages[-1]["content"]
    assert repair.startswith("Plan softmax.")  # the task is restated
    assert '"block_size": "big"' in repair  # the model sees what it wrote
    assert "block_size" in repair.split("It was not accepted:")[1]  # and what was wrong
    assert ledger.total_calls == 2 and ledger.total_tokens == 156


def test_a_reply_that_never_validates_is_a_bad_reply_and_its_tokens_still_count(llm_server):
    llm_server.script("anthropic", [Reply.text("I cannot do JSON today."),
                                    Reply.text('{"kernel": "x"}')])
    client = make_client(parse_model(f"anthropic:claude-x@{llm_server.anthropic_base_url}"),
                         api_key="sk-test", timeout_s=2, max_retries=0)
    ledger = UsageLedger()
    with pytest.raises(ProviderError) as caught:
        complete_json(client, "sys", "Plan.", TilePlan, ledger=ledger)
    assert caught.value.kind == "bad_reply"
    assert "TilePlan" in str(caught.value) and "block_size" in str(caught.value)
    assert len(llm_server.requests) == 2
    assert ledger.total_calls == 2


def test_provider_failures_pass_through_unchanged(llm_server):
    llm_server.script("openai", [Reply.error(401, "bad key")])
    with pytest.raises(ProviderError) as caught:
        complete_json(openai_client(llm_server), "sys", "Plan.", TilePlan)
    assert caught.value.kind == "auth"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  \n{"a": [1, 2]}\n', {"a": [1, 2]}),
        ('Sure!\n```json\n{"a": 2}\n```', {"a": 2}),
        ('```\n{"a": 3}\n```', {"a": 3}),
        ('<think>maybe {"a": 0}? no</think>\n{"a": 4}', {"a": 4}),
        ('The answer is {"a": 5} as requested.', {"a": 5}),
        ('Use {braces} carefully: {"a": 6}', {"a": 6}),
    ],
)
def test_json_is_found_where_models_put_it(reply, expected):
    assert extract_json(reply) == expected


@pytest.mark.parametrize("reply", ["", "no json here", "<think>{\"a\": 1}</think>", "{broken"])
def test_replies_without_json_are_rejected(reply):
    with pytest.raises(ReplyNotValid):
        extract_json(reply)
