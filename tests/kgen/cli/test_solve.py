"""`kgen solve SUITE_DIR` as a person runs it: the table at the end, exit codes, resuming.

The suite runner itself (parallel CPU runs, resume rules, scripted models) is tested in
tests/agent/runs/test_suite_runs.py; here the command: its flags, what it prints, what it exits.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import stderr_until
from llm_server import Reply, ScriptedLLMServer
from scripted_run import OPENAI_KEY, fenced

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SUITE = FIXTURES / "suite_level1"
LEVEL1 = FIXTURES / "kernelbench" / "level1"  # all 100 unmodified KernelBench level-1 files


def kgen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def kgen_80(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """The command in a console 80 wide (stdout a pipe, as `kgen ... > file` runs), from ``cwd``."""
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "80", **env}, cwd=cwd)


def too_wide(text: str, width: int = 80) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def first_words(text: str) -> set[str]:
    """The first word of each line that starts with one (a table's first column)."""
    return {line.split()[0] for line in text.splitlines() if line[:1].strip()}


def test_help_lists_the_suite_flags_and_the_run_flags():
    out = kgen("solve", "--help")
    assert out.returncode == 0
    for flag in ("--out", "--jobs", "--only", "--model", "--budget", "--islands", "--plateau", "--device"):
        assert flag in out.stdout, flag
    assert "--problem " not in out.stdout  # each problem file is the suite's


def test_a_missing_folder_and_a_bad_option_are_one_line_errors(tmp_path, home):
    out = kgen("solve", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "suite folder not found" in out.stderr and "Traceback" not in out.stderr
    out = kgen("solve", str(SUITE), "--budget", "0", "--out", str(tmp_path / "s"))
    assert out.returncode == 2 and "budget" in out.stderr and "Traceback" not in out.stderr


def test_offline_without_known_kernels_every_problem_is_a_failed_row(tmp_path, home):
    """Offline, a problem needs a library kernel that computes its reference: none here, so the
    suite says so up front, starts no run, the table counts every problem with its reason, and
    the exit code is 1."""
    out_dir = tmp_path / "suite"
    out = kgen("solve", str(SUITE), "--only", "19_ReLU", "--only", "21_Sigmoid", "--device", "cpu",
               "--out", str(out_dir), "--kb", str(tmp_path / "kb"))
    assert out.returncode == 1, out.stderr
    assert "fast_0" in out.stdout or "fast_p" in out.stdout
    assert "index.html" in out.stdout
    state = json.loads((out_dir / "suite.json").read_text())
    statuses = {p["name"]: p["status"] for p in state["problems"]}
    assert statuses["19_ReLU"] == statuses["21_Sigmoid"] == "unserved"
    assert "the library can serve 0 of 2 problems" in out.stdout + out.stderr
    assert all(p["exit_reason"].startswith("no triton kernel in the library") for p in state["problems"]
               if p["status"] == "unserved")
    assert not (out_dir / "runs").exists()
    table = (out_dir / "table" / "suite.md").read_text()
    assert "19_ReLU" in table and "26_GELU_" in table  # every problem of the folder is a row


def test_only_prints_the_selected_rows_at_80_columns_and_they_decide_the_exit_code(tmp_path, home):
    """`--only 19_ReLU` over KernelBench level 1 printed a 146-column table of all 100 rows. The
    table shows what was selected, says in one line what was not, and fits 80 columns; nothing
    selected was verified, so 1."""
    out = kgen_80("solve", str(LEVEL1), "--only", "19_ReLU", "--only", "21_Sigmoid", "--device", "cpu",
                  "--out", "suite", "--kb", "kb", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert too_wide(out.stdout) == [], out.stdout
    listed = {word for word in first_words(out.stdout) if re.match(r"\d+_", word)}  # KernelBench names
    assert listed == {"19_ReLU", "21_Sigmoid"}, out.stdout
    said = " ".join(out.stdout.split())  # the lines under the table wrap at spaces to the width
    assert "98 other problems of the suite were not selected" in said
    assert "0 of 2 selected problems correct" in said
    assert "0.00" not in said.replace("fast_0 0.00", "")  # nothing timed: unmeasured, never 0.00
    help_words = [word for word in kgen_80("solve", "--help").stdout.split() if word != "│"]
    assert "the table shows the selected problems and they decide the exit code" in " ".join(help_words)


def test_only_with_a_name_short_of_its_stem_suggests_that_problem_first(tmp_path, home):
    """`--only 36_RMSNorm` listed the suite's first 8 problems instead of 36_RMSNorm_."""
    out = kgen("solve", str(LEVEL1), "--only", "36_RMSNorm", "--device", "cpu", "--out", str(tmp_path / "s"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no problem named '36_RMSNorm' in the suite; did you mean '36_RMSNorm_'" in out.stderr
    assert "1_Square_matrix_multiplication_" not in out.stderr


@pytest.fixture
def model() -> ScriptedLLMServer:
    """A model that answers every prompt with kgen's solution for 19_ReLU."""
    solution = (FIXTURES / "kernelbench_solutions" / "level1_19_ReLU.py").read_text()
    with ScriptedLLMServer() as server:
        server.respond_with("openai", lambda request: Reply.text(fenced(solution)))
        yield server


def test_every_selected_problem_verified_exits_0_and_markdown_is_all_of_stdout(tmp_path, home, model):
    """`--only` with every selected problem verified exited 1 ("1 of 5 correct"); and `--markdown
    > file` put the table:/reports: lines into the markdown."""
    args = ("solve", str(SUITE), "--only", "19_ReLU", "-m", f"openai:gpt-test@{model.openai_base_url}",
            "--budget", "1", "--device", "cpu", "--no-persist", "--out", "suite", "--kb", "kb")
    out = kgen_80(*args, cwd=tmp_path, OPENAI_API_KEY=OPENAI_KEY)
    assert out.returncode == 0, out.stdout + out.stderr
    assert too_wide(out.stdout) == [], out.stdout
    said = " ".join(out.stdout.split())
    assert "1 of 1 selected problem correct" in said
    assert "4 other problems of the suite were not selected" in said
    assert "fast_1 n/a" in said and "(n/a: nothing timed)" in said
    again = kgen_80(*args, "--markdown", cwd=tmp_path, OPENAI_API_KEY=OPENAI_KEY)  # the finished problem is kept
    assert again.returncode == 0, again.stdout + again.stderr
    markdown = (tmp_path / "suite" / "table" / "suite.md").read_text()
    assert again.stdout.rstrip("\n") == markdown.rstrip("\n")
    assert "table: " in again.stderr and "reports: " in again.stderr


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals as a terminal sends them")
def test_ctrl_c_says_the_whole_command_that_continues_on_one_line(tmp_path, home):
    """After Ctrl-C the hint dropped --only (it would have run every problem) and was wrapped in
    the middle of the command."""
    args = ["solve", str(LEVEL1), "--only", "36_RMSNorm_", "--device", "cpu", "--out", str(tmp_path / "suite"),
            "--kb", str(tmp_path / "kb")]
    proc = subprocess.Popen([sys.executable, "-m", "kgen.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "80"})
    lines = stderr_until(proc, "evaluating", 300)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines) + err
    hint = next(line for line in err.splitlines() if line.startswith("interrupted: `kgen solve"))
    assert hint == f"interrupted: `kgen {' '.join(args)}` continues this suite"
