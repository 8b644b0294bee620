"""What `kgen bench` and `kgen solve` print at the end: the suite's table for a person, or with
``--markdown`` the markdown table (``suite.md``) for a file.

The markdown is written as text, never laid out by Rich: one table row per line whatever the
width, so ``kgen bench ... --markdown > table.md`` is valid markdown (the terminal-width
rendering once hard-wrapped its rows). By default the table is a terminal table that folds its
text cells at spaces (``kgen.cli.terminal``'s width rule); suite.md is on disk either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kgen.cli.terminal import console, new_table, print_table, print_text
from kgen.evals.suites.suite import (
    SuiteRow,
    SuiteSummary,
    _fast_line,
    _fmt,
    _speedup_cell,
    _verdict_text,
)

#: the terminal table's columns; all but the verdict (which may carry a reason) stay whole
_COLUMNS = ("problem", "verdict", "time ms", "%SOL", "vs eager", "vs compile")


def print_suite_result(rows: Sequence[SuiteRow], summary: SuiteSummary, markdown_file: Path | None,
                       *, markdown: bool, out: Console | None = None) -> None:
    """The suite's table: ``markdown_file``'s text as written when ``markdown``, else a
    terminal table of the rows and the figures under it."""
    out = out or console
    if markdown:
        if markdown_file is not None and markdown_file.is_file():
            print_text(markdown_file.read_text(encoding="utf-8"), out)
        return
    table = new_table(None, *_COLUMNS, whole=tuple(c for c in _COLUMNS if c != "verdict"))
    for row in rows:
        table.add_row(
            escape(row.problem), escape(_verdict_text(row)), _fmt(row.candidate_ms, 3), _fmt(row.pct_of_sol, 3, "%"),
            _speedup_cell(row, "eager", row.speedup_vs_eager),
            _speedup_cell(row, "torch.compile", row.speedup_vs_compile),
        )
    print_table(table, out)
    for line in summary_lines(summary):
        out.print(escape(line), highlight=False, soft_wrap=True)


def summary_lines(summary: SuiteSummary) -> list[str]:
    """The suite's figures under its table: correct and timed counts, fast_p, geomeans."""
    return [
        f"{summary.correct} of {summary.problems} correct, {summary.timed} timed.",
        _fast_line("fast_p vs eager", summary.fast_p_vs_eager),
        _fast_line("fast_p vs torch.compile", summary.fast_p_vs_compile),
        f"geomean speedup over correct timed problems: {_fmt(summary.geomean_speedup_vs_eager, 3, 'x')} "
        f"vs eager, {_fmt(summary.geomean_speedup_vs_compile, 3, 'x')} vs torch.compile",
    ]
