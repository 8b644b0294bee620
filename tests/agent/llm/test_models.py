"""Model references: the strings people type become typed specs, or an error that teaches."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kgen.agent.llm.models import ModelSpec, ModelSpecError, parse_model


def test_official_models_parse_with_default_weight_and_no_base_url():
    gpt = parse_model("openai:gpt-5")
    claude = parse_model("anthropic:claude-sonnet-4-5")
    assert (gpt.provider, gpt.model, gpt.base_url, gpt.weight) == ("openai", "gpt-5", None, 1.0)
    assert (claude.provider, claude.model, claude.base_url) == (
        "anthropic", "claude-sonnet-4-5", None
    )
    assert gpt.label == "openai:gpt-5"
    assert claude.label == "anthropic:claude-sonnet-4-5"


def test_openai_compatible_local_server_keeps_its_url_in_the_label():
    spec = parse_model("openai:qwen2.5-coder@http://127.0.0.1:8000/v1")
    assert spec.provider == "openai"
    assert spec.model == "qwen2.5-coder"
    assert spec.base_url == "http://127.0.0.1:8000/v1"
    assert spec.label == "openai:qwen2.5-coder@http://127.0.0.1:8000/v1"


def test_weight_suffix_alone_and_after_a_base_url():
    assert parse_model("openai:gpt-5*2").weight == 2.0
    spec = parse_model("openai:qwen@http://127.0.0.1:8000/v1*0.5")
    assert (spec.base_url, spec.weight) == ("http://127.0.0.1:8000/v1", 0.5)
    assert spec.label == "openai:qwen@http://127.0.0.1:8000/v1"  # weight is policy, not identity


def test_local_server_shorthands_speak_openai_at_their_default_addresses():
    ollama = parse_model("ollama:qwen2.5-coder:7b")
    assert ollama.provider == "openai"
    assert ollama.model == "qwen2.5-coder:7b"  # the Ollama tag's colon stays in the name
    assert ollama.base_url == "http://127.0.0.1:11434/v1"
    assert parse_model("vllm:Qwen/Qwen2.5-Coder-32B").base_url == "http://127.0.0.1:8000/v1"
    assert parse_model("sglang:m").base_url == "http://127.0.0.1:30000/v1"
    moved = parse_model("VLLM:m@http://gpu-box:9000/v1*3")
    assert (moved.provider, moved.base_url, moved.weight) == ("openai", "http://gpu-box:9000/v1", 3)


def test_local_without_an_address_says_how_to_give_one():
    with pytest.raises(ModelSpecError, match=r"local:mymodel@http://"):
        parse_model("local:mymodel")
    assert parse_model("local:m@http://10.0.0.5:8000/v1").base_url == "http://10.0.0.5:8000/v1"


def test_an_at_sign_in_a_model_name_is_not_a_url():
    spec = parse_model("anthropic:claude-opus-4@20250514")
    assert (spec.model, spec.base_url) == ("claude-opus-4@20250514", None)


@pytest.mark.parametrize(
    "text",
    [
        "openai:gpt-5",
        "anthropic:claude-haiku-4-5",
        "openai:qwen2.5-coder:7b@http://127.0.0.1:11434/v1",
        "openai:m@https://llm.example.org/v1",
    ],
)
def test_label_parses_back_to_the_same_spec(text):
    spec = parse_model(text)
    assert parse_model(spec.label) == spec


@pytest.mark.parametrize(
    "text",
    [
        "gpt-5",  # no provider
        "openai:",  # no model
        ":gpt-5",
        "azure:gpt-4o",  # unknown provider
        "openai:gpt-5*0",  # weight must be positive
        "openai:gpt-5*-1",
        "openai:gpt-5*two",
        "openai:gpt 5",  # whitespace in the name
        "openai:m@http://",  # URL without a host
        "openai:m@http://user:secret@host/v1",  # credentials belong in a key variable (#NAME)
    ],
)
def test_bad_references_raise_an_error_that_teaches_the_syntax(text):
    with pytest.raises(ModelSpecError) as caught:
        parse_model(text)
    assert isinstance(caught.value, ValueError)
    assert "PROVIDER:MODEL[@BASE_URL][#KEY_VARIABLE][*WEIGHT]" in str(caught.value)
    assert repr(text) in str(caught.value)


def test_spec_is_frozen_and_validated_when_built_directly():
    spec = ModelSpec(provider="openai", model="gpt-5")
    with pytest.raises(ValidationError):
        spec.model = "gpt-4o"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ModelSpec(provider="openai", model="gpt-5", weight=0)
    with pytest.raises(ValidationError):
        ModelSpec(provider="mistral", model="m")  # type: ignore[arg-type]


def test_api_key_env_must_be_a_variable_name_not_a_pasted_key():
    assert ModelSpec(provider="openai", model="m", api_key_env="MY_LLM_KEY").api_key_env
    with pytest.raises(ValidationError):
        ModelSpec(provider="openai", model="m", api_key_env="sk-proj-abc123")
