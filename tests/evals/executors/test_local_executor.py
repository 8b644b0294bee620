"""The local executor's choices without a GPU: which GPUs get a lane, how many verifiers a
lane runs, and that one GPU (or none) keeps the caller's own process as the lane."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.backends.device import Device
from kgen.errors import KgenUsageError
from kgen.evals import placement
from kgen.evals.executors import local
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.lane import default_slots
from kgen.evals.executors.local import LocalExecutor, lane_gpus
from kgen.evals.executors.session import ExecutorChoice, choose, chosen, close_all, executor_for
from kgen.evals.harness import EvalOptions

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
SOLUTION = FIXTURES / "candidates" / "relu_kernelbench_solution.py"


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(placement, "_device_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_every_visible_gpu_gets_a_lane_and_gpus_takes_the_first_n(four_gpus, monkeypatch):
    assert lane_gpus(Device.CUDA, None) == [0, 1, 2, 3]
    assert lane_gpus(Device.CUDA, 2) == [0, 1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(placement, "_device_count", lambda: 2)
    assert lane_gpus(Device.CUDA, None) == [2, 3]  # the host's numbers, as CUDA_VISIBLE_DEVICES names them
    with pytest.raises(KgenUsageError, match="--gpus 3: this host shows 2 GPU"):
        lane_gpus(Device.CUDA, 3)
    assert lane_gpus(Device.CPU, None) == []  # a CPU run: the caller's process is the lane


def test_gpus_named_by_uuid_are_counted_in_order(monkeypatch):
    monkeypatch.setattr(placement, "_device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    assert placement.visible_gpu_indices() == [0, 1]


def test_lanes_on_one_host_share_its_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert default_slots(Device.CUDA, lanes=1) == 8 and default_slots(Device.CUDA, lanes=4) == 8
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert default_slots(Device.CUDA, lanes=4) == 2 and default_slots(Device.CPU, lanes=4) == 1


def test_one_gpu_or_none_keeps_the_lane_in_this_process(four_gpus, monkeypatch):
    started: list[int] = []
    monkeypatch.setattr(local, "ProcessLane", lambda *a, **k: started.append(a[0]))
    executor = LocalExecutor(Device.CPU)
    assert [p.lane for p in executor.lanes()] == ["cpu0"] and executor.handles() == []
    (result,) = executor.evaluate([EvalJob.of(RELU, SOLUTION, EvalOptions(device="cpu", n_seeds=1,
                                                                          distributions=False))])
    assert result.passed and result.placement.lane == "cpu0" and result.placement.gpu_index is None
    assert started == []
    executor.close()


def test_the_process_keeps_one_executor_per_choice_and_closes_it_on_a_new_choice():
    before = chosen()
    try:
        choose(ExecutorChoice())
        first = executor_for(Device.CPU)
        assert executor_for(Device.CPU) is first
        choose(ExecutorChoice(gpus=1))
        assert executor_for(Device.CPU) is not first
        assert ExecutorChoice.of({"executor": "ray", "ray_address": "h:1", "gpus": None, "out": "x"}) == \
            ExecutorChoice(executor="ray", ray_address="h:1")
    finally:
        choose(before)
        close_all()


def test_a_bad_executor_for_bench_is_a_one_line_usage_error(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "KGEN_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-m", "kgen.cli", "bench", "--executor", "bogus", "--device", "cpu"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2 and "error: executor: expected one of local, ray, got 'bogus'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
