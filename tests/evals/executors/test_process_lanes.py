"""Lane processes and the dispatcher, on the CPU: the local executor's machinery for several
GPUs, run here as CPU lanes (``ProcessLane(gpu=False)``) so CI exercises every path a
four-GPU host takes: jobs spread over lanes, verdicts as a plain evaluation gives them, a
lane killed under a job (the job tried once more on another lane, the lane replaced), a job
lost twice (inconclusive, never rejected), a usage error raised in the caller."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kgen.errors import KgenUsageError
from kgen.evals.executors.dispatch import LaneDispatcher
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.local import ProcessLane
from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.sandbox.lifecycle import live_groups

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
SOLUTION = FIXTURES / "candidates" / "relu_kernelbench_solution.py"
WRONG = FIXTURES / "candidates" / "relu_wrong_math.py"
OPTIONS = EvalOptions(device="cpu", n_seeds=1, distributions=False, timeout_s=240)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("process_lanes")]


@pytest.fixture
def slow(tmp_path) -> Path:
    """The right kernel, loading for seconds (a long compile): time to kill its lane under it."""
    path = tmp_path / "relu_slow_to_load.py"
    path.write_text(SOLUTION.read_text() + "\n\n_busy = 0\nfor _i in range(150_000_000):\n    _busy += 1\n")
    return path


def _lanes(count: int, slots: int = 1) -> LaneDispatcher:
    return LaneDispatcher(lambda i: ProcessLane(i, slots, gpu=False), count)


def _kill_lane_when_started(dispatcher: LaneDispatcher, times: int, delay_s: float = 1.5) -> list[int]:
    """SIGKILL the lane running the job, ``delay_s`` after it starts, ``times`` times (a
    replacement lane too): as the out-of-memory killer or a crashed driver would."""
    killed: list[int] = []

    def watch() -> None:
        while len(killed) < times:
            time.sleep(delay_s)
            busy = dispatcher.busy_handles()
            if busy:
                lane = busy[0]
                killed.append(lane.pid)
                os.kill(lane.pid, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
    return killed


def test_jobs_spread_over_lanes_and_get_the_verdicts_a_plain_evaluation_gives():
    dispatcher = _lanes(2)
    try:
        jobs = [EvalJob.of(RELU, c, OPTIONS) for c in (SOLUTION, WRONG, SOLUTION, WRONG)]
        heard: list[int] = []
        results = dispatcher.evaluate(jobs, lambda i, r: heard.append(i), lambda: False, lambda i: None,
                                      together=False)
        assert [r.outcome for r in results] == ["passed", "numerical_mismatch"] * 2
        assert sorted(heard) == [0, 1, 2, 3]
        assert [r.candidate for r in results] == [str(c) for c in (SOLUTION, WRONG, SOLUTION, WRONG)]
        assert {r.placement.lane for r in results} == {"cpu0", "cpu1"}  # both lanes worked
        assert all(r.placement.attempt == 1 and r.placement.host for r in results)
        plain = evaluate(RELU, WRONG, OPTIONS)
        assert results[1].rejection == plain.rejection and results[1].stages[-1].name == plain.stages[-1].name
    finally:
        dispatcher.close()
    assert not any("kgen lane" in what for what in live_groups().values())


def test_a_lane_killed_under_a_job_is_replaced_and_the_job_passes_on_another_lane(slow):
    dispatcher = _lanes(2)
    try:
        killed = _kill_lane_when_started(dispatcher, times=1)
        results = dispatcher.evaluate([EvalJob.of(RELU, slow, OPTIONS)], lambda i, r: None, lambda: False,
                                      lambda i: None, together=False)
        assert len(killed) == 1
        (result,) = results
        assert result.outcome == "passed" and result.placement.attempt == 2
        assert dispatcher.replacements() == 1
        assert killed[0] not in [lane.pid for lane in dispatcher.handles()]  # a fresh process in its place
        again = dispatcher.evaluate([EvalJob.of(RELU, WRONG, OPTIONS)] * 2, lambda i, r: None, lambda: False,
                                    lambda i: None, together=False)
        assert [r.outcome for r in again] == ["numerical_mismatch"] * 2  # the replaced lane works
    finally:
        dispatcher.close()


def test_a_job_whose_lane_is_lost_twice_is_inconclusive_not_rejected(slow):
    dispatcher = _lanes(1)
    try:
        killed = _kill_lane_when_started(dispatcher, times=2)
        (result,) = dispatcher.evaluate([EvalJob.of(RELU, slow, OPTIONS)], lambda i, r: None, lambda: False,
                                        lambda i: None, together=False)
        assert len(killed) == 2
        assert result.outcome == "inconclusive (worker_killed)", result.reason
        assert "lost on 2 tries" in result.reason and "SIGKILL" in result.reason
        assert result.placement.attempt == 2
    finally:
        dispatcher.close()


def test_a_usage_error_raises_in_the_caller_and_the_lanes_go_on(tmp_path):
    dispatcher = _lanes(1)
    try:
        bad = EvalJob.of(RELU, SOLUTION, OPTIONS.model_copy(update={"targets": ["no-such-gpu"]}))
        with pytest.raises(KgenUsageError, match="no-such-gpu"):
            dispatcher.evaluate([bad], lambda i, r: None, lambda: False, lambda i: None, together=False)
        (result,) = dispatcher.evaluate([EvalJob.of(RELU, SOLUTION, OPTIONS)], lambda i, r: None, lambda: False,
                                        lambda i: None, together=False)
        assert result.passed
    finally:
        dispatcher.close()


def test_a_stop_before_the_jobs_start_leaves_them_out():
    dispatcher = _lanes(2)
    try:
        jobs = [EvalJob.of(RELU, SOLUTION, OPTIONS)] * 3
        assert dispatcher.evaluate(jobs, lambda i, r: None, lambda: True, lambda i: None, together=False) == []
    finally:
        dispatcher.close()


def test_a_job_carries_the_sources_and_names_the_callers_files(tmp_path):
    job = EvalJob.of(RELU, SOLUTION, OPTIONS)
    assert job.problem_source == RELU.read_text() and job.candidate_source == SOLUTION.read_text()
    assert EvalJob.of("softmax", SOLUTION, OPTIONS).problem_source is None  # a catalog name resolves anywhere
    with pytest.raises(KgenUsageError, match="candidate file not found"):
        EvalJob.of(RELU, tmp_path / "missing.py", OPTIONS)


LANES_SCRIPT = """
import sys
import threading
from pathlib import Path
from kgen.evals.executors.dispatch import LaneDispatcher
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.local import ProcessLane
from kgen.evals.harness import EvalOptions
from kgen.evals.sandbox.lifecycle import install_signal_handlers

install_signal_handlers()
dispatcher = LaneDispatcher(lambda i: ProcessLane(i, 1, gpu=False), 2)
lock = threading.Lock()


def say(*words):  # the lanes' threads print too: one whole line at a time
    with lock:
        sys.stdout.write(" ".join(map(str, words)) + "\\n")
        sys.stdout.flush()


say("lanes", *[lane.pid for lane in dispatcher.handles()])
options = EvalOptions(device="cpu", n_seeds=1, distributions=False, timeout_s=240)
job = EvalJob.of(sys.argv[1], sys.argv[2], options)
try:
    dispatcher.evaluate([job, job], lambda i, r: say("result", r.outcome), lambda: False,
                        lambda i: say("started", i), together=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().split(")")[-1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_ctrl_c_ends_every_lane_and_the_verifiers_running_in_them(slow, tmp_path):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", LANES_SCRIPT, str(RELU), str(slow)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lanes = [int(p) for p in proc.stdout.readline().split()[1:]]
    assert len(lanes) == 2
    started = [proc.stdout.readline() for _ in range(2)]
    assert all(line.startswith("started") for line in started), started
    deadline = time.monotonic() + 60
    verifiers: list[int] = []
    while time.monotonic() < deadline and len(verifiers) < 2:  # each lane's verifier child is running
        verifiers = [c for lane in lanes for c in _children(lane)]
        time.sleep(0.2)
    assert len(verifiers) >= 2, verifiers
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in out, (out, err)
    deadline = time.monotonic() + 10  # a verifier's watchdog polls for its parent twice a second
    while time.monotonic() < deadline and any(_alive(p) for p in [*lanes, *verifiers]):
        time.sleep(0.2)
    assert not [p for p in [*lanes, *verifiers] if _alive(p)], "a lane or its verifier outlived kgen"
