"""A batch: verified in parallel, then timed one at a time in fresh verifiers, merged into one
result per candidate as a single evaluation would have given it.

On the CPU the timing stage only says it needs a GPU; these tests force the two phases there
so the ordering, the merge, the spares and the early results are checked without one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kgen.backends.device import Device
from kgen.evals.batch import default_workers, evaluate_batch, merge_timing
from kgen.evals.harness import EvalOptions
from kgen.evals.result import EvalResult
from kgen.evals.sandbox import worker_pool
from kgen.evals.sandbox.lifecycle import live_groups
from kgen.evals.verdict import InconclusiveCause, RejectionClass, StageResult, StageStatus, Verdict

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


def _result(verdict=Verdict.PASSED, **fields) -> EvalResult:
    base = dict(problem="relu", problem_path="p.py", candidate="c.py", backend="triton", device="cuda", verdict=verdict,
                stages=[StageResult(name="correctness", status=StageStatus.PASSED, message="ok")], seconds=5.0)
    return EvalResult(**{**base, **fields})


def test_a_timing_adds_its_stage_figures_and_seconds():
    timed = _result(stages=[StageResult(name="static", status=StageStatus.PASSED, message=""),
                            StageResult(name="timing", status=StageStatus.PASSED, message="median 0.1 ms")],
                    bench={"measurements": {"candidate": {"median_ms": 0.1}}}, seconds=3.0)
    merged = merge_timing(_result(), timed)
    assert merged.passed and [s.name for s in merged.stages] == ["correctness", "timing"]
    assert merged.bench is not None and merged.bench.median("candidate") == 0.1
    assert merged.seconds == 8.0


@pytest.mark.parametrize(("verdict", "fields"), [
    (Verdict.REJECTED, {"rejection": RejectionClass.DEFERRED_WORK, "reason": "deferred_work: 0.2 ms per call"}),
    (Verdict.INCONCLUSIVE, {"inconclusive": InconclusiveCause.HARNESS_OOM, "reason": "the device ran out"}),
])
def test_a_timing_that_rejects_or_cannot_finish_decides_the_verdict(verdict, fields):
    merged = merge_timing(_result(), _result(verdict, **fields))
    assert merged.verdict is verdict
    assert merged.rejection == fields.get("rejection") and merged.inconclusive == fields.get("inconclusive")
    assert fields["reason"] in merged.reason and "timed in a second verifier" in merged.reason


def test_workers_follow_the_host_cores_on_a_gpu_and_stay_one_on_the_cpu(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert default_workers(Device.CUDA) == 5 and default_workers(Device.CPU) == 1
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_workers(Device.CUDA) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_batch_verifies_then_times_the_passed_ones_in_order_with_each_result_as_it_comes():
    candidates = [SOLUTION, WRONG, AUTOTUNED]
    heard: list[tuple[int, str]] = []
    phases: list[str] = []
    options = EvalOptions(device="cpu", bench=True, n_seeds=1, distributions=False, timeout_s=240)
    results = evaluate_batch(RELU, candidates, options, workers=2, two_phase=True,
                             on_result=lambda i, r: heard.append((i, r.outcome)), on_phase=phases.append)
    assert [r.candidate for r in results] == [str(c) for c in candidates]
    assert [r.outcome for r in results] == ["passed", "numerical_mismatch", "passed"]
    # the wrong one is known after the first phase, before any timing
    assert heard[0] == (1, "numerical_mismatch") and sorted(heard) == [(0, "passed"), (1, "numerical_mismatch"), (2, "passed")]
    assert phases[0].startswith("verifying 3 candidate(s), 2 at a time") and phases[1].startswith("timing 2")
    for result in (results[0], results[2]):
        names = [s.name for s in result.stages]
        # verification's stages, then the second verifier's timing stage (skipped on a CPU)
        assert names[:3] == ["static", "load", "correctness"] and names[-1] == "timing", names
        assert result.trials, "the verification's trials are kept"
    assert "timing" not in [s.name for s in results[1].stages]
    assert len(worker_pool.spares()) <= 1  # the timings used the spares; at most the next one waits


@pytest.mark.parametrize("count", [1, 3], ids=["one by one", "two phases"])
def test_before_timing_is_waited_for_before_anything_is_timed(monkeypatch, count):
    """A caller's own verification beside the batch (the agent's final one) ends before the
    batch times anything: before the timing phase, or before each evaluation that times."""
    from kgen.evals import batch

    order: list[str] = []

    def fake_evaluate(problem, candidate, options):
        order.append("time" if options.timing_only or options.bench else "verify")
        return _result()

    monkeypatch.setattr(batch, "evaluate", fake_evaluate)
    for name in ("prestart", "trim", "wait_ready"):
        monkeypatch.setattr(worker_pool, name, lambda *a, **k: None)
    options = EvalOptions(device=Device.CUDA, bench=True)
    evaluate_batch(RELU, [SOLUTION] * count, options, workers=2,
                   before_timing=lambda: order.append("before_timing"))
    if count == 1:
        assert order == ["before_timing", "time"]
    else:
        assert order == ["verify"] * 3 + ["before_timing"] + ["time"] * 3
    order.clear()
    evaluate_batch(RELU, [SOLUTION], options.model_copy(update={"bench": False}),
                   before_timing=lambda: order.append("before_timing"))
    assert order == ["verify"]  # nothing timed: nothing to wait for
