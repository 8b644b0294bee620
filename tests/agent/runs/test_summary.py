"""The final table a person reads after a run: figures, notes and where the kernel is."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kgen.agent.llm.usage import ModelUsage, UsageLedger
from kgen.agent.runs.summary import (
    BestKernel,
    EvaluationTime,
    Evidence,
    RunSummary,
    busy_line,
    evaluation_time,
    no_gpu_note,
    render_summary,
)
from kgen.backends.device import Device
from kgen.evals.placement import Placement
from kgen.evals.result import EvalResult
from kgen.evals.timeline import Span, Timeline

NO_GPU_NOTE = no_gpu_note("triton")

RUN_ID = "20261122-081500-3fa9c1"
RUN_DIR = f"/home/someone/.kgen/runs/{RUN_ID}"


def evidence(device: str) -> Evidence:
    return Evidence(
        device=device, trials=9, seeds=[11, 22, 33],
        shapes=[{"ROWS": 37, "HIDDEN": 96}, {"ROWS": 1000, "HIDDEN": 4095},
                {"ROWS": 3, "HIDDEN": 8192}, {"ROWS": 2048, "HIDDEN": 16}],
        distributions=["normal", "large", "small", "zipf", "outliers"],
        checks_passed=["correctness", "mutation"], max_rel_l2_error=1e-3,
    )


def summary(**changes) -> RunSummary:
    fields = dict(
        run_id=RUN_ID, run_dir=RUN_DIR, request="Triton RMSNorm backward for H100",
        problem="rmsnorm_backward", backend="triton", targets=["h100"],
        mode="offline (tuning known kernels)", device="cuda", candidates=3, passed=3,
    )
    fields.update(changes)
    return RunSummary(**fields)


def timed_winner() -> BestKernel:
    return BestKernel(
        target="h100", candidate="g1-c02", module=f"{RUN_DIR}/best_h100.py", origin="mutation",
        time_ms=0.0123, eager_ms=0.031, compile_ms=0.0154, speedup_vs_eager=2.52,
        speedup_vs_compile=1.25, pct_of_sol=78.4, device_name="NVIDIA H100 80GB HBM3",
        evidence=evidence("cuda"),
        compile_report=["_rmsnorm_bwd_rows on h100: 58 registers/thread, 0 spills"],
    )


def untimed_winner(target: str = "h100") -> BestKernel:
    return BestKernel(
        target=target, candidate="g0-c00", module=f"{RUN_DIR}/best_{target}.py",
        origin="knowledge_base", timing_note="not timed: no GPU here", evidence=evidence("cpu"),
        compile_report=[f"_rmsnorm_bwd_rows on {target}: 58 registers/thread, 0 spills"],
    )


def render(run: RunSummary) -> str:
    out = io.StringIO()
    render_summary(run, Console(file=out, width=100))
    return out.getvalue()


def row(text: str, target: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"│ {target} "))


def test_a_timed_winner_shows_its_time_speedups_and_evidence():
    text = render(summary(best={"h100": timed_winner()}))
    assert f"kgen run {RUN_ID}: rmsnorm_backward (triton)" in text
    h100 = row(text, "h100")
    assert "g1-c02" in h100 and "0.0123" in h100
    assert "2.52x" in h100 and "1.25x" in h100 and "78" in h100
    assert "9 trials, 3 seeds, 4 shapes, 5" in text and "distributions on cuda" in text
    assert "h100 cross-compile: _rmsnorm_bwd_rows on h100: 58 registers/thread, 0 spills" in text
    assert f"h100 kernel: {RUN_DIR}/best_h100.py" in text
    assert "3 candidates: 3 passed\n" in text
    assert f"run directory: {RUN_DIR}" in text
    assert "not timed" not in text and "note:" not in text and "models:" not in text


def test_a_cpu_run_says_nothing_was_timed_and_shows_no_figures():
    text = render(summary(device="cpu", best={"h100": untimed_winner()}, notes=[NO_GPU_NOTE]))
    h100 = row(text, "h100")
    assert "g0-c00" in h100 and "distributions on cpu" in text
    cells = [cell.strip() for cell in h100.split("│")[1:-1]]
    assert cells[2:6] == ["-", "-", "-", "-"]  # ms, vs eager, vs compile, %SOL
    assert "h100: not timed: no GPU here" in text
    assert f"note: {NO_GPU_NOTE}" in text
    assert "h100 cross-compile: _rmsnorm_bwd_rows on h100" in text


def test_a_target_without_a_verified_kernel_is_a_row_and_a_note():
    run = summary(
        device="cpu", targets=["h100", "mi300x"], best={"h100": untimed_winner()},
        candidates=5, passed=2, rejected={"numerical_mismatch": 2, "not_a_kernel": 1},
        notes=[NO_GPU_NOTE, "no verified kernel for mi300x (3 candidate(s) tried)"],
    )
    text = render(run)
    assert "no verified kernel" in row(text, "mi300x")
    assert "mi300x kernel:" not in text and "mi300x cross-compile" not in text
    assert "note: no verified kernel for mi300x (3 candidate(s) tried)" in text
    assert "5 candidates: 2 passed, rejected: not_a_kernel 1, numerical_mismatch 2" in text


def test_model_usage_line_counts_calls_tokens_and_cost():
    ledger = UsageLedger(models={
        "openai:gpt-5": ModelUsage(calls=3, input_tokens=3000, output_tokens=1200, cost_usd=0.0158),
        "openai:local@http://127.0.0.1:8000/v1": ModelUsage(calls=2, input_tokens=800,
                                                           output_tokens=300, unpriced_calls=2),
    })
    run = summary(mode="models: openai:gpt-5", best={"h100": timed_winner()}, candidates=6,
                  passed=2, no_code=1, usage=ledger.model_dump(mode="json"))
    text = render(run)
    assert "models: 5 calls, 5300 tokens, $0.0158 (2 calls unpriced)" in text
    assert "6 candidates: 2 passed, 1 without code" in text


def test_figures_measured_on_another_gpu_are_not_shown_as_the_targets():
    on_a100 = timed_winner().model_copy(update={
        "device_name": "NVIDIA A100-SXM4-80GB", "timing_note": "timed on NVIDIA A100-SXM4-80GB, not on h100",
    })
    text = render(summary(best={"h100": on_a100}))
    assert "h100: timed on NVIDIA A100-SXM4-80GB, not on h100" in text
    cells = [cell.strip() for cell in row(text, "h100").split("│")[1:-1]]
    assert cells[2:6] == ["-", "-", "-", "-"]


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


def test_the_final_table_says_where_the_evaluation_time_went_and_how_busy_the_gpu_was():
    spent = evaluation_time([_evaluated(0.0, 3.0, other_s=0.5), _evaluated(10.0, 1.0)])
    text = render(summary(best={"h100": timed_winner()}, **spent.model_dump()))
    assert "evaluation time by phase" in text
    lines = [line for line in text.splitlines() if line.startswith("│ ")]
    phases = [line.split("│")[1].strip() for line in lines if line.split("│")[1].strip() in
              ("open_context", "correctness", "other", "correctness.trial")]
    assert phases == ["correctness", "open_context", "other"]  # top level, longest first, the remainder last
    assert any("correctness" in line and "4.00" in line and "62%" in line for line in lines)  # 4 of 6.5 s
    assert "GPU busy 33% of the 12.0 s from the first evaluation's start to the last one's end" in text
    assert "evaluation time" not in render(summary(best={"h100": timed_winner()}))  # an old run: no table
