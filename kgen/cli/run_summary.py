"""What a person reads after a run (`kgen run`, `kgen resume`): per target the best kernel, its
figures and evidence, then the run's counts, where the evaluations' time went and the notes.

The tables follow kgen's width rule (``kgen.cli.terminal.print_table``): at 80 columns the
evidence wraps at spaces, names and figures stay whole. A table's heading is a line of its
own, wrapped at the console's width, never at the table's (a narrow table's title wrapped
after three words). The data is the run's ``RunSummary`` (``kgen.agent.runs.summary``), the
same object ``kgen.generate()`` returns.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from kgen.agent.runs.summary import (
    EvaluationTime,
    RunSummary,
    busy_line,
    speedup_cell,
    top_level_phases,
)
from kgen.cli.terminal import new_table, print_table
from kgen.core.text import counted
from kgen.evals.timeline import OTHER

#: the run table's columns; all but the evidence are names and figures, never wrapped
_RUN_COLUMNS = ("target", "kernel", "ms", "vs eager", "vs compile", "%SOL", "verified")

#: a phase under this share of the evaluations' seconds (it prints as 0%) goes into the table's
#: "more phases" row: the table says where the time went, not every step that took none
SHOWN_PHASE_SHARE = 0.01


def render_summary(summary: RunSummary, console: Console) -> None:
    """The final table: per target, best time, speedups, %SOL and the verification evidence.
    A request over several backends prints each backend's table, then the fastest per target."""
    if summary.by_backend:
        for backend_summary in summary.by_backend.values():
            render_summary(backend_summary, console)
            console.print()
        for note in summary.notes:
            _line(console, f"note: {note}")
        for target, best in summary.best.items():
            _path_line(console, f"{target}: best kernel {best.candidate} ({best.backend}): {best.module}")
        _path_line(console, f"run directory: {summary.run_dir}")
        return
    _heading(console, f"kgen run {summary.run_id}: {summary.problem} ({summary.backend})")
    table = new_table(None, *_RUN_COLUMNS, whole=_RUN_COLUMNS[:-1])
    for target in summary.targets:
        best = summary.best.get(target)
        if best is None:
            table.add_row(target, "-", "-", "-", "-", "-", "no verified kernel")
            continue
        ev = best.evidence
        verified = (f"{ev.trials} trials, {len(ev.seeds)} seeds, {len(ev.shapes)} shapes, "
                    f"{len(ev.distributions)} distributions on {ev.device}")
        if best.timing_note:  # figures from another GPU (or none) say nothing about this target
            table.add_row(target, best.candidate, "-", "-", "-", "-", escape(verified))
            continue
        table.add_row(target, best.candidate, _num(best.time_ms),
                      escape(speedup_cell(best, "eager", best.speedup_vs_eager)),
                      escape(speedup_cell(best, "torch.compile", best.speedup_vs_compile)),
                      _num(best.pct_of_sol, "{:.0f}"), escape(verified))
    print_table(table, console)
    for target, best in summary.best.items():
        if best.timing_note:
            _line(console, f"{target}: {best.timing_note}")
        if best.compile_report:
            _line(console, f"{target} cross-compile: " + "; ".join(best.compile_report))
        _path_line(console, f"{target} kernel: {best.module}")
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(summary.rejected.items()))
    _line(console, f"{counted(summary.candidates, 'candidate')}: {summary.passed} passed"
          + (f", rejected: {rejected}" if rejected else "")
          + (f", {summary.no_code} without code" if summary.no_code else ""))
    render_evaluation_time(summary, console)
    usage = summary.usage
    if usage.get("total_calls"):
        cost = usage.get("total_cost_usd") or 0.0
        _line(console, f"models: {counted(usage['total_calls'], 'call')}, {usage['total_tokens']} tokens, "
              f"${cost:.4f}" + (f" ({counted(usage['unpriced_calls'], 'call')} unpriced)"
                                if usage.get("unpriced_calls") else ""))
    for note in summary.notes:
        _line(console, f"note: {note}")
    if summary.no_model_code:
        console.print(Text("no model produced code: " + (
            "the kernel above is the knowledge base's, re-measured; check the models (`kgen doctor`)"
            if summary.best else "check the models (`kgen doctor`)"), style="bold"), highlight=False)
    _path_line(console, f"run directory: {summary.run_dir}")


def shown_phases(phase_seconds: dict[str, float]) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The top-level phases the table shows (those with a share of the time, longest first,
    kgen's unattributed remainder last) and the rest, each under ``SHOWN_PHASE_SHARE`` of the
    total: a CPU run listed 18 phases, 11 of them at 0.00 s and 6 more at 0%."""
    phases = sorted(top_level_phases(phase_seconds).items(), key=lambda item: (item[0] == OTHER, -item[1]))
    least = SHOWN_PHASE_SHARE * sum(seconds for _, seconds in phases)
    return [p for p in phases if p[1] >= least], [p for p in phases if p[1] < least]


def render_evaluation_time(summary: RunSummary, console: Console) -> None:
    """A short table of where the evaluations' seconds went, and how busy they kept the GPU."""
    spent = EvaluationTime.model_validate(summary.model_dump(include=set(EvaluationTime.model_fields)))
    shown, rest = shown_phases(spent.phase_seconds)
    if not shown and not rest:
        return
    total = sum(seconds for _, seconds in shown + rest) or 1.0
    _heading(console, "evaluation time by phase (all evaluations)")
    table = new_table(None, "phase", "s", "share", whole=("phase", "s", "share"))
    for column in table.columns[1:]:
        column.justify = "right"
    rows = shown + ([(f"{len(rest)} more phases", sum(s for _, s in rest))] if len(rest) > 1 else rest)
    for name, seconds in rows:
        table.add_row(escape(name), f"{seconds:.2f}", f"{100 * seconds / total:.0f}%")
    print_table(table, console)
    _line(console, busy_line(spent))


def _heading(console: Console, text: str) -> None:
    """A table's heading: a line of its own, wrapped at the console's width, not the table's."""
    console.print(Text(text, style="table.title"), highlight=False)


def _line(console: Console, text: str) -> None:
    """A line of the summary (a count, a note, a compile report): wrapped at the console's width,
    at spaces."""
    console.print(Text(text), highlight=False)


def _path_line(console: Console, text: str) -> None:
    """A line that ends in a path: as written, never folded, so the path can be copied whole (a
    path wider than the terminal is wrapped by the terminal, not cut into lines)."""
    console.print(Text(text), highlight=False, soft_wrap=True)


def _num(value: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if value is None else fmt.format(value)
