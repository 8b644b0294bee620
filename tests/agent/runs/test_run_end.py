"""A run that ends without its summary says why (``stopped.json``, ``events.log``), and `kgen runs`
offers `kgen resume` only where resuming can take the run further (``agent/runs/run_end.py``).

The model servers are real SDK clients against loopback ports: an unreachable server is a port
where nothing listens; an interrupt is the real ``KeyboardInterrupt`` a run's progress line
raises (as a stopping `kgen solve` stops its runs).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import kgen
from kgen.agent.runs.run_end import STOP_FILE, standing
from kgen.core.text import counted


def closed_port() -> int:
    """A port where nothing listens: bound, then let go."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _unreachable_run(runs: Path, model: str, retries: int) -> Path:
    with pytest.raises(kgen.KgenUsageError, match="kept for inspection") as failed:
        kgen.generate("Triton softmax for H100", models=[model], device="cpu", out=runs / "unreachable",
                      kb=str(runs.parent / "kb"), llm_retries=retries)
    assert "cannot reach" in str(failed.value)
    return runs / "unreachable"


@pytest.mark.parametrize("provider, retries", [("openai", 0), ("anthropic", 1)])
def test_an_unreachable_server_is_recorded_and_not_offered_for_resuming(tmp_path, home, provider, retries):
    port = closed_port()
    url = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    model = f"{provider}:m@{url}"
    run = _unreachable_run(tmp_path / "runs", model, retries)
    stop = json.loads((run / STOP_FILE).read_text())
    assert stop["status"] == "failed" and stop["error_kind"] == "unreachable"
    assert stop["model"] == model and stop["attempts"] == retries + 1 and stop["models"] == [model]
    assert str(port) in stop["error"] and stop["candidates"] == 0
    log = (run / "events.log").read_text()
    assert f"stopped (failed, RunError): cannot reach {model}" in log and f"{counted(retries + 1, 'attempt')}" in log
    where = standing(run, "the-run")
    assert (where.state, where.resumable) == ("failed", False)
    assert str(port) in where.reason and "run the request again" in where.hint and "kgen resume" not in where.hint


def _interrupted_run(out: Path, kb: Path) -> Path:
    def stop_after_the_spec(line: str) -> None:
        if line.startswith("spec:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kgen.generate("Triton softmax for H100", device="cpu", out=out, kb=str(kb), progress=stop_after_the_spec)
    return out


def test_kgen_runs_offers_resume_only_where_it_helps(tmp_path, home):
    """In one runs folder: a run interrupted after its spec (a checkpoint: `kgen resume` it), a
    run whose model server was unreachable (its error, no resume), and a run killed before its
    search began (no record, no checkpoint: run it again)."""
    runs = home / "runs"
    interrupted = _interrupted_run(runs / "20260101-000000-aaaaaa", tmp_path / "kb")
    stop = json.loads((interrupted / STOP_FILE).read_text())
    assert stop["status"] == "interrupted" and stop["error_type"] == "KeyboardInterrupt"
    assert "stopped (interrupted, KeyboardInterrupt)" in (interrupted / "events.log").read_text()
    failed = _unreachable_run(runs, f"openai:m@http://127.0.0.1:{closed_port()}/v1", 0)
    failed.rename(runs / "20260101-000001-bbbbbb")
    killed = runs / "20260101-000002-cccccc"
    killed.mkdir()
    (killed / "run.json").write_text((interrupted / "run.json").read_text())

    env = {**os.environ, "KGEN_HOME": str(home), "COLUMNS": "400"}
    listed = subprocess.run([sys.executable, "-m", "kgen.cli", "runs"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    lines = {word: line for line in listed.stdout.splitlines() for word in line.split() if word.startswith("20260101-")}
    assert "interrupted: kgen resume 20260101-000000-aaaaaa" in lines["20260101-000000-aaaaaa"]
    assert "failed: cannot reach" in lines["20260101-000001-bbbbbb"]
    assert "run the request again" in lines["20260101-000001-bbbbbb"]
    assert "kgen resume" not in lines["20260101-000001-bbbbbb"]
    assert "before its search began" in lines["20260101-000002-cccccc"]
    assert "kgen resume" not in lines["20260101-000002-cccccc"]

    # `kgen report` of each says what `kgen runs` says, not "kgen resume continues it" for all three
    def banner(run: Path) -> str:
        reported = subprocess.run([sys.executable, "-m", "kgen.cli", "report", str(run)], capture_output=True,
                                  text=True, env=env, timeout=120)
        assert reported.returncode == 0, reported.stderr
        page = (run / "report.html").read_text()
        return page[page.index('id="unfinished"'):].split("</p>", 1)[0]

    said = banner(interrupted)
    assert "was interrupted" in said and "<code>kgen resume 20260101-000000-aaaaaa</code>" in said
    said = banner(runs / "20260101-000001-bbbbbb")
    assert "failed" in said and "Why: cannot reach openai:m@http://127.0.0.1:" in said
    assert "The model call: openai:m@" in said and "(unreachable, 1 request sent)" in said
    assert "run the request again" in said and "kgen resume" not in said
    said = banner(killed)
    assert "before its search began" in said and "kgen resume" not in said


@pytest.mark.slow
def test_a_run_that_fails_after_its_first_candidate_is_offered_for_resuming_and_resumes(tmp_path, llm_server,
                                                                                        home):
    """The server answers the first call with a kernel, then refuses the key: the run fails with a
    candidate kept, so `kgen resume` is offered (after fixing the cause), and once the server
    answers again the resumed run ends with that candidate verified, not paid for twice."""
    import scripted_run
    from llm_server import Reply

    from kgen.agent.runs.start import resume_run
    from kgen.api import api_keys
    from kgen.core.settings import load_settings

    problem = tmp_path / "relu.py"
    problem.write_text(scripted_run.PROBLEM)
    answers = iter([Reply.text(scripted_run.fenced(scripted_run.FAST))])
    llm_server.respond_with("openai", lambda request: next(answers, Reply.error(401, "invalid api key")))
    out = tmp_path / "run"
    options = dict(problem=problem, models=[scripted_run.models(llm_server)[0]], targets=["h100"], budget=2,
                   generations=2, device="cpu", kb=str(tmp_path / "kb"), llm_retries=0, persist=False)
    with pytest.raises(kgen.KgenUsageError, match="refused the API key"):
        kgen.generate("Triton ReLU for H100", out=out, **options)
    stop = json.loads((out / STOP_FILE).read_text())
    assert stop["status"] == "failed" and stop["error_kind"] == "auth" and stop["candidates"] >= 1
    where = standing(out, "the-run")
    assert (where.state, where.resumable) == ("failed", True)
    assert "refused the API key" in where.reason and "kgen resume the-run" in where.hint

    paid = len(llm_server.requests)
    llm_server.respond_with("openai", lambda request: Reply.text(scripted_run.fenced(scripted_run.FAST)))
    summary = resume_run(str(out), runs_dir=tmp_path / "runs", api_keys=api_keys(load_settings({})))
    assert summary.best and not (out / STOP_FILE).exists()
    assert standing(out).state == "finished"
    assert len(llm_server.requests) - paid <= 1  # the kept candidate's reply was not asked for again
