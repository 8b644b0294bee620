"""Human-readable rendering of results for the terminal (the JSON is the machine form)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kgen.evals.result import EvalResult, StageStatus

_STATUS_STYLE = {
    StageStatus.PASSED: "[green]passed[/]",
    StageStatus.FAILED: "[bold red]FAILED[/]",
    StageStatus.SKIPPED: "[yellow]skipped[/]",
}


def verdict_line(result: EvalResult) -> str:
    """The verdict as Rich markup: only the verdict word is styled; the words around it are
    escaped, because a reason quoting ``out[i]`` would otherwise lose ``[i]`` to Rich."""
    where = "CPU (Triton interpreter)" if result.device == "cpu" else result.device.upper()
    what = escape(f"{result.problem} ← {result.candidate} on {where}: {result.reason}")
    if result.passed:
        return f"[bold green]PASSED[/] {what}"
    if result.inconclusive is not None:
        return f"[bold yellow]INCONCLUSIVE[/] ({result.inconclusive.value}) {what}"
    return f"[bold red]REJECTED[/] ({result.rejection.value if result.rejection else 'unknown'}) {what}"


def print_eval_result(result: EvalResult, console: Console) -> None:
    stages = _table("stages", "stage", "status", "seconds", "detail")
    for stage in result.stages:
        stages.add_row(stage.name, _STATUS_STYLE[stage.status], f"{stage.seconds:.1f}", escape(stage.message))
    console.print(stages)
    if result.trials:
        trials = _table("correctness trials: rel-L2 error vs the fp64 reference (worst output); eager = the reference in the problem's own dtypes",
                        "seed", "inputs", "sizes", "kernels", "rel-L2", "tol", "eager", "ok", no_wrap=True)
        for trial in result.trials:
            sizes = "x".join(str(v) for v in trial.sizes.values())
            if not trial.outputs:
                trials.add_row(str(trial.seed), trial.distribution, sizes, str(trial.launches), "-", "-", "-", "[red]no[/]")
                continue
            worst = max(trial.outputs, key=lambda o: o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300))
            native = worst.reference_dtype_rel_l2_error
            trials.add_row(
                str(trial.seed), trial.distribution.replace("accumulation_probe", "accum_probe"), sizes, str(trial.launches), f"{worst.rel_l2_error:.1e}",
                f"{worst.tolerance_rel_l2:.0e}", "-" if native is None else f"{native:.1e}",
                "[green]yes[/]" if trial.passed else "[red]no[/]",
            )
        console.print(trials)
    for note in result.skipped:
        console.print(f"[yellow]skipped:[/] {escape(note)}", highlight=False)
    if result.kernels:
        kernels = _table("cross-compiled kernels", "target", "kernel", "regs", "spills", "smem", "warps", "stages", "ok")
        for k in result.kernels:
            kernels.add_row(
                k.target, k.kernel, _opt(k.registers), _opt(k.spills),
                "-" if k.shared_bytes is None else f"{k.shared_bytes} B", _opt(k.num_warps),
                _opt(k.num_stages), "[green]yes[/]" if k.ok else f"[red]no[/] {escape(k.error or '')}",
            )
        console.print(kernels)
    if result.bench is None:
        console.print("timing: not measured (`--bench` on a GPU measures it; kgen reports only measured figures)")
    else:
        for line in result.bench.lines():
            console.print(f"timing: {escape(line)}", highlight=False, soft_wrap=True)
    console.print(verdict_line(result), highlight=False, soft_wrap=True)


def _table(title: str, *columns: str, no_wrap: bool = False) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for column in columns:
        table.add_column(column, overflow="ellipsis" if no_wrap else "fold", no_wrap=no_wrap)
    return table


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)
