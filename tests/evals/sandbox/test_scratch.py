"""Verifier folders carry their kgen's pid and start time: a kgen killed outright leaves its
boxes behind, and the next kgen removes those whose owner is gone, never a live kgen's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kgen.evals.sandbox.lifecycle import start_ticks
from kgen.evals.sandbox.scratch import PREFIX, new_workdir, sweep_orphans

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _folder(root: Path, name: str, age_s: float) -> Path:
    folder = root / name
    (folder / "box").mkdir(parents=True)
    (folder / "box" / "stdout.txt").write_text("x")
    then = time.time() - age_s
    os.utime(folder, (then, then))
    return folder


def test_only_folders_of_gone_owners_are_removed(tmp_path):
    me = f"{os.getpid()}-{start_ticks(os.getpid())}"
    gone = _folder(tmp_path, f"{PREFIX}{_dead_pid()}-5-abc", 3600)
    reused = _folder(tmp_path, f"{PREFIX}{os.getpid()}-{(start_ticks(os.getpid()) or 0) + 1}-abc", 3600)
    mine = _folder(tmp_path, f"{PREFIX}{me}-abc", 3600)
    young = _folder(tmp_path, f"{PREFIX}{_dead_pid()}-5-young", 1)
    unnamed = _folder(tmp_path, f"{PREFIX}q1w2e3", 3600)  # an older kgen's: its owner is unknown
    removed = sweep_orphans(tmp_path)
    assert sorted(removed) == sorted([gone, reused])
    assert mine.is_dir() and young.is_dir() and unnamed.is_dir()


def test_a_new_folder_is_named_after_this_process():
    folder = new_workdir()
    try:
        assert folder.name.startswith(f"{PREFIX}{os.getpid()}-{start_ticks(os.getpid())}-")
        assert folder.parent == Path(tempfile.gettempdir())
    finally:
        folder.rmdir()


@pytest.mark.slow
def test_the_box_of_a_kgen_killed_outright_is_swept_by_the_next(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kgen.cli", "eval", str(FIXTURES / "problems" / "relu_kernelbench.py"),
         str(FIXTURES / "candidates" / "relu_hangs.py"), "--device", "cpu", "--timeout", "120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not list(tmp_path.glob(f"{PREFIX}{proc.pid}-*/box")):
        time.sleep(0.2)
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = list(tmp_path.glob(f"{PREFIX}{proc.pid}-*"))
    assert left, "the killed kgen left no folder: nothing to sweep"
    time.sleep(1.5)  # its verifier ends by itself (parent-death signal, watchdog)
    assert sweep_orphans(tmp_path, min_age_s=0.0) == left
    assert not any(folder.exists() for folder in left)
