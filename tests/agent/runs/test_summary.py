"""A run's summary as data: the CPU note, the evaluations' time and each GPU's share (the table
drawn from it: tests/kgen/cli/test_run_summary.py)."""

from __future__ import annotations

import pytest

from kgen.agent.runs.summary import EvaluationTime, busy_line, evaluation_time, no_gpu_note
from kgen.backends.device import Device
from kgen.evals.placement import Placement
from kgen.evals.result import EvalResult
from kgen.evals.timeline import Span, Timeline


def test_the_cpu_note_says_what_the_backend_could_do_there():
    assert "verified in Triton's CPU interpreter, not timed" in no_gpu_note("triton")
    cute = no_gpu_note("cute")
    assert "compiled for the targets, not run" in cute and "interpreter" not in cute and "--device cuda" in cute


def _evaluated(start: float, gpu_s: float, other_s: float = 0.0, lane: str | None = None) -> EvalResult:
    spans = [Span(name="open_context", start=start, seconds=1.0),
             Span(name="correctness.trial", start=start + 1.0, seconds=gpu_s, gpu=True),
             Span(name="correctness", start=start + 1.0, seconds=gpu_s)]
    if other_s:
        spans.append(Span(name="other", start=start + 1.0 + gpu_s, seconds=other_s))
    placement = Placement(host="node1", lane=lane, gpu_index=int(lane[-1])) if lane else None
    return EvalResult(problem="softmax", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                      verdict="passed", timeline=Timeline(spans=spans), placement=placement)


def test_each_gpu_of_a_run_has_its_candidates_and_busy_share_and_the_run_its_rate_per_gpu_minute():
    # gpu0 verifies two candidates, [1, 4] and [5, 8]; gpu1 one, [1, 2]; the wall is 0 .. 8 s
    results = [_evaluated(0.0, 3.0, lane="gpu0"), _evaluated(4.0, 3.0, lane="gpu0"), _evaluated(0.0, 1.0, lane="gpu1")]
    spent = evaluation_time(results)
    assert [(g.gpu, g.candidates) for g in spent.per_gpu] == [("node1/gpu0", 2), ("node1/gpu1", 1)]
    assert spent.per_gpu[0].busy_fraction == pytest.approx(6.0 / 8.0)
    assert spent.per_gpu[1].busy_fraction == pytest.approx(1.0 / 8.0)
    assert spent.candidates_per_gpu_minute == pytest.approx(3 / (8.0 / 60.0) / 2, rel=1e-3)
    line = busy_line(spent)
    assert "candidates per GPU-minute" in line
    assert "node1/gpu0 75% busy (2 candidates), node1/gpu1 12% busy (1 candidate)" in line
    one = evaluation_time([_evaluated(0.0, 3.0)])
    assert [g.gpu for g in one.per_gpu] == ["this machine"] and "per GPU:" not in busy_line(one)
    on_cpu = evaluation_time([_evaluated(0.0, 3.0).model_copy(update={"device": Device.CPU})])
    assert on_cpu.candidates_per_gpu_minute is None and "GPU-minute" not in busy_line(on_cpu)


def test_the_runs_evaluation_time_sums_phases_and_takes_the_union_of_gpu_spans():
    # two evaluations verified at once (their trials overlap by 1 s), a third after a pause,
    # and one saved before timelines (it adds nothing)
    results = [_evaluated(0.0, 3.0), _evaluated(2.0, 3.0, other_s=0.5), _evaluated(15.0, 4.0)]
    old = EvalResult(problem="softmax", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                     verdict="passed")
    spent = evaluation_time([*results, old])
    assert spent.phase_seconds == {"open_context": 3.0, "correctness.trial": 10.0, "correctness": 10.0,
                                   "other": 0.5}
    assert spent.evaluation_wall_s == 20.0  # 0 .. 20
    assert spent.gpu_busy_fraction == pytest.approx((5.0 + 4.0) / 20.0)  # [1, 6] and [16, 20]
    assert evaluation_time([old]) == EvaluationTime()


def test_a_cpu_run_is_not_told_its_gpu_was_idle():
    """A run on a machine without a GPU printed "GPU busy 0% of the 68.5 s": an idle GPU that is not there."""
    spans = [Span(name="open_context", start=0.0, seconds=1.0), Span(name="correctness", start=1.0, seconds=4.0)]
    result = EvalResult(problem="softmax", problem_path="p.py", candidate="c.py", backend="triton", device="cpu",
                        verdict="passed", timeline=Timeline(spans=spans))
    line = busy_line(evaluation_time([result]))
    assert line == ("evaluations ran on the CPU for 5.0 s from the first one's start to the last one's end "
                    "(no GPU to keep busy)")
    assert "GPU busy" not in line
