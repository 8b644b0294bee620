"""A batch: verifiers side by side, each candidate timed in the process that verified it, its
result heard as soon as it is known.

On the CPU the timing stage only says it needs a GPU (and asks for no turn); these tests force
the side-by-side batch there so the ordering, the spares and the early results are checked
without one. The turns themselves are tested with stand-in children in
``tests/evals/sandbox/test_gpu_turns.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kgen.backends.device import Device
from kgen.evals.batch import evaluate_batch
from kgen.evals.executors.lane import default_slots
from kgen.evals.executors.local import LocalExecutor
from kgen.evals.harness import EvalOptions
from kgen.evals.sandbox import worker_pool
from kgen.evals.sandbox.lifecycle import live_groups

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
SOLUTION = FIXTURES / "candidates" / "relu_kernelbench_solution.py"
WRONG = FIXTURES / "candidates" / "relu_wrong_math.py"
AUTOTUNED = FIXTURES / "candidates" / "control_relu_autotuned.py"


@pytest.fixture(autouse=True)
def _no_spares_left():
    worker_pool.close()
    yield
    worker_pool.close()
    assert live_groups() == {}, "a spare or child was left running"


def test_slots_follow_the_host_cores_on_a_gpu_and_stay_one_on_the_cpu(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert default_slots(Device.CUDA) == 8 and default_slots(Device.CPU) == 1
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert default_slots(Device.CUDA) == worker_pool.MAX_PER_KIND
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_slots(Device.CUDA) == 1
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert default_slots(Device.CUDA, lanes=4) == 2  # four GPUs' lanes share the host's cores


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_batch_runs_side_by_side_and_gives_each_result_once_in_the_order_given():
    candidates = [SOLUTION, WRONG, AUTOTUNED]
    heard: list[tuple[int, str]] = []
    phases: list[str] = []
    options = EvalOptions(device="cpu", bench=True, n_seeds=1, distributions=False, timeout_s=240)
    results = evaluate_batch(RELU, candidates, options, executor=LocalExecutor(Device.CPU, slots=2), side_by_side=True,
                             on_result=lambda i, r: heard.append((i, r.outcome)), on_phase=phases.append)
    assert [r.candidate for r in results] == [str(c) for c in candidates]
    assert [r.outcome for r in results] == ["passed", "numerical_mismatch", "passed"]
    assert sorted(heard) == [(0, "passed"), (1, "numerical_mismatch"), (2, "passed")]
    assert phases == ["evaluating 3 candidates, 2 at a time, each timed alone on the GPU"]
    for result in (results[0], results[2]):
        names = [s.name for s in result.stages]
        # one verifier: verification's stages, then its own timing stage (skipped on a CPU)
        assert names[:3] == ["static", "load", "correctness"] and names[-1] == "timing", names
        assert result.trials, "the verification's trials are kept"
    assert "timing" not in [s.name for s in results[1].stages]
    assert len(worker_pool.spares()) <= 2  # at most one spare per worker waits for the next batch


def test_a_stop_asked_before_the_batch_starts_evaluates_nothing():
    options = EvalOptions(device="cpu", bench=True, n_seeds=1, distributions=False, timeout_s=60)
    assert evaluate_batch(RELU, [SOLUTION, WRONG], options, executor=LocalExecutor(Device.CPU, slots=2), side_by_side=True, stop=lambda: True) == []
