"""LLM clients: the real openai / anthropic SDKs against the scripted loopback server."""

from __future__ import annotations

import logging
import pickle
import socket
import time

import pytest
from llm_server import Reply, ScriptedLLMServer

from kgen.agent.llm.models import ModelSpec, parse_model
from kgen.agent.llm.providers import (
    DEFAULT_KEY_ENV,
    PLACEHOLDER_KEY,
    LLMClient,
    ProviderError,
    make_client,
)

FAKE_KEY = "sk-kgen-LEAKCHECK-7f3a9c2e51d04b8e"
FAST = {"timeout_s": 0.5, "max_retries": 1}


def spec_for(server: ScriptedLLMServer, route: str, model: str = "test-model",
             key_named: bool = False) -> ModelSpec:
    """``key_named``: the model names its provider's key for the server (``#OPENAI_API_KEY``),
    the only way kgen's configured key reaches a server other than the provider's own."""
    url = server.openai_base_url if route == "openai" else server.anthropic_base_url
    named = f"#{DEFAULT_KEY_ENV[route]}" if key_named else ""
    return parse_model(f"{route}:{model}@{url}{named}")


def client_for(server: ScriptedLLMServer, route: str, key_named: bool = False, **kwargs) -> LLMClient:
    options = {"api_key": FAKE_KEY, **FAST, **kwargs}
    return make_client(spec_for(server, route, key_named=key_named), **options)


def sent_key(request) -> str:
    return request.headers.get("authorization", "") + request.headers.get("x-api-key", "")


def test_openai_reply_is_parsed_with_tokens_and_the_request_is_well_formed(llm_server):
    llm_server.script("openai", [Reply.text("def kernel(): ...", input_tokens=123, output_tokens=45)])
    with client_for(llm_server, "openai") as client:
        done = client.complete("You write kernels.", "RMSNorm please", max_tokens=300,
                               temperature=0.7)
    assert done.text == "def kernel(): ..."
    assert (done.input_tokens, done.output_tokens) == (123, 45)
    assert done.finish_reason == "stop" and not done.truncated
    assert done.model == client.label
    assert done.cost_usd is None  # a self-hosted endpoint has no list price
    assert done.seconds > 0
    [request] = llm_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.model == "test-model"
    assert request.messages == [
        {"role": "system", "content": "You write kernels."},
        {"role": "user", "content": "RMSNorm please"},
    ]
    assert request.body["max_tokens"] == 300 and request.body["temperature"] == 0.7


def test_anthropic_reply_is_parsed_with_tokens_and_the_request_is_well_formed(llm_server):
    llm_server.script("anthropic", [Reply.text("kernel text", input_tokens=77, output_tokens=9)])
    with client_for(llm_server, "anthropic") as client:
        done = client.complete("sys prompt", "user prompt", max_tokens=200, temperature=0.2)
    assert (done.text, done.input_tokens, done.output_tokens) == ("kernel text", 77, 9)
    assert done.finish_reason == "end_turn"
    assert done.model.startswith("anthropic:test-model@")
    [request] = llm_server.requests
    assert request.path == "/v1/messages"  # the SDK adds /v1 to a base URL without it
    assert request.body["system"] == "sys prompt"
    assert request.messages == [{"role": "user", "content": "user prompt"}]
    assert request.body["max_tokens"] == 200


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_a_reply_cut_at_the_token_limit_is_marked_truncated(llm_server, route):
    llm_server.script(route, [Reply.text("def kern", stop="length")])
    done = client_for(llm_server, route).complete("s", "u", max_tokens=5, temperature=0)
    assert done.truncated
    assert done.finish_reason == ("length" if route == "openai" else "max_tokens")


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_rate_limit_is_retried_by_the_sdk_and_then_succeeds(llm_server, route):
    llm_server.script(route, [Reply.error(429, "slow down", retry_after_s=0.01), Reply.text("ok")])
    done = client_for(llm_server, route, max_retries=3).complete(
        "s", "u", max_tokens=5, temperature=0
    )
    assert done.text == "ok"
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_rate_limit_that_persists_is_reported_as_rate_limited(llm_server, route):
    llm_server.script(route, [Reply.error(429, retry_after_s=0.01)] * 3)
    with pytest.raises(ProviderError) as caught:
        client_for(llm_server, route, max_retries=2).complete("s", "u", max_tokens=5,
                                                              temperature=0)
    assert caught.value.kind == "rate_limited" and caught.value.transient
    assert len(llm_server.requests) == 3


def test_server_error_is_retried_and_then_succeeds(llm_server):
    llm_server.script("openai", [Reply.error(500, retry_after_s=0.01), Reply.text("ok")])
    assert client_for(llm_server, "openai").complete("s", "u", max_tokens=5,
                                                     temperature=0).text == "ok"
    assert len(llm_server.requests) == 2


def test_a_slow_reply_within_the_deadline_is_waited_for(llm_server):
    llm_server.script("openai", [Reply.hang(1.0)])
    done = client_for(llm_server, "openai", timeout_s=5).complete("s", "u", max_tokens=5,
                                                                   temperature=0)
    assert done.text == "too late" and 1.0 <= done.seconds < 4
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_a_silent_server_ends_the_call_at_its_deadline_without_retrying(llm_server, route):
    """The deadline is the whole call's: a silent attempt uses all of it, so no second
    request follows, and the error names the option that sets it."""
    llm_server.script(route, [Reply.silent(), Reply.silent()])
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        client_for(llm_server, route).complete("s", "u", max_tokens=5, temperature=0)
    assert caught.value.kind == "timeout"
    assert "0.5 s" in str(caught.value) and "1 attempt" in str(caught.value)
    assert "--llm-timeout" in str(caught.value)
    assert len(llm_server.requests) == 1
    assert time.monotonic() - started < 1.5  # the silent server did not hold the client


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_a_rejected_key_is_an_auth_error_without_retries(llm_server, route):
    llm_server.script(route, [Reply.error(401, "invalid x-api-key")] * 4)
    with pytest.raises(ProviderError) as caught:
        client_for(llm_server, route, max_retries=3).complete("s", "u", max_tokens=5,
                                                              temperature=0)
    assert caught.value.kind == "auth" and not caught.value.transient
    assert "401" in str(caught.value) and "invalid x-api-key" in str(caught.value)
    assert len(llm_server.requests) == 1


def test_a_closed_port_is_unreachable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free now, nothing listens after the close
    client = make_client(parse_model(f"openai:m@http://127.0.0.1:{port}/v1"), timeout_s=0.5,
                         max_retries=0)
    with pytest.raises(ProviderError) as caught:
        client.complete("s", "u", max_tokens=5, temperature=0)
    assert caught.value.kind == "unreachable"
    assert f"127.0.0.1:{port}" in str(caught.value)


@pytest.mark.parametrize("route", ["openai", "anthropic"])
@pytest.mark.parametrize("body", [b'{"id": "x", "choices": [', b'{"unexpected": 1}', b"[]"])
def test_a_reply_that_is_not_the_protocol_is_a_bad_reply(llm_server, route, body):
    llm_server.script(route, [Reply.malformed(body)])
    with pytest.raises(ProviderError) as caught:
        client_for(llm_server, route).complete("s", "u", max_tokens=5, temperature=0)
    assert caught.value.kind == "bad_reply"


def test_unknown_model_is_reported_with_what_to_check(llm_server):
    llm_server.script("openai", [Reply.error(404, "The model `gpt-9` does not exist")])
    with pytest.raises(ProviderError) as caught:
        client_for(llm_server, "openai").complete("s", "u", max_tokens=5, temperature=0)
    assert caught.value.kind == "other"
    assert "gpt-9" in str(caught.value) and "check the model name" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "variable"),
    [("openai:gpt-5", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY")],
)
def test_missing_key_for_an_official_api_names_the_variable(text, variable):
    with pytest.raises(ProviderError) as caught:
        make_client(parse_model(text))
    assert caught.value.kind == "missing_key"
    provider = text.split(":")[0]
    assert str(caught.value) == (f"no API key for {text}: set {variable} or {provider}_api_key "
                                 f"in the config file")


def test_missing_key_fails_before_any_request(llm_server, monkeypatch):
    monkeypatch.delenv("KGEN_TEST_LLM_KEY", raising=False)
    spec = spec_for(llm_server, "openai").model_copy(update={"api_key_env": "KGEN_TEST_LLM_KEY"})
    with pytest.raises(ProviderError) as caught:
        make_client(spec)
    assert caught.value.kind == "missing_key" and "KGEN_TEST_LLM_KEY" in str(caught.value)
    assert llm_server.requests == []


def test_key_comes_from_the_specs_variable(llm_server, monkeypatch):
    monkeypatch.setenv("KGEN_TEST_LLM_KEY", FAKE_KEY)
    spec = spec_for(llm_server, "anthropic").model_copy(update={"api_key_env": "KGEN_TEST_LLM_KEY"})
    llm_server.script("anthropic", [Reply.text("ok")])
    make_client(spec, **FAST).complete("s", "u", max_tokens=5, temperature=0)
    assert FAKE_KEY in sent_key(llm_server.requests[0])


def test_a_custom_server_never_receives_the_official_key_from_the_environment(
    llm_server, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    llm_server.script("openai", [Reply.text("ok")])
    make_client(spec_for(llm_server, "openai"), **FAST).complete("s", "u", max_tokens=5,
                                                                 temperature=0)
    header = sent_key(llm_server.requests[0])
    assert FAKE_KEY not in header
    assert PLACEHOLDER_KEY in header  # local servers take any key; the SDK needs one


def test_loopback_servers_are_reached_directly_even_with_a_proxy_configured(
    llm_server, monkeypatch
):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens on the discard port
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    llm_server.script("openai", [Reply.text("direct")])
    llm_server.script("anthropic", [Reply.text("direct")])
    for route in ("openai", "anthropic"):
        done = client_for(llm_server, route, max_retries=0).complete("s", "u", max_tokens=5,
                                                                     temperature=0)
        assert done.text == "direct"


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_the_key_is_sent_but_never_appears_in_results_errors_or_logs(llm_server, route, caplog):
    caplog.set_level(logging.DEBUG)
    echo = f"Incorrect API key provided: {FAKE_KEY}"
    llm_server.script(route, [
        Reply.text("fine", input_tokens=3, output_tokens=2),
        Reply.error(401, echo),
        Reply.error(429, echo),
        Reply.error(400, echo),
        Reply.malformed(f'{{"oops": "{FAKE_KEY}"'.encode()),
    ])
    client = client_for(llm_server, route, key_named=True, max_retries=0)
    seen = [repr(client), str(client)]
    done = client.complete("s", "u", max_tokens=5, temperature=0)
    seen += [repr(done), str(done), done.model_dump_json()]
    kinds = []
    for _ in range(4):
        with pytest.raises(ProviderError) as caught:
            client.complete("s", "u", max_tokens=5, temperature=0)
        error = caught.value
        kinds.append(error.kind)
        seen += [str(error), repr(error), repr(error.args), error.message]
    assert kinds == ["auth", "rate_limited", "other", "bad_reply"]
    assert all(FAKE_KEY in sent_key(r) for r in llm_server.requests)  # it was sent...
    assert "Incorrect API key provided: ***" in seen[5]
    for text in seen + [caplog.text] + [r.getMessage() for r in caplog.records]:
        assert FAKE_KEY not in text  # ...and shown nowhere


def test_missing_key_error_and_client_repr_carry_no_key(monkeypatch):
    monkeypatch.setenv("KGEN_TEST_LLM_KEY", FAKE_KEY)
    spec = ModelSpec(provider="openai", model="m", base_url="http://127.0.0.1:1/v1",
                     api_key_env="KGEN_TEST_LLM_KEY")
    client = make_client(spec)
    assert FAKE_KEY not in repr(client) and FAKE_KEY not in repr(spec)


def test_provider_errors_survive_pickling_with_their_kind():
    error = ProviderError("x timed out", kind="timeout", model="openai:gpt-5")
    back = pickle.loads(pickle.dumps(error))
    assert (back.kind, back.model, str(back)) == ("timeout", "openai:gpt-5", "x timed out")


def test_one_server_answers_each_model_from_a_responder(llm_server):
    llm_server.respond_with("openai", lambda request: Reply.text(f"from {request.model}"))
    base = llm_server.openai_base_url
    texts = [
        make_client(parse_model(f"openai:{name}@{base}"), **FAST).complete(
            "s", "u", max_tokens=5, temperature=0
        ).text
        for name in ("alpha", "beta")
    ]
    assert texts == ["from alpha", "from beta"]
