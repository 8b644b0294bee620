"""The table a person reads after a run (kgen/cli/run_summary.py): figures, notes and where the
kernel is, at the terminal's width; where the evaluations' time went, phases that took none
left out of the table."""

from __future__ import annotations

import io
import re

from kgen.agent.llm.usage import ModelUsage, UsageLedger
from kgen.agent.runs.summary import BestKernel, Evidence, RunSummary, evaluation_time, no_gpu_note
from kgen.cli.run_summary import render_summary
from kgen.cli.terminal import make_console
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


def render(run: RunSummary, width: int = 100) -> str:
    out = io.StringIO()
    render_summary(run, make_console(file=out, width=width))
    return out.getvalue()


def row(text: str, first: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"{first} "))


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_a_timed_winner_shows_its_time_speedups_and_evidence():
    text = render(summary(best={"h100": timed_winner()}), width=120)
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
    assert cells(h100)[2:6] == ["-", "-", "-", "-"]  # ms, vs eager, vs compile, %SOL
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
    assert cells(row(text, "h100"))[2:6] == ["-", "-", "-", "-"]


def _evaluated(start: float, gpu_s: float, other_s: float = 0.0) -> EvalResult:
    spans = [Span(name="open_context", start=start, seconds=1.0),
             Span(name="correctness.trial", start=start + 1.0, seconds=gpu_s, gpu=True),
             Span(name="correctness", start=start + 1.0, seconds=gpu_s)]
    if other_s:
        spans.append(Span(name="other", start=start + 1.0 + gpu_s, seconds=other_s))
    return EvalResult(problem="softmax", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                      verdict="passed", timeline=Timeline(spans=spans))


def test_the_final_table_says_where_the_evaluation_time_went_and_how_busy_the_gpu_was():
    spent = evaluation_time([_evaluated(0.0, 3.0, other_s=0.5), _evaluated(10.0, 1.0)])
    text = render(summary(best={"h100": timed_winner()}, **spent.model_dump()))
    assert "evaluation time by phase" in text
    names = ("open_context", "correctness", "other", "correctness.trial")
    phases = [line.split()[0] for line in text.splitlines() if line.split() and line.split()[0] in names]
    assert phases == ["correctness", "open_context", "other"]  # top level, longest first, the remainder last
    assert cells(row(text, "correctness"))[1:] == ["4.00", "62%"]  # 4 of 6.5 s
    assert "GPU busy 33% of the 12.0 s from the first evaluation's start to the last one's end" in text
    assert "evaluation time" not in render(summary(best={"h100": timed_winner()}))  # an old run: no table


#: a CPU run's phases as a real one summed them (an offline RMSNorm-backward run, 3 candidates)
CPU_RUN_PHASES = {
    "correctness": 206.45, "compile": 16.04, "open_context": 7.19, "size_plan": 6.81, "cold_start": 1.61,
    "load": 1.10, "static": 0.30, "exit": 0.26, "read_report": 0.08, "request": 0.04, "take_spare": 0.01,
    "startup": 0.006, "setup": 0.004, "report": 0.001, "spare_handover": 0.0004, "train_check": 0.0,
    "timing": 0.0, "other": 0.002, "correctness.trial": 150.0,
}


def test_phases_that_took_no_time_are_one_row_and_the_tables_fit_80_columns():
    """A CPU run's table had 18 rows, 11 of them 0.00 and 6 more 0%, under a title wrapped to the table's width."""
    run = summary(device="cpu", best={"h100": untimed_winner()}, notes=[NO_GPU_NOTE], phase_seconds=CPU_RUN_PHASES,
                  gpu_busy_fraction=0.0, evaluation_wall_s=239.9)
    text = render(run, width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    assert "evaluation time by phase (all evaluations)" in lines  # the heading whole, on one line
    shown = [cells(line) for line in lines if line.split() and line.split()[0] in CPU_RUN_PHASES]
    assert [c[0] for c in shown] == ["correctness", "compile", "open_context", "size_plan"]  # each >= 1%
    assert all(c[2] != "0%" for c in shown)
    rest = cells(row(text, "14 more phases"))  # cold_start 1.61 s ... timing 0: each under 1% of 239.9 s
    assert rest[1:] == ["3.41", "1%"], rest
    assert f"kgen run {RUN_ID}: rmsnorm_backward (triton)" in lines
