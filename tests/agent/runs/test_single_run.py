"""One run of one backend, as a person drives it: stopped with Ctrl-C in its evaluation, then
continued with ``kgen resume`` from its checkpoint to the end, saying nothing but kgen's own
lines (no warning about the checkpoint's contents)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import stderr_until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")]

#: what LangGraph's serializer logs for a class a checkpoint holds that it was not told about
SERDE_WARNINGS = ("unregistered type", "Blocked deserialization", "allowed_msgpack_modules")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_") and not k.endswith("_API_KEY")}
    env.update({"KGEN_HOME": str(home), "COLUMNS": "120"})
    return env


def test_a_run_stopped_in_its_evaluation_resumes_to_the_end_from_its_checkpoint(tmp_path):
    home, out = tmp_path / "home", tmp_path / "run"
    command = [sys.executable, "-m", "kgen.cli", "Triton softmax for H100", "--device", "cpu", "--budget", "1",
               "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(home), cwd=tmp_path)
    lines = stderr_until(proc, "evaluating", 240)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(lines) + err
    assert not (out / "summary.json").exists()

    resumed = subprocess.run([sys.executable, "-m", "kgen.cli", "resume", str(out)], capture_output=True,
                             text=True, timeout=600, env=_env(home), cwd=tmp_path)
    said = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, said[-3000:]
    assert "resuming run" in said
    assert not [w for w in SERDE_WARNINGS if w in said], said[-3000:]
    assert "Traceback" not in said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["h100"]["candidate"] == "g0-c00" and summary["candidates"] == 1
    assert (out / "best_h100.py").is_file()
