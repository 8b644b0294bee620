"""`kgen report RUN` as a person runs it: a candidate the run does not hold is bad usage (exit 2,
one line naming the run's nearest candidates), never a page that quietly traces nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kgen.agent.candidates import CandidateTask
from kgen.agent.run_directory import RunDirectory

RUN_ID = "20261122-081500-3fa9c1"


def kgen(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_") and not k.endswith("_API_KEY")}
    env.update(KGEN_HOME=str(home), COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def small_run(home: Path) -> RunDirectory:
    """An unfinished run of four candidates, as a run leaves it after generation 1 started."""
    run = RunDirectory(home / "runs" / RUN_ID)
    run.path.mkdir(parents=True)
    run.write("run.json", json.dumps({"options": {"request": "Triton GELU for H100", "device": "cpu",
                                                  "targets": ["h100"]}}))
    run.write("spec.json", json.dumps({"request": "Triton GELU for H100", "problem": "gelu", "backend": "triton",
                                       "targets": ["h100"]}))
    for cid in ("g0-c00", "g0-c01", "g0-c02", "g1-c00"):
        task = CandidateTask(id=cid, generation=int(cid[1]), target="h100", kind="mutate", origin="mutation")
        run.write(f"candidates/{cid}/task.json", task.model_dump_json(exclude={"source"}))
    return run


def test_a_candidate_the_run_does_not_hold_is_bad_usage_naming_the_close_ones(tmp_path):
    home = tmp_path / "home"
    run = small_run(home)
    done = kgen("report", RUN_ID, "--candidate", "g0-c09", home=home)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: run {RUN_ID} has no candidate g0-c09") and "g0-c00" in line, line
    assert done.stdout == "" and not (run.path / "report.html").exists()


def test_a_candidate_far_from_every_id_lists_the_runs_candidates(tmp_path):
    home = tmp_path / "home"
    small_run(home)
    done = kgen("report", RUN_ID, "--candidate", "winner", home=home)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "its 4 candidates: g0-c00, g0-c01, g0-c02, g1-c00" in line, line


def test_a_candidate_the_run_holds_is_traced(tmp_path):
    home = tmp_path / "home"
    run = small_run(home)
    done = kgen("report", RUN_ID, "--candidate", "g1-c00", home=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run.path / "report.html")
