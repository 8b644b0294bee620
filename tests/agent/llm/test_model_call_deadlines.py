"""Every model call ends by its deadline, whatever the server does: stays silent, trickles its
reply a byte at a time (which no per-read timeout catches), or fails with HTTP 500.

The real ``openai`` and ``anthropic`` SDKs against the scripted loopback server: one call
through a client, runs through ``kgen.generate``, and whole ``kgen`` commands in a subprocess
that must end within their ``--time`` plus one model deadline (plus the CPU verification of a
candidate that started in time), with a clear last line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import scripted_run
from llm_server import Reply, ScriptedLLMServer

import kgen
from kgen.agent.llm.models import parse_model
from kgen.agent.llm.providers import ProviderError, make_client

ROUTES = ["openai", "anthropic"]


def client(server: ScriptedLLMServer, route: str, **options):
    url = server.openai_base_url if route == "openai" else server.anthropic_base_url
    return make_client(parse_model(f"{route}:m@{url}"), **options)


def finishes_within(seconds: float, call):
    """``call()``'s result or error, failing the test if it is still running after ``seconds``
    (a call that never ends must fail the test, not hang it)."""
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as err:  # noqa: BLE001 - re-raised below
            outcome["error"] = err

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def ask(llm) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        llm.complete("s", "u", max_tokens=5, temperature=0)
    return caught.value


@pytest.mark.parametrize("route", ROUTES)
def test_a_silent_server_ends_the_call_at_its_deadline_naming_the_option(llm_server, route):
    llm_server.respond_with(route, lambda request: Reply.silent())
    llm = client(llm_server, route, timeout_s=2, max_retries=3)
    started = time.monotonic()
    error = finishes_within(20, lambda: ask(llm))
    ended = time.monotonic()
    assert 2.0 <= ended - started < 2.9, "the deadline is the whole call's, retries included"
    assert error.kind == "timeout"
    assert str(error).startswith(f"{llm.label} did not answer within 2 s (1 attempt)")
    assert "raise --llm-timeout" in str(error)
    assert len(llm_server.requests) == 1
    # the abandoned call let go of its connection (within the SDK's read timeout, 1 s late)
    deadline = time.monotonic() + 5
    while not llm_server.hangups and time.monotonic() < deadline:
        time.sleep(0.05)
    assert llm_server.hangups and llm_server.hangups[0] - ended < 2.0


@pytest.mark.parametrize("route", ROUTES)
def test_a_trickling_reply_ends_at_the_overall_deadline_not_never(llm_server, route):
    """A byte every 0.2 s keeps every read within the SDK's timeout; only the call's own
    deadline ends it, and the connection is closed then (the server sees the hang-up)."""
    llm_server.respond_with(route, lambda request: Reply.trickle(interval_s=0.2))
    llm = client(llm_server, route, timeout_s=2, max_retries=1)
    started = time.monotonic()
    error = finishes_within(15, lambda: ask(llm))
    ended = time.monotonic()
    assert 2.0 <= ended - started < 2.9
    assert error.kind == "timeout" and "--llm-timeout" in str(error)
    deadline = time.monotonic() + 5
    while not llm_server.hangups and time.monotonic() < deadline:
        time.sleep(0.05)
    assert llm_server.hangups and llm_server.hangups[0] - ended < 1.0, "still reading the trickle"


@pytest.mark.parametrize("route", ROUTES)
def test_retries_fit_within_the_deadline(llm_server, route):
    """A server that fails and asks for a second's patience each time: the retries go on only
    while the call's deadline lasts, not for every retry the option allows."""
    llm_server.respond_with(route, lambda request: Reply.error(500, retry_after_s=1.0))
    llm = client(llm_server, route, timeout_s=2.5, max_retries=5)
    started = time.monotonic()
    error = finishes_within(30, lambda: ask(llm))
    assert 2.5 <= time.monotonic() - started < 3.4
    assert 2 <= len(llm_server.requests) <= 3
    assert error.kind == "timeout"
    assert f"within 2.5 s ({len(llm_server.requests)} attempts): raise --llm-timeout" in str(error)


def test_a_call_ends_when_the_clients_run_time_runs_out_naming_time(llm_server):
    llm_server.respond_with("openai", lambda request: Reply.silent())
    llm = client(llm_server, "openai", timeout_s=60, max_retries=3, not_after=time.monotonic() + 1.5)
    started = time.monotonic()
    error = finishes_within(20, lambda: ask(llm))
    assert 1.4 <= time.monotonic() - started < 2.4
    assert error.kind == "timeout" and "raise --time" in str(error)
    late = ask(llm)  # the run's time is up: the next call is not even sent
    assert "had run out before" in str(late) and len(llm_server.requests) == 1


def test_a_stopping_run_lets_go_of_its_calls_at_once(llm_server):
    """``CallsInFlight.abandon`` (the graph calls it when a run is interrupted or fails): a
    call waiting on a silent server ends now, not at its 60 s deadline."""
    from kgen.agent.llm.model_calls import IN_FLIGHT

    llm_server.respond_with("openai", lambda request: Reply.silent())
    llm = client(llm_server, "openai", timeout_s=60, max_retries=0)
    errors: list[ProviderError] = []
    waiting = threading.Thread(target=lambda: errors.append(ask(llm)), daemon=True)
    waiting.start()
    deadline = time.monotonic() + 10
    while not any(call.owner is llm for call in IN_FLIGHT.snapshot()) and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    assert IN_FLIGHT.abandon([object()]) == 0  # another run's clients: not this call
    assert IN_FLIGHT.abandon([llm]) == 1
    waiting.join(5)
    assert not waiting.is_alive() and time.monotonic() - started < 1.0
    assert "abandoned" in str(errors[0])


# -- through a run: the options as a person sets them ---------------------------------------------


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("KGEN_HOME", str(home))
    for name in list(os.environ):
        if name.startswith("KGEN_") and name != "KGEN_HOME":
            monkeypatch.delenv(name)
    return home


def _problem(tmp_path: Path) -> Path:
    """A problem the knowledge base has no kernel for: every candidate comes from the model."""
    path = tmp_path / "relu_16m.py"
    path.write_text(scripted_run.PROBLEM)
    return path


def _attempts(server: ScriptedLLMServer) -> Counter:
    """Requests by attempt (0 = a call's first request, 1 = its first retry, ...), from the
    retry count both SDKs send with every request."""
    return Counter(int(r.headers["x-stainless-retry-count"]) for r in server.requests)


def test_retries_and_timeout_come_from_the_config_file_and_the_api(tmp_path, llm_server, home):
    (home / "config.toml").write_text("llm_retries = 0\nllm_timeout_s = 30\n")
    llm_server.respond_with("openai", lambda request: Reply.error(500))
    model = f"openai:m@{llm_server.openai_base_url}"
    common = {"problem": _problem(tmp_path), "models": [model], "targets": ["h100"], "budget": 2,
              "generations": 1, "device": "cpu", "kb": str(tmp_path / "kb")}
    with pytest.raises(kgen.KgenUsageError, match=r"HTTP 500 \(1 attempt\)"):
        kgen.generate("Triton ReLU", out=tmp_path / "from_file", **common)
    options = (tmp_path / "from_file" / "run.json").read_text()
    assert '"llm_retries": 0' in options and '"llm_timeout_s": 30.0' in options
    assert _attempts(llm_server) == {0: 2}  # two candidates, one request each, no retry

    with pytest.raises(kgen.KgenUsageError, match=r"HTTP 500 \(3 attempts\)"):
        kgen.generate("Triton ReLU", out=tmp_path / "from_api", llm_retries=2, **common)
    assert _attempts(llm_server) == {0: 2 + 2, 1: 2, 2: 2}  # the API's 2 retries beat the file's 0


@pytest.mark.slow
def test_a_run_ends_its_model_calls_with_its_time_limit(tmp_path, llm_server, home):
    """``--time`` bounds the model calls too: with a 60 s call deadline and 4 s of run time,
    the silent model is given up on about when the run's time (plus its grace) is over."""
    llm_server.respond_with("openai", lambda request: Reply.silent())
    started = time.monotonic()
    with pytest.raises(kgen.KgenUsageError) as caught:
        finishes_within(90, lambda: kgen.generate(
            "Triton ReLU", problem=_problem(tmp_path), models=[f"openai:m@{llm_server.openai_base_url}"],
            targets=["h100"], budget=2, generations=1, device="cpu", kb=str(tmp_path / "kb"),
            out=tmp_path / "run", time_s=4, llm_timeout_s=60))
    took = time.monotonic() - started
    # the calls were cut by the run's time (or, on a slow machine, not even sent after it)
    assert "the run's time limit" in str(caught.value) and "--time" in str(caught.value)
    assert took < 4 + 5 + 15, took  # time, the grace, and starting the run (the knowledge base)
    print(f"silent model, --time 4, --llm-timeout 60: the run ended after {took:.1f} s")


# -- the whole command ----------------------------------------------------------------------------

#: the server's behaviour and the run's --time: a failing model leaves time to verify the
#: knowledge base's kernel, a silent or trickling one (6 s for the spec, 6 s for candidates) not
BEHAVIOURS = {
    "silent": (Reply.silent(), 10),
    "trickle": (Reply.trickle(interval_s=0.5), 10),
    "http500": (Reply.error(500), 90),  # room for the CPU verification on a slow machine
}


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", list(BEHAVIOURS))
def test_kgen_against_a_misbehaving_server_ends_within_its_time(tmp_path, llm_server, behaviour):
    """`kgen REQUEST -m MODEL --time T --llm-timeout 6 --llm-retries 1` on a CPU, the model at a
    server that never answers, trickles, or fails: the run ends within its time, its grace
    and one model deadline (plus a CPU verification that started in time), saying why."""
    reply, time_s = BEHAVIOURS[behaviour]
    llm_timeout_s = 6
    llm_server.respond_with("openai", lambda request: reply)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_") and not k.endswith("_API_KEY")}
    env.update({"KGEN_HOME": str(home), "COLUMNS": "200"})
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "kgen.cli", "Triton softmax for H100", "-m", f"openai:m@{llm_server.openai_base_url}",
         "--device", "cpu", "--kb", str(tmp_path / "kb"), "--time", str(time_s), "--llm-timeout",
         str(llm_timeout_s), "--llm-retries", "1"],
        capture_output=True, text=True, env=env, timeout=300)
    took = time.monotonic() - started
    print(f"{behaviour}: exit {out.returncode} after {took:.1f} s")
    assert "Traceback" not in out.stderr
    if behaviour == "http500":
        # calls fail fast (each tried twice: --llm-retries 1), so the known kernel is verified on
        # the CPU: a kernel, but none of the model's (exit 3), and why
        calls = _attempts(llm_server)[0]
        assert calls >= 2 and _attempts(llm_server) == {0: calls, 1: calls}
        assert out.returncode == 3, out.stdout + out.stderr
        assert "HTTP 500 (2 attempts)" in out.stdout and "no model produced code" in out.stdout
        assert took < time_s + llm_timeout_s + 120, "the CPU verification of the known kernel"
        return
    # the spec reading and the candidates waited on the model until their deadline: nothing in
    # time to verify, so one error line that names the option to raise
    assert out.returncode == 2, out.stdout + out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no model returned code"), out.stderr
    assert "did not answer within 6 s (1 attempt): raise --llm-timeout" in last or "raise --time" in last
    # + starting kgen and its knowledge base (seconds; more on a busy 2-core machine); without
    # the deadline a trickling server held the run for good
    assert took < time_s + 5 + llm_timeout_s + 30, out.stderr
