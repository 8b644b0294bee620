"""Human-readable rendering of results for the terminal (the JSON is the machine form)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kgen.evals.result import EvalResult, StageStatus

_STATUS_STYLE = {
    StageStatus.PASSED: "[green]passed[/]",
    StageStatus.FAILED: "[bold red]FAILED[/]",
    StageStatus.SKIPPED: "[yellow]skipped[/]",
}


def verdict_line(result: EvalResult) -> str:
    where = "CPU (Triton interpreter)" if result.device == "cpu" else result.device.upper()
    if result.passed:
        return f"[bold green]PASSED[/] {result.problem} ← {result.candidate} on {where}: {result.reason}"
    return (
        f"[bold red]REJECTED[/] ({result.rejection.value if result.rejection else 'unknown'}) "
        f"{result.problem} ← {result.candidate} on {where}: {result.reason}"
    )


def print_eval_result(result: EvalResult, console: Console) -> None:
    stages = Table(title="stages", title_justify="left", show_edge=False)
    for column in ("stage", "status", "seconds", "detail"):
        stages.add_column(column, overflow="fold")
    for stage in result.stages:
        stages.add_row(stage.name, _STATUS_STYLE[stage.status], f"{stage.seconds:.1f}", stage.message)
    console.print(stages)
    if result.trials:
        trials = Table(title="correctness trials (error vs fp64 reference)", title_justify="left", show_edge=False)
        for column in ("seed", "sizes", "launches", "output", "rel-L2 error", "tolerance", "eager in own dtype", "ok"):
            trials.add_column(column, overflow="fold")
        for trial in result.trials:
            sizes = ", ".join(f"{k}={v}" for k, v in trial.sizes.items())
            for out in trial.outputs or [None]:
                if out is None:
                    trials.add_row(str(trial.seed), sizes, str(trial.launches), "-", "-", "-", "-", "[red]no[/]")
                    continue
                native = "-" if out.reference_dtype_rel_l2_error is None else f"{out.reference_dtype_rel_l2_error:.2e}"
                trials.add_row(
                    str(trial.seed), sizes, str(trial.launches),
                    f"{out.index}: {out.dtype}{out.shape}", f"{out.rel_l2_error:.2e}",
                    f"{out.tolerance_rel_l2:.0e}", native, "[green]yes[/]" if out.passed else "[red]no[/]",
                )
        console.print(trials)
    if result.kernels:
        kernels = Table(title="cross-compiled kernels", title_justify="left", show_edge=False)
        for column in ("target", "kernel", "registers", "spills", "shared mem", "warps", "stages", "ok"):
            kernels.add_column(column, overflow="fold")
        for k in result.kernels:
            kernels.add_row(
                k.target, k.kernel, _opt(k.registers), _opt(k.spills),
                "-" if k.shared_bytes is None else f"{k.shared_bytes} B", _opt(k.num_warps),
                _opt(k.num_stages), "[green]yes[/]" if k.ok else f"[red]no[/] {k.error or ''}",
            )
        console.print(kernels)
    console.print("timing: not measured by `kgen eval` (kgen reports only measured figures, and only from a GPU)")
    console.print(verdict_line(result), highlight=False, soft_wrap=True)


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)
