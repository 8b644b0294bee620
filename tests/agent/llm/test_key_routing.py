"""Which key each model's requests carry: every source of a key against every kind of URL.

A provider's key goes to that provider's official endpoint and nowhere else, unless the model
names a key for its URL (``...@URL#VARIABLE``); the config file's key once reached a custom
base URL while the same key from the environment was withheld. ``choose_api_key`` is the one
rule; these tests drive the real ``openai`` and ``anthropic`` SDKs and read the header the
scripted loopback server actually received.

Official and https URLs cannot be served on loopback, so the SDKs get an HTTP client whose
transport carries every request, whatever its URL, to the loopback server (the ``host``
header still names the server the SDK meant); the SDKs, their headers and kgen's routing are
the real ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from llm_server import RecordedRequest, Reply, ScriptedLLMServer

from kgen.agent.llm import providers
from kgen.agent.llm.models import parse_model
from kgen.agent.llm.providers import (
    DEFAULT_KEY_ENV,
    PLACEHOLDER_KEY,
    ProviderError,
    choose_api_key,
    make_client,
)
from kgen.api import api_keys
from kgen.core.settings import load_settings

KEY = "sk-kgen-ROUTING-5d1e0b7a94c3"
CUSTOM_VARIABLE = "KGEN_TEST_SERVER_KEY"
FAST = {"timeout_s": 2.0, "max_retries": 0}
PROVIDERS = ("openai", "anthropic")

#: URL kinds, per provider: the text after '@' in the model (None: no base URL at all), and
#: whether a key the model does not name may go there
URLS: dict[str, dict[str, tuple[str | None, bool]]] = {
    "openai": {
        "official": (None, True),
        "official written out": ("https://api.openai.com/v1", True),
        "official host, other path": ("https://api.openai.com/v2beta", True),
        "official host over plain http": ("http://api.openai.com/v1", False),
        "official host, other port": ("https://api.openai.com:8443/v1", False),
        "look-alike host": ("https://api.openai.com.attacker.example/v1", False),
        "the other provider's host": ("https://api.anthropic.com", False),
        "custom https": ("https://llm.corp.example/v1", False),
        "custom http loopback": ("LOOPBACK", False),
    },
    "anthropic": {
        "official": (None, True),
        "official written out": ("https://api.anthropic.com", True),
        "official host, other path": ("https://api.anthropic.com/gateway", True),
        "official host over plain http": ("http://api.anthropic.com", False),
        "official host, other port": ("https://api.anthropic.com:8443", False),
        "look-alike host": ("https://api.anthropic.com.attacker.example", False),
        "the other provider's host": ("https://api.openai.com/v1", False),
        "custom https": ("https://llm.corp.example", False),
        "custom http loopback": ("LOOPBACK", False),
    },
}


# ----------------------------------------------------------------------------------------
# Key sources: each sets KEY up the way a person would, and returns the ``api_key`` the run
# hands to ``make_client`` (the graph passes ``api_keys(settings)[provider]``)
# ----------------------------------------------------------------------------------------

Source = Callable[[str, Path, pytest.MonkeyPatch], "str | None"]


def from_config_file(provider: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> str | None:
    (home / "config.toml").write_text(f'{provider}_api_key = "{KEY}"\n')
    return api_keys(load_settings()).get(provider)


def from_kgen_variable(provider: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> str | None:
    monkeypatch.setenv(f"KGEN_{provider.upper()}_API_KEY", KEY)
    return api_keys(load_settings()).get(provider)


def from_flag_layer(provider: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Explicit overrides (the layer a CLI flag or an API argument fills; kgen has no key
    flag today, so this is the only way such a key could arrive)."""
    return api_keys(load_settings({f"{provider}_api_key": KEY})).get(provider)


def from_provider_variable(provider: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> str | None:
    monkeypatch.setenv(DEFAULT_KEY_ENV[provider], KEY)
    return api_keys(load_settings()).get(provider)


SETTINGS_SOURCES: dict[str, Source] = {
    "config file": from_config_file,
    "KGEN_ variable": from_kgen_variable,
    "flag layer": from_flag_layer,
    "provider's variable": from_provider_variable,
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    for variable in list(os.environ):
        if variable.startswith("KGEN_") or variable.endswith("_API_KEY"):
            monkeypatch.delenv(variable)
    monkeypatch.setenv("KGEN_HOME", str(home))
    return home


@pytest.fixture
def every_url_to(llm_server: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch) -> ScriptedLLMServer:
    """The SDKs' requests, for any URL, reach ``llm_server``."""

    def client_to_loopback(sdk, base_url: str):
        http = providers.http_library(sdk)
        port = llm_server.port

        class ToLoopback(http.BaseTransport):
            def __init__(self) -> None:
                self.inner = http.HTTPTransport()

            def handle_request(self, request):
                request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=port)
                return self.inner.handle_request(request)

            def close(self) -> None:
                self.inner.close()

        return sdk.DefaultHttpxClient(trust_env=False, transport=ToLoopback())

    monkeypatch.setattr(providers, "_http_client", client_to_loopback)
    for route in PROVIDERS:
        llm_server.respond_with(route, lambda request: Reply.text("ok"))
    return llm_server


def model_text(provider: str, url: str | None, server: ScriptedLLMServer, named: str | None = None) -> str:
    if url == "LOOPBACK":
        url = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    text = f"{provider}:test-model" + (f"@{url}" if url else "")
    return text + (f"#{named}" if named else "")


def received_key(request: RecordedRequest, provider: str) -> str:
    """The key in the request: OpenAI's bearer token; Anthropic's ``x-api-key``, or the bearer
    token that some versions of its SDK send instead. Both headers at once would be a bug."""
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    api_key = request.headers.get("x-api-key", "")
    assert not (bearer and api_key), request.headers
    return api_key or bearer


def ask(text: str, configured: str | None, server: ScriptedLLMServer, provider: str) -> RecordedRequest:
    before = len(server.requests)
    with make_client(parse_model(text), api_key=configured, **FAST) as client:
        assert client.complete("s", "u", max_tokens=5, temperature=0).text == "ok"
    [request] = server.requests[before:]
    return request


URL_CASES = [(provider, kind) for provider in PROVIDERS for kind in URLS[provider]]


@pytest.mark.parametrize("source", list(SETTINGS_SOURCES))
@pytest.mark.parametrize(("provider", "kind"), URL_CASES)
def test_an_unnamed_key_reaches_only_the_official_endpoint(home, every_url_to, monkeypatch,
                                                          provider, kind, source):
    url, official = URLS[provider][kind]
    configured = SETTINGS_SOURCES[source](provider, home, monkeypatch)
    request = ask(model_text(provider, url, every_url_to), configured, every_url_to, provider)
    assert received_key(request, provider) == (KEY if official else PLACEHOLDER_KEY)
    if url not in (None, "LOOPBACK"):  # the request was meant for the URL the model names
        assert request.headers["host"].split(":")[0] == url.split("://")[1].split("/")[0].split(":")[0]


@pytest.mark.parametrize("source", list(SETTINGS_SOURCES))
@pytest.mark.parametrize(("provider", "kind"), URL_CASES)
def test_naming_the_providers_variable_sends_its_key_to_that_url(home, every_url_to, monkeypatch,
                                                                 provider, kind, source):
    url, _ = URLS[provider][kind]
    configured = SETTINGS_SOURCES[source](provider, home, monkeypatch)
    text = model_text(provider, url, every_url_to, named=DEFAULT_KEY_ENV[provider])
    assert received_key(ask(text, configured, every_url_to, provider), provider) == KEY


@pytest.mark.parametrize(("provider", "kind"), URL_CASES)
def test_a_variable_named_for_the_model_is_its_key_wherever_it_points(home, every_url_to, monkeypatch,
                                                                      provider, kind):
    url, _ = URLS[provider][kind]
    monkeypatch.setenv(CUSTOM_VARIABLE, KEY)
    monkeypatch.setenv(DEFAULT_KEY_ENV[provider], "sk-the-providers-own-key-000")
    (home / "config.toml").write_text(f'{provider}_api_key = "sk-config-key-000"\n')
    configured = api_keys(load_settings()).get(provider)
    text = model_text(provider, url, every_url_to, named=CUSTOM_VARIABLE)
    # the named variable, not the provider's key from the config file or the environment
    assert received_key(ask(text, configured, every_url_to, provider), provider) == KEY


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_named_variable_that_is_unset_fails_before_any_request(home, every_url_to, monkeypatch, provider):
    monkeypatch.setenv(DEFAULT_KEY_ENV[provider], KEY)  # present, and still not sent
    text = model_text(provider, "LOOPBACK", every_url_to, named=CUSTOM_VARIABLE)
    with pytest.raises(ProviderError) as caught:
        make_client(parse_model(text), api_key=KEY, **FAST)
    assert caught.value.kind == "missing_key"
    assert str(caught.value).endswith(f": set {CUSTOM_VARIABLE}")
    assert every_url_to.requests == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_official_endpoint_without_any_key_fails_before_any_request(home, every_url_to, provider):
    with pytest.raises(ProviderError) as caught:
        make_client(parse_model(f"{provider}:test-model"), **FAST)
    assert caught.value.kind == "missing_key" and DEFAULT_KEY_ENV[provider] in str(caught.value)
    assert f"{provider}_api_key in the config file" in str(caught.value)
    assert every_url_to.requests == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_settings_key_wins_over_the_providers_variable(home, every_url_to, monkeypatch, provider):
    monkeypatch.setenv(DEFAULT_KEY_ENV[provider], "sk-from-the-environment-000")
    configured = from_config_file(provider, home, monkeypatch)
    request = ask(model_text(provider, None, every_url_to), configured, every_url_to, provider)
    assert received_key(request, provider) == KEY


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_named_variable_survives_the_label_the_run_rebuilds_its_clients_from(provider):
    spec = parse_model(f"{provider}:m@https://llm.corp.example/v1#{CUSTOM_VARIABLE}*2")
    assert spec.api_key_env == CUSTOM_VARIABLE
    assert parse_model(spec.label) == spec.model_copy(update={"weight": 1.0})


def test_the_choice_never_shows_the_key():
    choice = choose_api_key(parse_model("openai:gpt-5"), KEY)
    assert choice.key is not None and choice.key.get_secret_value() == KEY
    assert KEY not in repr(choice) and KEY not in str(choice) and KEY not in choice.model_dump_json()


def test_a_pasted_key_after_the_hash_is_refused_and_not_echoed():
    with pytest.raises(ValueError) as caught:
        parse_model(f"openai:m@https://llm.corp.example/v1#{KEY}")
    assert KEY not in str(caught.value) and "NAME of the environment variable" in str(caught.value)


# ----------------------------------------------------------------------------------------
# The reported case, through the real command line
# ----------------------------------------------------------------------------------------


def test_the_cli_sends_the_config_files_key_to_a_custom_url_only_when_named(tmp_path, home, llm_server):
    """``openai_api_key`` in config.toml and ``-m openai:x@http://127.0.0.1:PORT/v1``: the
    server gets the placeholder; with ``#OPENAI_API_KEY`` it gets the key."""
    (home / "config.toml").write_text(f'openai_api_key = "{KEY}"\n')
    llm_server.respond_with("openai", lambda request: Reply.error(401, "no"))
    env = {**os.environ, "KGEN_HOME": str(home), "COLUMNS": "200"}
    received = []
    for suffix in ("", "#OPENAI_API_KEY"):
        out = subprocess.run(
            [sys.executable, "-m", "kgen.cli", "Triton softmax for H100", "-m",
             f"openai:x@{llm_server.openai_base_url}{suffix}", "--device", "cpu",
             "--kb", str(tmp_path / "kb")],
            capture_output=True, text=True, env=env, timeout=300,
        )
        assert out.returncode == 2, out.stderr
        assert KEY not in out.stdout + out.stderr
        received.append({received_key(r, "openai") for r in llm_server.requests_for("openai")})
        assert received[-1], out.stderr  # the run asked the server before it stopped
    assert received[0] == {PLACEHOLDER_KEY}
    assert received[1] - received[0] == {KEY}
