"""Warm verifiers: a spare is used only where a cold child would be identical, serves one
evaluation, and never outlives kgen (ended at exit, and with kgen when kgen is killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.sandbox import worker_pool
from kgen.evals.sandbox.box import SandboxLimits, run_python_module
from kgen.evals.sandbox.lifecycle import live_groups
from kgen.evals.sandbox.worker_pool import WorkerSpec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
SOLUTION = FIXTURES / "candidates" / "relu_kernelbench_solution.py"
WRONG = FIXTURES / "candidates" / "relu_wrong_math.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture(autouse=True)
def _no_spares_left():
    worker_pool.close()
    yield
    worker_pool.close()
    assert live_groups() == {}, "a spare or child was left running"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _kept(count: int = 1) -> list[worker_pool.Spare]:
    """The spares kept once ``count`` have started (starts happen on the pool's thread)."""
    deadline = time.monotonic() + 30
    while len(worker_pool.spares()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return worker_pool.spares()


def _spec(**changes) -> WorkerSpec:
    fields = {"device": "cpu", "backend": "triton", "extra_env": {"TRITON_CACHE_DIR": "/nonexistent-cache"}}
    return WorkerSpec(**{**fields, **changes})


def _taken(spec: WorkerSpec) -> bool:
    """Whether a spare matching ``spec`` was there (it is ended: a taken spare is never dropped)."""
    spare = worker_pool.take(spec)
    if spare is not None:
        spare.discard()
    return spare is not None


def _started(spec: WorkerSpec) -> worker_pool.Spare:
    worker_pool.prestart(spec)
    spare = worker_pool.take(spec)
    assert spare is not None
    return spare


def test_the_next_evaluation_runs_in_the_spare_and_the_spare_serves_only_one():
    options = EvalOptions(device="cpu", prestart=True, seeds=[1])
    during = []  # on the CPU nothing is timed: the next spare starts while this candidate runs
    first = evaluate(RELU, SOLUTION, options, progress=lambda _: during.append(_kept()))
    assert first.passed and not first.prestarted
    (spare,) = _kept()
    assert [s.proc.pid for s in during[0]] == [spare.proc.pid]
    assert spare.alive() and spare.box.is_dir()
    # a wrong candidate in a spare is judged exactly as in a cold child
    second = evaluate(RELU, WRONG, options)
    assert second.prestarted and not second.passed and second.rejection is not None
    assert _wait_gone(spare.proc.pid, 5) and not spare.workdir.exists()
    (fresh,) = _kept()
    assert fresh.proc.pid != spare.proc.pid and fresh.workdir != spare.workdir
    third = evaluate(RELU, SOLUTION, options)
    assert third.prestarted and third.passed


@pytest.mark.parametrize(
    ("device", "timed", "during"),
    [("cpu", False, True), ("cpu", True, False), ("cuda", False, False), ("cuda", True, False)],
)
def test_a_spare_starts_beside_a_run_only_where_nothing_is_measured(device, timed, during):
    assert worker_pool.starts_during_run(_spec(device=device), timed=timed) is during


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_spare_starts_beside_a_run_that_takes_turns_on_the_gpu(device):
    # its timing runs with every other process stopped, a spare starting up included
    assert worker_pool.starts_during_run(_spec(device=device), timed=True, turns=True)


def test_without_prestart_no_spare_is_started_or_taken():
    result = evaluate(RELU, SOLUTION, EvalOptions(device="cpu", seeds=[1]))
    assert result.passed and not result.prestarted
    assert worker_pool.spares() == []


@pytest.mark.parametrize(
    "other",
    [
        {"device": "cuda"},
        {"backend": "cute"},
        {"extra_env": {"TRITON_CACHE_DIR": "/another-cache"}},
        {"limits": SandboxLimits(max_file_bytes=1024)},
        {"limits": SandboxLimits(isolate_network=False)},
    ],
    ids=["device", "backend", "extra-env", "file-limit", "network"],
)
def test_a_spare_of_another_kind_is_not_taken(other):
    base = _spec()
    worker_pool.prestart(base)
    fields = {"device": "cpu", "backend": "triton", "extra_env": base.extra_env, **other}
    assert not _taken(WorkerSpec(**fields))
    assert _taken(base)  # still there for its own kind


def test_a_spare_started_under_another_environment_is_not_taken(monkeypatch):
    spec = _spec()
    worker_pool.prestart(spec)
    monkeypatch.setenv("KGEN_LIFECYCLE_PROBE", "1")  # passed to the child: the spare would lack it
    assert not _taken(spec)
    monkeypatch.delenv("KGEN_LIFECYCLE_PROBE")
    assert _taken(spec)
    monkeypatch.setenv("API_TOKEN", "x")  # never passed to a child: the spare is still the same
    worker_pool.prestart(spec)
    assert _taken(spec)


def test_the_timeout_is_not_part_of_a_spare_s_kind():
    worker_pool.prestart(_spec(limits=SandboxLimits(timeout_s=10)))
    assert _taken(_spec(limits=SandboxLimits(timeout_s=99)))


def test_a_spare_that_died_is_replaced_by_a_cold_child(tmp_path):
    spare = _started(_spec())
    os.kill(spare.proc.pid, signal.SIGKILL)
    spare.proc.wait()
    missing = tmp_path / "missing.json"
    outcome = run_python_module(
        "kgen.evals.verifier.child", [str(missing), str(missing)], SandboxLimits(timeout_s=60),
        workdir=spare.box, spare=spare,
    )
    assert not outcome.prestarted
    assert outcome.returncode == 1 and "missing.json" in outcome.stderr_tail  # the cold child ran the args


def test_a_spare_whose_death_is_seen_before_the_run_is_not_taken():
    spec = _spec()
    worker_pool.prestart(spec)
    (spare,) = _kept()
    os.kill(spare.proc.pid, signal.SIGKILL)
    assert _wait_gone(spare.proc.pid, 5)
    assert not _taken(spec)
    assert not spare.workdir.exists()


def test_a_discarded_spare_exits_without_running_anything():
    spare = _started(_spec())
    spare.proc.stdin.close()  # kgen closes its stdin without a request: it must just end
    assert spare.proc.wait(timeout=120) == 0
    assert (spare.box / "stderr.txt").read_text() == ""
    spare.discard()
    assert not spare.workdir.exists()


def test_more_kinds_than_the_cap_end_the_oldest_spare():
    kinds = [_spec(extra_env={"TRITON_CACHE_DIR": f"/cache-{i}"}) for i in range(worker_pool.MAX_KINDS + 1)]
    for i, spec in enumerate(kinds):
        worker_pool.prestart(spec)
        _kept(min(i + 1, worker_pool.MAX_KINDS))
    time.sleep(0.5)  # the last start has evicted the oldest by now
    assert len(worker_pool.spares()) == worker_pool.MAX_KINDS
    assert _taken(kinds[-1]) and not _taken(kinds[0])


_OWNER = """
import sys, time
from kgen.evals.sandbox import worker_pool
spec = worker_pool.WorkerSpec(device="cpu", backend="triton")
worker_pool.prestart(spec)
deadline = time.monotonic() + 30
while not worker_pool.spares() and time.monotonic() < deadline:
    time.sleep(0.05)
(spare,) = worker_pool.spares()
print(spare.proc.pid, spare.workdir, flush=True)
if sys.argv[1] == "hang":
    time.sleep(120)
"""


def _owner(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, int, Path]:
    script = tmp_path / "owner.py"
    script.write_text(_OWNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True, env=env)
    pid, workdir = proc.stdout.readline().split()
    return proc, int(pid), Path(workdir)


def test_spares_are_ended_and_removed_when_kgen_exits(tmp_path):
    proc, pid, workdir = _owner(tmp_path, "exit")
    assert proc.wait(timeout=60) == 0
    assert _wait_gone(pid, 5), "the spare outlived a normal exit"
    assert not workdir.exists()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_spare_dies_with_kgen(tmp_path, sig):
    """Started from the pool's own thread, the spare still dies with the process (the
    parent-death signal is tied to the forking thread, which lives as long as kgen)."""
    proc, pid, _ = _owner(tmp_path, "hang")
    assert _alive(pid)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert _wait_gone(pid, 5), f"the spare outlived kgen's {sig.name}"


def test_several_spares_of_one_kind_are_kept_and_say_when_they_are_ready():
    """A batch times its candidates one after another on spares started while it verified
    them: each is taken once, and each has finished starting before it is handed a run."""
    spec = _spec()
    worker_pool.prestart(spec, count=2)
    worker_pool.prestart(spec, count=2)  # asking again starts no more
    assert worker_pool.wait_ready(spec, timeout_s=180) == 2
    first, second = worker_pool.take(spec), worker_pool.take(spec)
    try:
        assert first is not None and second is not None and first.proc.pid != second.proc.pid
        assert first.ready() and second.ready() and first.alive() and second.alive()
        assert worker_pool.take(spec) is None
    finally:
        for spare in (first, second):
            if spare is not None:
                spare.discard()
