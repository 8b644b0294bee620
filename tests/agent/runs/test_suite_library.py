"""agent/runs/suite_library.py with the real runs: `kgen solve` offline over unmodified
KernelBench level-1 files, on the CPU (Triton's interpreter, small sizes), with a real Chroma
store seeded with the shipped library.

The library holds no kernel under a KernelBench name, but its softmax kernel computes
23_Softmax's reference: the suite says so before any run, verifies that kernel against
23_Softmax's own reference and tunes it; 19_ReLU and 41_Max_Pooling_1D are said to be out of the
library's reach, each with its own reason, and cost no run."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from kgen.agent.run_options import RunOptions
from kgen.agent.runs.suite_runs import solve_suite

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("suite_library")]

LEVEL1 = Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench" / "level1"
FILES = ["19_ReLU", "23_Softmax", "41_Max_Pooling_1D"]


def _rows(markdown: str) -> dict[str, list[str]]:
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines()
             if line.startswith("| ") and not line.startswith("| problem")]
    return {row[0]: row for row in cells}


def test_offline_solve_verifies_the_librarys_kernel_for_the_same_operation_and_tunes_it(tmp_path, monkeypatch):
    from kgen.knowledge_base.seeding import open_knowledge_base

    monkeypatch.setitem(sys.modules, "kgen.agent.runs.html_report", None)
    kb = str(tmp_path / "kb")
    open_knowledge_base(kb)
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in FILES:
        shutil.copy(LEVEL1 / f"{name}.py", suite)
    # budget 2: the library's kernel, then one tuned variant of it once it passed
    template = RunOptions(request="", device="cpu", targets=["h100"], budget=2, generations=1, kb=kb,
                          persist=False)
    lines: list[str] = []
    outcome = solve_suite(suite, template, out=tmp_path / "solve", progress=lines.append)

    # said up front, before any run starts
    first_start = next(i for i, line in enumerate(lines) if "starting" in line)
    up_front = lines[:first_start]
    assert up_front[0] == "offline (no model): the library can serve 1 of 3 problems; only those are run"
    assert any(line.startswith("  serves 23_Softmax: same reference as softmax") for line in up_front)
    assert any(line.startswith("  - 19_ReLU: no triton kernel in the library computes this reference")
               for line in up_front)
    assert any(line.startswith("  - 41_Max_Pooling_1D: no triton kernel in the library takes this problem's arguments")
               for line in up_front)

    state = {p.name: p for p in outcome.problems}
    assert {n: p.status for n, p in state.items()} == {
        "19_ReLU": "unserved", "23_Softmax": "finished", "41_Max_Pooling_1D": "unserved"}
    runs = tmp_path / "solve" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["23_Softmax"]  # only the attempted one has a folder

    # the library kernel, verified against 23_Softmax's own reference, then tuned
    run = runs / "23_Softmax"
    tasks = {p.parent.name: json.loads(p.read_text()) for p in run.glob("candidates/*/task.json")}
    assert tasks["g0-c00"]["kind"] == "baseline"
    assert tasks["g0-c00"]["description"].startswith("the library's softmax kernel k-")
    tuned = [t for cid, t in tasks.items() if cid.startswith("g1-")]
    assert len(tuned) == 1 and tuned[0]["kind"] in ("sweep", "mutate") and tuned[0]["parent_ids"] == ["g0-c00"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["h100"]["candidate"] in tasks

    rows = _rows(outcome.markdown.read_text())
    assert rows["23_Softmax"][1] == "passed"
    assert rows["19_ReLU"][1].startswith("missing (not attempted offline: no triton kernel in the library computes")
    assert rows["41_Max_Pooling_1D"][1].startswith("missing (not attempted offline: no triton kernel in the library takes")
    assert outcome.summary.problems == 3 and outcome.summary.correct == 1
