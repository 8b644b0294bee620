"""One kgen per run: a resume while another kgen (or a killed one's verifiers) still works on
the run is refused with who holds it; a lock left by a dead process is taken over."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kgen.agent.run_directory import LOCK_FILE, RunDirectory, RunInUseError, RunLock
from kgen.evals.sandbox.lifecycle import PARENT_PID_ENV, start_ticks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _run(tmp_path: Path) -> RunDirectory:
    run = RunDirectory.create(tmp_path / "runs", tmp_path / "run")
    (run.path / "run.json").write_text("{}")
    return run


def _lock(run: RunDirectory, pid: int, started: int | None, host: str | None = None) -> None:
    lock = RunLock(pid=pid, started=started, host=host or socket.gethostname(), since="2026-11-25 10:00:00 UTC")
    (run.path / LOCK_FILE).write_text(lock.model_dump_json())


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_in_use_by_a_live_kgen_is_refused_naming_it(tmp_path, sleeper):
    run = _run(tmp_path)
    _lock(run, sleeper.pid, start_ticks(sleeper.pid))
    with pytest.raises(RunInUseError, match=rf"in use by kgen process {sleeper.pid} .*kill {sleeper.pid}"):
        with run.claimed():
            pass
    assert (run.path / LOCK_FILE).exists()  # still theirs


def test_a_lock_of_a_dead_process_is_taken_over_and_released(tmp_path):
    run = _run(tmp_path)
    _lock(run, _dead_pid(), None)
    with run.claimed():
        held = RunLock.model_validate_json((run.path / LOCK_FILE).read_text())
        assert held.pid == os.getpid() and held.started == start_ticks(os.getpid())
    assert not (run.path / LOCK_FILE).exists()


def test_a_reused_pid_is_not_the_process_that_held_the_lock(tmp_path, sleeper):
    run = _run(tmp_path)
    _lock(run, sleeper.pid, (start_ticks(sleeper.pid) or 0) - 1)  # same pid, another start
    with run.claimed():
        pass


def test_a_torn_lock_is_taken_over_once_its_writer_is_surely_gone(tmp_path):
    run = _run(tmp_path)
    torn = run.path / LOCK_FILE
    torn.write_text('{"pid": 12')
    os.utime(torn, (time.time() - 60, time.time() - 60))
    with run.claimed():
        pass


def test_a_killed_kgens_verifiers_still_running_are_waited_for_then_named(tmp_path):
    run = _run(tmp_path)
    owner = _dead_pid()
    env = {**os.environ, PARENT_PID_ENV: str(owner)}
    lingering = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    try:
        _lock(run, owner, None)
        started = time.monotonic()
        with pytest.raises(RunInUseError, match=rf"verifier process\(es\) {lingering.pid} .*killed kgen"):
            with run.claimed(verifiers_wait_s=0.5):
                pass
        assert time.monotonic() - started >= 0.5
        # one that ends while the resume waits is no obstacle
        threading.Timer(0.3, lingering.kill).start()
        with run.claimed(verifiers_wait_s=5.0):
            pass
    finally:
        lingering.kill()
        lingering.wait()


def test_two_claims_at_once_one_wins(tmp_path):
    run = _run(tmp_path)
    with run.claimed():
        with pytest.raises(RunInUseError, match="in use by kgen process"):
            with run.claimed():
                pass


def test_a_lock_from_another_host_is_refused_with_what_to_do(tmp_path):
    run = _run(tmp_path)
    _lock(run, 1, None, host="elsewhere.example")
    with pytest.raises(RunInUseError, match="on elsewhere.example .*delete .*lock.json"):
        with run.claimed():
            pass


def test_resume_is_told_the_id_under_the_runs_folder_and_the_path_elsewhere(tmp_path):
    from kgen.agent.runs.single_run import resume_ref

    runs = tmp_path / "runs"
    inside = RunDirectory.create(runs)
    elsewhere = RunDirectory.create(runs, tmp_path / "my run")
    assert resume_ref(inside, runs) == inside.run_id
    assert resume_ref(elsewhere, runs) == f"'{elsewhere.path}'"
