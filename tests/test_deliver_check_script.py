"""scripts/deliver_check.py, the GPU acceptance of delivering kernels into a model, dry-run on the
CPU at a tiny size: every phase runs, the compiled model with the exported ops has no graph break
and matches eager, the planted kernel set is caught and the others agree, and a failing phase is
recorded without losing the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "deliver_check.py"


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = os.environ | {"TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--size", "tiny", "--steps", "3",
                           "--device", "cpu", "--compile-backend", "aot_eager", "--timing-steps", "1", *extra],
                          capture_output=True, text=True, env=env, timeout=900)


@pytest.mark.slow
def test_every_phase_runs_on_the_cpu_and_every_expectation_holds(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "deliver.json").read_text())
    assert not report["errors"]
    assert {k["name"] for k in report["export"]["kernels"]} >= {"rmsnorm_backward", "swiglu", "cross_entropy_forward"}
    compiled = report["compile"]
    assert compiled["graph_breaks"] == 0 and compiled["loss_compiled_vs_eager"] < 1e-3
    verdicts = {label: (c["expect"], c["verdict"]) for label, c in report["train"]["checks"].items()}
    assert all(expect == verdict for expect, verdict in verdicts.values()), verdicts
    assert any(expect == "disagree" for expect, _ in verdicts.values())
    assert ET.parse(tmp_path / "loss_curves.svg").getroot().tag.endswith("svg")
    assert "| exported package | agree | agree |" in (tmp_path / "deliver.md").read_text()


def test_a_phase_that_fails_is_recorded_and_the_script_says_so(tmp_path: Path) -> None:
    done = _run(tmp_path, "--phases", "compile")  # no export before it: the package is missing
    assert done.returncode == 1
    report = json.loads((tmp_path / "deliver.json").read_text())
    assert "compile" in report["errors"] and "compile failed" in (tmp_path / "deliver.md").read_text()
