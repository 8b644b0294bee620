"""`kgen doctor` asks each configured model's endpoint, through the real SDKs, against loopback
servers: nothing listening, a rejected key, no models list, a list without the model, a
healthy server, and servers that never answer (which must not hold doctor past its deadline)."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import time

import pytest
from models_list_server import ModelsListServer, Reply, Trickle
from rich.console import Console

from kgen.cli.doctor import EXIT_MODEL_UNUSABLE, collect_diagnosis, exit_status, render_diagnosis
from kgen.core.settings import load_settings

SECRET = "sk-test-Zq8vTopSecretValue"
DEADLINE_S = 1.5


@pytest.fixture
def server():
    with ModelsListServer() as server:
        yield server


def closed_port() -> int:
    """A port where nothing listens: bound, then let go."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def diagnose(*models: str, offline: bool = False):
    return collect_diagnosis(load_settings({"models": list(models)}), offline=offline,
                             endpoint_deadline_s=DEADLINE_S)


def rendered(diagnosis) -> str:
    buffer = io.StringIO()
    render_diagnosis(diagnosis, Console(file=buffer, width=300))
    return buffer.getvalue()


def only(diagnosis):
    assert len(diagnosis.endpoints) == 1
    return diagnosis.endpoints[0]


def test_a_healthy_server_that_lists_the_model_is_usable_with_its_latency(home, server):
    server.models = ["qwen2.5-coder", "llama"]
    model = f"openai:qwen2.5-coder@{server.openai_base_url}"
    d = diagnose(model)
    check = only(d)
    assert (check.model, check.status, check.usable, check.listed) == (model, "ok", True, True)
    assert check.endpoint == server.openai_base_url
    assert check.latency_ms is not None and 0 < check.latency_ms < DEADLINE_S * 1000
    assert f"reachable in {check.latency_ms:.0f} ms" in check.detail
    assert len(server.models_requests) == 1 and server.requests == []  # the list sufficed: no tokens spent
    assert d.unusable_models == [] and exit_status(d) == 0
    assert not any(model in issue for issue in d.issues)
    assert "model endpoints" in rendered(d) and "the server lists qwen2.5-coder" in rendered(d)


def test_anthropic_protocol_and_a_dated_snapshot_in_the_list(home, server):
    server.models = ["claude-sonnet-4-5-20250929"]
    d = diagnose(f"anthropic:claude-sonnet-4-5@{server.anthropic_base_url}")
    assert (only(d).status, only(d).listed) == ("ok", True)
    assert "anthropic-version" in server.models_requests[0].headers


def test_nothing_listening_is_unreachable_in_plain_words_and_fails_the_exit_status(home):
    port = closed_port()
    model = f"openai:qwen@http://127.0.0.1:{port}/v1"
    d = diagnose(model)
    check = only(d)
    assert (check.status, check.usable, check.latency_ms) == ("unreachable", False, None)
    assert f"connection refused: nothing listens at 127.0.0.1:{port}" in check.detail
    assert d.unusable_models == [model] and exit_status(d) == EXIT_MODEL_UNUSABLE == 1
    assert any(issue.startswith(f"model {model}: unreachable: connection refused") for issue in d.issues)


def test_a_host_name_that_does_not_resolve_is_said_to_be_dns(home, monkeypatch):
    def no_such_host(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    check = only(diagnose("openai:qwen@http://llm.nowhere.invalid:8000/v1"))
    assert check.status == "unreachable"
    assert "the host name llm.nowhere.invalid does not resolve (DNS lookup failed)" in check.detail


def test_a_rejected_key_says_so_names_its_source_and_never_shows_it(home, server, monkeypatch):
    monkeypatch.setenv("CORP_LLM_KEY", SECRET)
    server.script_models([Reply.error(401, f"Incorrect API key provided: {SECRET}")])
    model = f"openai:qwen@{server.openai_base_url}#CORP_LLM_KEY"
    d = diagnose(model)
    check = only(d)
    assert (check.status, check.usable) == ("key rejected", False)
    assert "key rejected (HTTP 401" in check.detail and "$CORP_LLM_KEY" in check.detail
    # the key choose_api_key picked went there, and nowhere into the report
    assert server.models_requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in rendered(d) and SECRET not in d.model_dump_json()
    assert exit_status(d) == 1


def test_a_key_rejected_from_the_config_file_names_the_config_file(home, server):
    (home / "config.toml").write_text(f"openai_api_key = '{SECRET}'\n")
    server.script_models([Reply.error(403, "forbidden")])  # 403 on the list: the completion decides
    server.script("openai", [Reply.error(403, "forbidden")])
    check = only(diagnose(f"openai:qwen@{server.openai_base_url}#OPENAI_API_KEY"))
    assert check.status == "key rejected" and "HTTP 403" in check.detail
    assert f"openai_api_key in the config file {home / 'config.toml'}" in check.detail


def test_a_server_without_a_models_list_is_asked_for_one_token(home, server):
    server.script("openai", [Reply.text("O", input_tokens=3, output_tokens=1)])
    d = diagnose(f"openai:qwen@{server.openai_base_url}")
    check = only(d)
    assert (check.status, check.usable, check.listed) == ("ok", True, None)
    assert "one-token completion" in check.detail and check.latency_ms is not None
    [completion] = server.requests_for("openai")
    assert completion.model == "qwen" and completion.body["max_tokens"] == 1
    assert exit_status(d) == 0


def test_a_list_without_the_model_is_reported_and_unusable(home, server):
    server.models = ["llama-3.1-8b", "mistral-7b"]
    server.script("openai", [Reply.error(404, "The model `qwen` does not exist.")])
    d = diagnose(f"openai:qwen@{server.openai_base_url}")
    check = only(d)
    assert (check.status, check.usable, check.listed) == ("model not found", False, False)
    assert "does not serve qwen" in check.detail and "llama-3.1-8b, mistral-7b" in check.detail
    assert exit_status(d) == 1


def test_a_model_missing_from_the_list_that_still_answers_is_usable(home, server):
    server.models = ["served-name"]  # an alias the list does not show
    server.script("openai", [Reply.text("O")])
    check = only(diagnose(f"openai:alias@{server.openai_base_url}"))
    assert (check.status, check.usable, check.listed) == ("ok", True, False)
    assert "not in the server's models list" in check.detail


@pytest.mark.parametrize("hang", ["list", "completion", "trickle"])
def test_a_server_that_never_answers_does_not_hold_doctor_past_its_deadline(home, server, hang):
    import anthropic  # noqa: F401 - imported here, so the time measured is the network's
    import openai  # noqa: F401

    if hang == "list":
        server.script_models([Reply.hang(60)])
    elif hang == "completion":
        server.script("openai", [Reply.hang(60)])  # no models list, then a completion that hangs
    else:
        server.script_models([Trickle(0.2)])  # a byte at a time: no per-read timeout fires
    settings = load_settings({"models": [f"openai:qwen@{server.openai_base_url}"]})
    started = time.monotonic()
    d = collect_diagnosis(settings, endpoint_deadline_s=DEADLINE_S)
    elapsed = time.monotonic() - started
    check = only(d)
    assert check.status == "timeout" and check.usable is False
    assert f"no answer from {server.openai_base_url} within {DEADLINE_S:g} s (timed out)" in check.detail
    assert elapsed < DEADLINE_S + 2.0, elapsed  # the deadline, the join's grace, doctor's other probes
    assert exit_status(d) == 1


def test_endpoints_are_asked_in_parallel(home):
    import openai  # noqa: F401

    with ModelsListServer() as a, ModelsListServer() as b, ModelsListServer() as c:
        for slow in (a, b, c):
            slow.script_models([Reply.hang(60)])
        started = time.monotonic()
        d = diagnose(*(f"openai:m@{s.openai_base_url}" for s in (a, b, c)))
        elapsed = time.monotonic() - started
    assert [check.status for check in d.endpoints] == ["timeout"] * 3
    assert elapsed < 2 * DEADLINE_S, elapsed


def test_one_request_per_endpoint_and_model_whatever_the_weights(home, server):
    server.models = ["m"]
    d = diagnose(f"openai:m@{server.openai_base_url}*2", f"openai:m@{server.openai_base_url}")
    assert [check.status for check in d.endpoints] == ["ok", "ok"]
    assert [check.model for check in d.endpoints] == [f"openai:m@{server.openai_base_url}*2",
                                                       f"openai:m@{server.openai_base_url}"]
    assert len(server.models_requests) == 1


def test_offline_asks_no_endpoint_but_still_knows_a_model_without_key(home, server):
    d = diagnose(f"openai:m@{server.openai_base_url}", "anthropic:claude-sonnet-4-5", offline=True)
    local, hosted = d.endpoints
    assert (local.status, local.usable) == ("not checked", None)
    assert (hosted.status, hosted.usable) == ("no key", False)
    assert server.models_requests == [] and server.requests == []
    assert d.unusable_models == ["anthropic:claude-sonnet-4-5"] and exit_status(d) == 1


def test_a_malformed_model_is_unusable_without_a_second_issue_line(home):
    d = diagnose("gpt-5", offline=True)
    assert only(d).status == "bad model" and d.unusable_models == ["gpt-5"]
    assert sum("bad model 'gpt-5'" in issue for issue in d.issues) == 1


def test_no_models_no_endpoints_and_exit_status_zero(home):
    d = collect_diagnosis(load_settings())
    assert d.endpoints == [] and exit_status(d) == 0


# --------------------------------------------------------------------------------------
# `kgen doctor` on the command line
# --------------------------------------------------------------------------------------


def kgen(home, *args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("KGEN_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, timeout=120,
        env={**clean, "KGEN_HOME": str(home), "COLUMNS": "250", **env},
    )


def test_kgen_doctor_reports_each_endpoint(home, server):
    server.models = ["qwen"]
    port = closed_port()
    out = kgen(home, "doctor", KGEN_MODELS=f"openai:qwen@{server.openai_base_url},openai:qwen@http://127.0.0.1:{port}/v1")
    assert "Traceback" not in out.stderr
    assert "the server lists qwen" in out.stdout
    assert f"connection refused: nothing listens at 127.0.0.1:{port}" in out.stdout


def test_kgen_doctor_exits_1_on_an_unusable_model_and_0_when_all_are_usable(home, server):
    server.models = ["qwen"]
    good = kgen(home, "doctor", KGEN_MODELS=f"openai:qwen@{server.openai_base_url}")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = kgen(home, "doctor", "--json", KGEN_MODELS=f"openai:qwen@http://127.0.0.1:{closed_port()}/v1")
    assert bad.returncode == EXIT_MODEL_UNUSABLE, bad.stdout + bad.stderr
    assert '"status": "unreachable"' in bad.stdout


def test_kgen_doctor_offline_contacts_nothing(home, server):
    out = kgen(home, "doctor", "--offline", KGEN_MODELS=f"openai:qwen@{server.openai_base_url}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not checked (offline)" in out.stdout
    assert server.models_requests == [] and server.requests == []
    help_text = kgen(home, "doctor", "--help").stdout
    assert "--offline" in help_text and "exit" in help_text.lower()
