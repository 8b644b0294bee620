"""scripts/deliver_check.py, the GPU acceptance of delivering kernels into a model, dry-run on the
CPU at a tiny size: the phases run (the waiting seeds' verification is left out: it is `kgen eval`,
tested with the seeds), every exported op is registered for the compiler to see, each group is
decided in the compiled step, the compiled model with the ops has no graph break and matches eager,
a profile is written, the planted kernel set is caught and the others agree, and a failing phase
is recorded without losing the others."""

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
                           "--device", "cpu", "--compile-backend", "aot_eager", "--timing-steps", "1",
                           "--decide-steps", "1", "--profile-steps", "1", *extra],
                          capture_output=True, text=True, env=env, timeout=1200)


@pytest.mark.slow
def test_every_phase_runs_on_the_cpu_and_every_expectation_holds(tmp_path: Path) -> None:
    done = _run(tmp_path, "--phases", "export", "decide", "compile", "train")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "deliver.json").read_text())
    assert not report["errors"]
    exported = {k["name"]: k["registration"] for k in report["export"]["kernels"]}
    assert set(exported) >= {"rmsnorm_backward", "swiglu", "cross_entropy_forward", "embedding_backward"}
    assert set(exported.values()) == {"triton_op"}
    # no verify phase: the fused seams' waiting seeds have no verdict, so they are left out, and said so
    assert set(report["export"]["left_out"]) == {"fused_add_rmsnorm_forward", "fused_add_rmsnorm_backward",
                                                 "fused_linear_cross_entropy"}
    decided = report["decide"]
    assert [r["group"] for r in decided["rows"]] == ["rmsnorm", "swiglu", "embedding_backward", "cross_entropy"]
    assert all(r["serves"] in ("kgen", "inductor") and r["why"] for r in decided["rows"])
    compiled = report["compile"]
    assert compiled["graph_breaks"] == 0 and compiled["loss_compiled_vs_eager"] < 1e-3
    assert set(compiled["step_seconds"]) == {"stock eager", "stock compiled", "ops compiled", "every op compiled"}
    assert compiled["every"] == ["rmsnorm", "swiglu", "embedding_backward", "cross_entropy"]
    profile = (tmp_path / "profile.md").read_text()
    assert "| matmul |" in profile and "every op compiled ms" in profile
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
