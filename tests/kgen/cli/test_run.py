"""`kgen "Triton RMSNorm backward for H100"` (the README's main command), `kgen runs`,
`kgen resume`, and the one-line errors a person gets for bad input, on a fresh $KGEN_HOME."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

MAIN_REQUEST = "Triton RMSNorm backward for H100"


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


def kgen(home: Path, *args: str, timeout: float = 600, columns: int = 120) -> subprocess.CompletedProcess:
    """The command as a person without keys or kgen settings runs it."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("KGEN_") and not name.endswith("_API_KEY")}
    env.update({"KGEN_HOME": str(home), "COLUMNS": str(columns)})
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def runs_left(home: Path) -> list[str]:
    runs = home / "runs"
    return sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []


def assert_one_line_usage_error(out: subprocess.CompletedProcess, message: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr
    assert message in errors[0], out.stderr


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_main_command_offline_on_a_cpu_then_runs_and_resume(home):
    import torch

    from kgen.evals.problem.catalog import resolve_problem
    from kgen.knowledge_base.store import KnowledgeBase, where_equal

    first = kgen(home, MAIN_REQUEST)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stderr and "error:" not in first.stderr
    assert len([line for line in first.stderr.splitlines() if "offline mode:" in line]) == 1
    stdout = first.stdout
    assert re.search(r"^h100 +g\d-c\d\d +", stdout, re.M), stdout
    assert re.search(r"h100 cross-compile: .*on h100: \d+ registers/thread, \d+ spills", stdout)
    assert "timings need a GPU" in stdout and "h100: not timed: no GPU here" in stdout
    run_dir = Path(re.search(r"^run directory: (.+)$", stdout, re.M).group(1).strip())
    assert run_dir.parent == (home / "runs").resolve()

    for name in ("summary.json", "best_h100.py", "spec.json", "events.log", "run.json"):
        assert (run_dir / name).is_file(), name
    evals = sorted((run_dir / "candidates").glob("*/eval.json"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(evals) == summary["candidates"] >= 2
    assert summary["problem"] == "rmsnorm_backward" and summary["device"] == "cpu"
    assert json.loads((run_dir / "spec.json").read_text())["targets"] == ["h100"]
    assert "run finished" in (run_dir / "events.log").read_text()
    best = summary["best"]["h100"]
    assert best["evidence"]["trials"] >= 3 and best["time_ms"] is None
    passed = {json.loads(p.read_text())["verdict"] for p in evals}
    assert passed <= {"passed", "rejected"} and "passed" in passed

    # the best kernel is a module a person can import and use like the problem's Model
    module = load_module(run_dir / "best_h100.py", "best_h100")
    reference = load_module(resolve_problem("rmsnorm_backward").path, "rmsnorm_backward_problem")
    torch.manual_seed(0)
    x, grad_out = torch.randn(37, 96), torch.randn(37, 96)
    weight = 1.0 + 0.1 * torch.randn(96)
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1) + 1e-6)
    got = module.ModelNew()(grad_out, x, weight, rstd)
    want = reference.Model()(grad_out, x, weight, rstd)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)

    # the seed kernel was found again: a duplicate, not a second entry
    assert best["knowledge_base"].startswith("duplicate ")
    stored = KnowledgeBase.open(str(home / "kb")).kernels(
        where_equal(problem="rmsnorm_backward", target="h100", backend="triton"))
    assert len(stored) == 1

    listed = kgen(home, "runs")
    assert listed.returncode == 0, listed.stderr
    assert run_dir.name in listed.stdout and MAIN_REQUEST in listed.stdout
    assert "1 of 1 target verified" in listed.stdout

    started = time.monotonic()
    resumed = kgen(home, "resume", run_dir.name[:15])
    assert resumed.returncode == 0, resumed.stderr
    assert time.monotonic() - started < 60  # nothing is evaluated again
    assert resumed.stdout == first.stdout
    assert sorted((run_dir / "candidates").glob("*/eval.json")) == evals

    # at 80 columns the summary and the list of runs fit, but for a path a line ends in (kept
    # whole to be copied); the phase table holds no phase that took no time
    narrow = kgen(home, "resume", run_dir.name, columns=80)
    for out in (narrow, kgen(home, "runs", columns=80)):
        assert out.returncode == 0, out.stderr
        wide = [line for line in out.stdout.splitlines() if len(line) > 80]
        assert all(str(run_dir.parent) in line for line in wide), wide
    phases = narrow.stdout.split("evaluation time by phase")[1]
    assert not re.search(r"^\S+ +0\.00 ", phases, re.M), phases


@pytest.mark.slow
def test_a_runs_policies_judge_every_candidate(home, tmp_path):
    """`kgen "..." --precision tf32 --torch-ops library`: run.json keeps the policies, and every
    evaluation was judged under them (the eval.json's ``policies``), not the catalog's strict."""
    run_dir = tmp_path / "run"
    out = kgen(home, "Triton softmax for H100", "--device", "cpu", "--precision", "tf32", "--torch-ops", "library",
               "--no-persist", "--out", str(run_dir))
    assert out.returncode == 0, out.stdout + out.stderr
    options = json.loads((run_dir / "run.json").read_text())["options"]
    assert (options["precision"], options["torch_ops"]) == ("tf32", "library")
    evals = sorted((run_dir / "candidates").glob("*/eval.json"))
    assert evals
    for path in evals:
        assert json.loads(path.read_text())["policies"] == {"precision": "tf32", "torch_ops": "library"}, path


def test_a_bad_policy_is_one_error_line_exit_2_and_leaves_no_run(home):
    out = kgen(home, "Triton softmax for H100", "--torch-ops", "lenient", timeout=300)
    assert_one_line_usage_error(out, "torch_ops: expected one of strict, library, got 'lenient'")
    assert runs_left(home) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([""], "empty request"),
        (["softmax for H900"], "unknown hardware target 'H900'"),
        (["Triton softmax", "--target", "h900"], "unknown hardware target 'h900'"),
        (["Triton softmax for H100", "-m", "nonsense"], "bad model 'nonsense'"),
        (["Triton softmax for H100", "--problem", "missing.py"], "problem file not found: missing.py"),
        (["resume", "nope"], "kgen runs"),
        (["Triton softmax for H100", "--kb", "http://127.0.0.1:9"], "127.0.0.1:9"),
    ],
    ids=["empty", "unknown-target-in-request", "unknown-target-flag", "bad-model",
         "missing-problem", "unknown-run", "unreachable-kb"],
)
def test_bad_input_is_one_error_line_exit_2_and_leaves_no_run(home, args, message):
    out = kgen(home, *args, timeout=300)
    assert_one_line_usage_error(out, message)
    assert runs_left(home) == []


def test_a_request_outside_the_catalog_names_the_nearest_problems(home):
    from kgen.evals.problem.catalog import catalog

    out = kgen(home, "make me a sandwich", timeout=300)
    assert_one_line_usage_error(out, "no catalog problem matches 'make me a sandwich'")
    nearest = [name.strip() for name in out.stderr.split("nearest:", 1)[1].split(";", 1)[0].split(",")]
    assert nearest and set(nearest) <= {info.name for info in catalog()}
    assert runs_left(home) == []


def test_resume_of_a_folder_that_is_no_run_is_a_usage_error(home, tmp_path):
    (tmp_path / "notes").mkdir()
    out = kgen(home, "resume", str(tmp_path / "notes"), timeout=300)
    assert_one_line_usage_error(out, "no run")


def test_help_shows_the_main_command_and_run_help_explains_offline_mode(home):
    top = kgen(home, "--help", timeout=120)
    assert top.returncode == 0, top.stderr
    assert f'kgen "{MAIN_REQUEST}"' in top.stdout
    for command in ("run", "resume", "runs"):
        assert re.search(rf"│ {command} ", top.stdout), command
    run = kgen(home, "run", "--help", timeout=120)
    assert run.returncode == 0, run.stderr
    folded = " ".join(run.stdout.split())  # the description folds at the terminal's width
    assert "runs offline: it takes the knowledge base's best kernel for the request and tunes its parameters" in folded
    assert not home.exists()  # asking for help creates nothing


@pytest.mark.parametrize(("no_model_code", "with_kernel", "code"), [
    (False, True, 0), (True, True, 3), (True, False, 1), (False, False, 1),
], ids=["models wrote code", "only the knowledge base's kernel", "no kernel, no code", "no kernel"])
def test_the_exit_status_says_when_no_model_produced_code(no_model_code, with_kernel, code):
    """Issue 13 item 8: a run whose every model call failed (HTTP 500) exited 0 with the
    knowledge base's kernel and only a note."""
    import typer
    from rich.console import Console

    import kgen.cli.run as run_cli
    from kgen.agent.runs.summary import BestKernel, Evidence, RunSummary

    evidence = Evidence(device="cpu", trials=3, seeds=[1], shapes=[{"n": 4}], distributions=["normal"],
                        checks_passed=[])
    best = {"h100": BestKernel(target="h100", candidate="g0-c00", module="best_h100.py", origin="knowledge_base",
                               evidence=evidence)} if with_kernel else {}
    summary = RunSummary(run_id="r", run_dir="/runs/r", request="softmax", problem="softmax", backend="triton",
                         targets=["h100"], mode="models: openai:x", device="cpu", best=best,
                         no_model_code=no_model_code)
    printed = Console(record=True, width=200)
    original, run_cli.console = run_cli.console, printed
    try:
        if code:
            with pytest.raises(typer.Exit) as exit_:
                run_cli._report(summary, json_output=False)
            assert exit_.value.exit_code == code
        else:
            run_cli._report(summary, json_output=False)
    finally:
        run_cli.console = original
    assert ("no model produced code" in printed.export_text()) is no_model_code
