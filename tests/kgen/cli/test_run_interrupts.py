"""Stopping a run as people do (Ctrl-C, SIGTERM): kgen says how to continue it, ends its
verifiers, leaves no lock; and a second kgen on a run that is still worked on is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_process import stderr_until

from kgen.agent.run_directory import LOCK_FILE, RunLock
from kgen.evals.sandbox.lifecycle import start_ticks

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_") and not k.endswith("_API_KEY")}
    env.update({"KGEN_HOME": str(home), "COLUMNS": "120"})
    return env


def _children(pid: int) -> set[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2:].split()
            if fields[0] not in ("Z", "X"):
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _start_run(home: Path, out: Path) -> tuple[subprocess.Popen, list[str]]:
    """An offline run on the CPU, up to its first evaluation (a verifier is running)."""
    proc = subprocess.Popen([sys.executable, "-m", "kgen.cli", "Triton softmax for H100", "--device", "cpu",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(home), cwd=home.parent)
    lines = stderr_until(proc, "evaluating", 240)
    time.sleep(2.0)  # into the verification
    return proc, lines


# How a shell sees each stop: 130 after Ctrl-C, 143 after SIGTERM. (A Ctrl-C whose KeyboardInterrupt
# left code run by exec() of a string, as dataclasses builds methods during an import, made CPython
# end kgen by SIGINT at exit, -2, in about one stop in four; kgen no longer raises there.)
STOPPED = [(signal.SIGINT, (130,)), (signal.SIGTERM, (143,))]


@pytest.mark.parametrize(("sig", "codes"), STOPPED, ids=["Ctrl-C", "SIGTERM"])
def test_a_stopped_run_says_how_to_resume_and_leaves_nothing_running(tmp_path, sig, codes):
    home, out = tmp_path / "home", tmp_path / "run"
    proc, lines = _start_run(home, out)
    assert (out / LOCK_FILE).is_file()
    descendants = _children(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    err = "".join(lines) + err
    assert proc.returncode in codes, err[-2000:]
    # made with --out outside the runs folder: the path is what finds it again
    assert f"interrupted: `kgen resume {out.resolve()}` continues this run" in err, err[-2000:]
    assert "Aborted" not in err and "Traceback" not in err
    assert not (out / LOCK_FILE).exists()
    assert "interrupted: `kgen resume" in (out / "events.log").read_text()
    time.sleep(1.0)
    assert not {p for p in descendants if Path(f"/proc/{p}").exists()
                and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[-1][:3]}


def test_resume_of_a_run_another_kgen_works_on_is_refused(tmp_path):
    home, out = tmp_path / "home", tmp_path / "run"
    proc, _ = _start_run(home, out)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        import socket

        lock = RunLock(pid=holder.pid, started=start_ticks(holder.pid), host=socket.gethostname(), since="now")
        (out / LOCK_FILE).write_text(lock.model_dump_json())
        again = subprocess.run([sys.executable, "-m", "kgen.cli", "resume", str(out)], capture_output=True,
                               text=True, timeout=120, env=_env(home))
        assert again.returncode == 2, again.stderr
        errors = [line for line in again.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and f"in use by kgen process {holder.pid}" in errors[0], again.stderr
    finally:
        holder.kill()
        holder.wait()
