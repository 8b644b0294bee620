"""The timing stage on a real context. Its rejections (timers tampered with, deferred work, a
timed output that is wrong, a time under the speed-of-light floor) need a GPU to time on; on
the CPU it must record that nothing was measured, never a figure."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.timeline import PhaseClock, Timeline
from kgen.evals.verdict import RejectionClass, StageStatus
from kgen.evals.verifier.load_stage import LoadStage
from kgen.evals.verifier.timing_stage import TimingStage

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"


def _loaded(open_verifier, **request):
    ctx = open_verifier(CANDIDATES / "relu_kernelbench_solution.py", **request)
    LoadStage().run(ctx)
    return ctx


def test_not_asked_for_it_does_nothing(open_verifier):
    ctx = _loaded(open_verifier)
    TimingStage().run(ctx)
    assert [s.name for s in ctx.report.stages] == ["load"] and ctx.report.bench is None


def test_on_the_cpu_timings_are_recorded_as_not_measured(open_verifier):
    ctx = _loaded(open_verifier, bench=True, bench_sizes={"batch_size": 4096, "dim": 393216})
    TimingStage().run(ctx)
    stage = ctx.report.stages[-1]
    assert (stage.name, stage.status, stage.message) == ("timing", StageStatus.SKIPPED, "timings need a GPU: not measured")
    assert ctx.report.bench is None


def test_the_candidate_s_process_builds_no_baseline():
    """The figures a candidate is compared with are not its own process's to write: the stage
    neither builds torch.compile nor Liger nor reads or writes a baseline cache entry (the
    trusted baseline job times them; on a GPU only the candidate is measured here, below)."""
    import ast
    import inspect

    from kgen.evals.verifier import timing_stage

    tree = ast.parse(inspect.getsource(timing_stage))
    names = {node.attr if isinstance(node, ast.Attribute) else node.id
             for node in ast.walk(tree) if isinstance(node, ast.Attribute | ast.Name)}
    assert not names & {"compile", "liger_baseline", "BaselineUnavailable"}, names & {"compile", "liger_baseline"}


# --------------------------------------------------------------------------------------
# On a GPU: sampled timed calls, the L2's persisting state, the floor measured twice
# --------------------------------------------------------------------------------------

CUDA = torch.cuda.is_available()
PROBLEMS = FIXTURES / "problems"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_sampled_timed_calls_are_checked_and_the_l2_state_is_reset():
    result = evaluate(PROBLEMS / "relu_midsize.py", CANDIDATES / "relu_kernelbench_solution.py",
                      EvalOptions(device="cuda", n_seeds=1, small_sizes=True, bench=True, timeout_s=600))
    assert result.passed, result.reason
    timing = result.stage("timing")
    assert "timed call(s) drawn at random matched the fp64 reference" in timing.message, timing.message
    candidate = result.bench.measurements["candidate"]
    assert len(candidate.sampled_trials) == 3 and candidate.input_sets == 3
    assert "persisting lines reset" in candidate.l2_state, candidate.l2_state
    assert not candidate.flags or "deferred_work" not in " ".join(candidate.flags), candidate.flags


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_a_time_under_the_floor_is_measured_again_before_it_rejects():
    """A byte model a thousand times too large: any honest time is under its floor, stays under
    it after the re-measurement, and the rejection keeps both measurements."""
    result = evaluate(PROBLEMS / "rt4_relu_overstated_bytes.py", CANDIDATES / "relu_kernelbench_solution.py",
                      EvalOptions(device="cuda", n_seeds=1, bench=True, timeout_s=600))
    assert result.rejection is RejectionClass.TIMING_ATTACK, result.reason
    assert "first measured" in result.reason and "re-measured with fresh inputs" in result.reason
    evidence = result.stage("timing").evidence
    assert evidence["floor_recheck"]["impossible"] and evidence["first"]["median_ms"] > 0
    assert evidence["remeasured"]["median_ms"] > 0 and "persisting lines reset" in evidence["floor_recheck"]["l2_reset"]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_under_the_baseline_job_only_the_candidate_and_the_floor_are_measured(open_verifier):
    from kgen.backends.device import Device

    ctx = _loaded(open_verifier, device=Device.CUDA, bench=True,
                  bench_sizes={"batch_size": 4096, "dim": 393216})
    TimingStage().run(ctx)
    bench = ctx.report.bench
    assert set(bench.measurements) == {"candidate"}, bench.measurements
    assert bench.sync_calibration is not None  # still calibrated against the eager reference here
    assert bench.sol is not None and bench.sol["score"] is None  # scored once the job's eager is merged


def test_the_phase_clock_also_marks_each_phase_as_a_span_of_the_stage():
    timeline = Timeline()
    with timeline.span("timing"):
        phases = PhaseClock(timeline)
        phases.lap("setup")
        phases.lap("candidate", gpu=True)
        phases.lap("candidate", gpu=True)
    assert [(s.name, s.gpu) for s in timeline.spans] == [
        ("timing.setup", False), ("timing.candidate", True), ("timing.candidate", True), ("timing", False)]
    assert list(phases.seconds) == ["setup", "candidate"]  # the bench's phase_seconds, as before
    first, second, third, stage = timeline.spans
    assert first.end == pytest.approx(second.start) and second.end == pytest.approx(third.start)
    assert stage.start <= first.start and third.end <= stage.end


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_a_candidate_far_slower_than_the_best_stops_early_and_baselines_are_not_ranked():
    """A best a thousand times faster than any ReLU: the candidate's timing stops at the
    stopping rule's floor as clearly slower; eager and torch.compile are timed on precision alone."""
    from kgen.evals.timing.stopping import MIN_SAMPLES

    result = evaluate(PROBLEMS / "relu_midsize.py", CANDIDATES / "relu_kernelbench_solution.py",
                      EvalOptions(device="cuda", n_seeds=1, small_sizes=True, bench=True, timeout_s=600,
                                  rank_against_ms=1e-6))
    assert result.passed, result.reason
    candidate = result.bench.measurements["candidate"]
    assert candidate.stop_reason == "ranked_slower" and candidate.trials == MIN_SAMPLES, candidate
    assert candidate.rank_against_ms == 1e-6 and len(candidate.sampled_trials) == 3
    for name in ("eager", "torch.compile"):
        baseline = result.bench.measurements[name]
        assert baseline.rank_against_ms is None and baseline.stop_reason in ("precision", "cap"), baseline
    assert "planned trials (stopped: ranked_slower)" in result.stage("timing").message
