"""scripts/attention_anchors.py in its CPU mode: every anchor is checked against the problem's
Model before any timing, a wrong one is said and fails the run, a missing library is said."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "attention_anchors.py"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_")}
    env["KGEN_HOME"], env["TRITON_INTERPRET"] = str(cwd / "home"), "1"
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def _candidate(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(f"import math\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, q, k, v):\n{body}")
    return path


def test_a_right_candidate_is_checked_and_a_wrong_one_fails_the_run(tmp_path):
    right = _candidate(tmp_path, "spelled_out", (
        "        s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])\n"
        "        n = q.shape[-2]\n"
        "        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float('-inf'))\n"
        "        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)\n"))
    out = tmp_path / "anchors.md"
    done = _run("--dry", "--candidates", str(right), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    text = out.read_text()
    assert "| small | kgen spelled_out |" in text and "checked (rel-L2" in text and "meets kgen's bounds" in text
    assert "flash-attn-4" in text  # said, whether or not it is installed here

    wrong = _candidate(tmp_path, "no_mask", (
        "        s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])\n"
        "        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)\n"))
    done = _run("--dry", "--candidates", str(wrong), cwd=tmp_path)
    assert done.returncode == 1
    assert "kgen no_mask | - | - | - | wrong: rel-L2" in done.stdout


def test_bad_arguments_are_refused_with_a_reason(tmp_path):
    done = _run("--dry", "--candidates", str(tmp_path / "missing.py"), cwd=tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr
    done = _run("--dry", "--sizes", "s512", cwd=tmp_path)
    assert done.returncode == 2 and "no size s512" in done.stderr
