"""Agent test fixtures: a scripted loopback LLM server, and no real credentials in sight."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import scripted_run
from llm_server import ScriptedLLMServer

# Variables the SDKs or kgen would read; a developer's real key must never reach a test server
# and a test must never pass only because one happens to be set.
_LLM_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CUSTOM_HEADERS",
)


@pytest.fixture(autouse=True)
def _no_llm_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _LLM_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def llm_server() -> Iterator[ScriptedLLMServer]:
    """A fresh server per test: script replies with ``.script(route, [...])``."""
    with ScriptedLLMServer() as server:
        yield server


@pytest.fixture
def home(tmp_path, monkeypatch, llm_server) -> Path:
    """$KGEN_HOME with a config naming the scripted server's models (a test file may define
    its own ``home``, e.g. an empty one)."""
    home = tmp_path / "home"
    scripted_run.write_config(home, llm_server)
    monkeypatch.setenv("KGEN_HOME", str(home))
    for name in ("KGEN_MODELS", "KGEN_KB", "KGEN_BUDGET", "KGEN_TARGETS", "KGEN_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    return home
