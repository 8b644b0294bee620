"""The timing stage on a real context. Its rejections (timers tampered with, deferred work, a
timed output that is wrong, a time under the speed-of-light floor) need a GPU to time on; on
the CPU it must record that nothing was measured, never a figure."""

from __future__ import annotations

from pathlib import Path

from kgen.evals.verdict import StageStatus
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
