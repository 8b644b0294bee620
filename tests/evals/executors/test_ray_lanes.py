"""The Ray executor against a real Ray head on loopback, started by the test (no GPU: CPU
lanes, an actor each): the verdicts a plain evaluation gives, results naming the node, a
killed actor replaced and its job tried again, and the commands a person runs with
``--executor ray``: an offline search and `kgen bench --self-test` over KernelBench files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray executor's tests need Ray (pip install 'kgen[ray]'; CI installs it)")

from ray_head import ray_head  # noqa: E402

from kgen.backends.device import Device  # noqa: E402
from kgen.errors import KgenUsageError  # noqa: E402
from kgen.evals.executors.jobs import EvalJob  # noqa: E402
from kgen.evals.executors.ray_lanes import RayExecutor, lane_plan  # noqa: E402
from kgen.evals.harness import EvalOptions  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
SOLUTION = FIXTURES / "candidates" / "relu_kernelbench_solution.py"
WRONG = FIXTURES / "candidates" / "relu_wrong_math.py"
LEVEL1 = FIXTURES / "kernelbench" / "level1"
OPTIONS = EvalOptions(device="cpu", n_seeds=1, distributions=False, timeout_s=240)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_head")]


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    with ray_head(tmp_path_factory.mktemp("ray-head")) as address:
        yield address


@pytest.fixture
def executor(head):
    """Two CPU lanes, closed after the test: the cluster's CPUs are free for the next."""
    import ray

    ex = RayExecutor(Device.CPU, head)
    yield ex
    ex.close()
    ray.shutdown()


def test_ray_lanes_give_a_plain_evaluations_verdicts_and_name_where_they_ran(executor):
    assert [p.lane.split(":")[-1] for p in executor.lanes()] == ["cpu0", "cpu1"]
    jobs = [EvalJob.of(RELU, c, OPTIONS) for c in (SOLUTION, WRONG, SOLUTION)]
    results = executor.evaluate(jobs)
    assert [r.outcome for r in results] == ["passed", "numerical_mismatch", "passed"]
    assert [r.candidate for r in results] == [str(SOLUTION), str(WRONG), str(SOLUTION)]  # the caller's paths
    assert results[0].problem_path == str(RELU)
    assert all(r.placement.executor == "ray" and r.placement.host and r.placement.attempt == 1 for r in results)
    assert {r.placement.lane for r in results} == {p.lane for p in executor.lanes()}  # both actors worked


def test_a_killed_actor_is_replaced_and_its_job_passes_on_the_next_try(executor, tmp_path):
    slow = tmp_path / "relu_slow_to_load.py"
    slow.write_text(SOLUTION.read_text() + "\n\n_busy = 0\nfor _i in range(150_000_000):\n    _busy += 1\n")
    killed: list[int] = []

    def kill_the_busy_actor() -> None:
        time.sleep(2.0)
        busy = executor.busy_handles()
        if busy:
            killed.append(busy[0].pid())
            os.kill(killed[-1], signal.SIGKILL)  # as a node's out-of-memory killer would

    threading.Thread(target=kill_the_busy_actor, daemon=True).start()
    before = {p.lane for p in executor.lanes()}
    (result,) = executor.evaluate([EvalJob.of(RELU, slow, OPTIONS)])
    assert killed, f"the job ended before the actor could be killed: {result.outcome} {result.seconds:.1f} s {result.reason[:300]}"
    assert result.passed and result.placement.attempt == 2, result.reason
    assert len(executor.lanes()) == 2 and {p.lane for p in executor.lanes()} == before  # the lane is back


def test_a_lane_plan_names_the_gpu_model_and_refuses_what_the_cluster_lacks():
    cluster = {"CPU": 64.0, "GPU": 8.0, "accelerator_type:H100": 8.0}
    assert lane_plan(cluster, Device.CUDA, ["h100"], None) == (8, {"accelerator_type:H100": 0.001})
    assert lane_plan(cluster, Device.CUDA, ["h100"], 4)[0] == 4
    with pytest.raises(KgenUsageError, match="no free a100 GPU .*H100"):
        lane_plan(cluster, Device.CUDA, ["a100"], None)
    with pytest.raises(KgenUsageError, match="--gpus 9"):
        lane_plan(cluster, Device.CUDA, ["h100"], 9)
    with pytest.raises(KgenUsageError, match="no free GPU"):
        lane_plan({"CPU": 4.0}, Device.CUDA, [], None)
    assert lane_plan({"CPU": 4.0}, Device.CPU, [], None) == (2, {})
    assert lane_plan({"CPU": 4.0}, Device.CPU, [], 3) == (3, {})


def _kgen(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KGEN_HOME": str(home), "COLUMNS": "120", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, env=env,
                          timeout=900)


def test_an_offline_search_runs_its_evaluations_on_the_ray_cluster(head, tmp_path):
    out = _kgen(tmp_path / "home", "Triton softmax for H100", "--executor", "ray", "--ray-address", head,
                "--device", "cpu", "--budget", "2", "--generations", "1", "--out", str(tmp_path / "run"),
                "--no-persist")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best"]["h100"] and summary["passed"] >= 1
    lanes = [load["gpu"] for load in summary["per_gpu"]]
    assert lanes and all(":cpu" in lane for lane in lanes), lanes  # every evaluation ran on an actor
    evals = list((tmp_path / "run" / "candidates").glob("*/eval.json"))
    assert evals and all(json.loads(p.read_text())["placement"]["executor"] == "ray" for p in evals)


def test_bench_self_test_spreads_kernelbench_files_over_the_ray_lanes(head, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("19_ReLU.py", "21_Sigmoid.py", "22_Tanh.py"):
        shutil.copy(LEVEL1 / name, suite / name)
    out = _kgen(tmp_path / "home", "bench", "--self-test", str(suite), "--executor", "ray", "--ray-address", head,
                "--device", "cpu", "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "self-test: 3 of 3 passed" in out.stdout
    rows = [json.loads(line)["row"] for line in (tmp_path / "out" / "self_test.jsonl").read_text().splitlines()]
    assert sorted(r["problem"] for r in rows) == ["19_ReLU", "21_Sigmoid", "22_Tanh"]
    assert all(":cpu" in r["lane"] for r in rows)


def test_an_unreachable_cluster_is_a_one_line_usage_error(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(LEVEL1 / "19_ReLU.py", suite / "19_ReLU.py")
    out = _kgen(tmp_path / "home", "bench", "--self-test", str(suite), "--executor", "ray",
                "--ray-address", "127.0.0.1:1", "--device", "cpu", "--out", str(tmp_path / "out"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "could not reach a Ray cluster at '127.0.0.1:1'" in out.stderr


def _lane_actors() -> list[int]:
    """Live Ray lane actors on this machine (their processes call themselves ray::LaneActor)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if fh.read().startswith(b"ray::LaneActor"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_ctrl_c_on_a_search_ends_its_ray_actors(head, tmp_path):
    env = {**os.environ, "KGEN_HOME": str(tmp_path / "home"), "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "kgen.cli", "Triton softmax for H100", "--executor", "ray",
                             "--ray-address", head, "--device", "cpu", "--budget", "4", "--generations", "1",
                             "--out", str(tmp_path / "run"), "--no-persist"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if "evaluating" in line or not line:
            break
    assert any("evaluating" in line for line in seen), "".join(seen)[-3000:]
    assert _lane_actors(), "the search's lanes are not running"
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen)[-2000:] + rest[-2000:]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _lane_actors():
        time.sleep(0.5)
    assert not _lane_actors(), "a Ray lane outlived the search it served"


def test_a_run_checks_its_ray_cluster_before_it_starts(tmp_path):
    home = tmp_path / "home"
    out = _kgen(home, "Triton softmax for H100", "--executor", "ray", "--ray-address", "127.0.0.1:1",
                "--device", "cpu")
    assert out.returncode == 2 and "could not reach a Ray cluster at '127.0.0.1:1'" in out.stderr, out.stderr
    assert not (home / "runs").exists()  # refused before a run folder was made
