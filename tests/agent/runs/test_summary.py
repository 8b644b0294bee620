"""The final table a person reads after a run: figures, notes and where the kernel is."""

from __future__ import annotations

import io

from rich.console import Console

from kgen.agent.llm.usage import ModelUsage, UsageLedger
from kgen.agent.runs.summary import BestKernel, Evidence, RunSummary, no_gpu_note, render_summary

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
    assert "3 candidate(s): 3 passed\n" in text
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
    assert "5 candidate(s): 2 passed, rejected: not_a_kernel 1, numerical_mismatch 2" in text


def test_model_usage_line_counts_calls_tokens_and_cost():
    ledger = UsageLedger(models={
        "openai:gpt-5": ModelUsage(calls=3, input_tokens=3000, output_tokens=1200, cost_usd=0.0158),
        "openai:local@http://127.0.0.1:8000/v1": ModelUsage(calls=2, input_tokens=800,
                                                           output_tokens=300, unpriced_calls=2),
    })
    run = summary(mode="models: openai:gpt-5", best={"h100": timed_winner()}, candidates=6,
                  passed=2, no_code=1, usage=ledger.model_dump(mode="json"))
    text = render(run)
    assert "models: 5 call(s), 5300 tokens, $0.0158 (2 call(s) unpriced)" in text
    assert "6 candidate(s): 2 passed, 1 without code" in text


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
