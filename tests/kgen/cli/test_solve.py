"""`kgen solve SUITE_DIR` as a person runs it: the table at the end, exit codes, resuming.

The suite runner itself (parallel CPU runs, resume rules, scripted models) is tested in
tests/agent/runs/test_suite_runs.py; here the command: its flags, what it prints, what it exits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2] / "fixtures" / "suite_level1"


def kgen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


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
