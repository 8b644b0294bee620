"""What `kgen bench` and `kgen solve` print at the end: the suite's table for a person, or with
``--markdown`` the markdown table (``suite.md``) for a file.

The markdown is written as text, never laid out by Rich: one table row per line whatever the
width, so ``kgen bench ... --markdown > table.md`` is valid markdown (the terminal-width
rendering once hard-wrapped its rows). By default the table is a terminal table at the console's
width (``kgen.cli.terminal``'s width rule): problem names break after an underscore, verdicts
wrap at spaces, and a figure column with nothing in it (no timings without a GPU) is left out.
It shows the rows asked for (``kgen solve --only``: the selected problems) and says in one line
how many other problems the suite has; suite.md lists every problem either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kgen.cli.terminal import NameCell, console, new_table, print_table, print_text
from kgen.core.text import counted
from kgen.evals.suites.suite import (
    SuiteRow,
    SuiteSummary,
    _fmt,
    _speedup_cell,
    _verdict_text,
    fast_line,
)

#: a figure cell with nothing measured (``suite._fmt`` of None)
_EMPTY = "-"


def print_suite_result(rows: Sequence[SuiteRow], summary: SuiteSummary, markdown_file: Path | None,
                       *, markdown: bool, out: Console | None = None) -> None:
    """The suite's table: ``markdown_file``'s text as written when ``markdown``, else a
    terminal table of ``rows`` (all of the suite's, or those selected) and the figures under it."""
    out = out or console
    if markdown:
        if markdown_file is not None and markdown_file.is_file():
            print_text(markdown_file.read_text(encoding="utf-8"), out)
        return
    cells = [(NameCell(row.problem), escape(_verdict_text(row)), *_figures(row)) for row in rows]
    columns = ("problem", "verdict", "time ms", "%SOL", "vs eager", "vs compile")
    # a figure column empty in every row (nothing timed: no GPU) says nothing: left out
    kept = [i for i in range(len(columns)) if i < 2 or any(cell[i] != _EMPTY for cell in cells)]
    table = new_table(None, *(columns[i] for i in kept), whole=tuple(columns[i] for i in kept if i >= 2))
    for cell in cells:
        table.add_row(*(cell[i] for i in kept))
    print_table(table, out)
    lines = summary_lines(summary)
    if len(rows) < summary.problems:
        others = summary.problems - len(rows)
        where = f"; {markdown_file.name} lists all {summary.problems}" if markdown_file is not None else ""
        lines.insert(0, f"{counted(others, 'other problem')} of the suite {'was' if others == 1 else 'were'} "
                        f"not selected: not in this table{where}.")
    for line in lines:  # prose: wrapped at spaces to the width, as the table's text cells are
        out.print(escape(line), highlight=False)


def _figures(row: SuiteRow) -> tuple[str, str, str, str]:
    """A row's time, %SOL and speedups as the table prints them."""
    return (_fmt(row.candidate_ms, 3), _fmt(row.pct_of_sol, 3, "%"),
            _speedup_cell(row, "eager", row.speedup_vs_eager),
            _speedup_cell(row, "torch.compile", row.speedup_vs_compile))


def summary_lines(summary: SuiteSummary) -> list[str]:
    """The suite's figures under its table: correct and timed counts (and, when only some
    problems were selected, how many of those are correct: they decide the exit code), fast_p
    and geomeans over the whole suite."""
    counts = f"{summary.correct} of {summary.problems} correct, {summary.timed} timed."
    if summary.has_selection:
        counts = (f"{summary.selected_correct} of {counted(summary.selected, 'selected problem')} correct "
                  f"(they decide the exit code); the suite: {counts}")
    return [
        counts,
        fast_line("fast_p vs eager", summary.fast_p_vs_eager),
        fast_line("fast_p vs torch.compile", summary.fast_p_vs_compile),
        f"geomean speedup over correct timed problems: {_fmt(summary.geomean_speedup_vs_eager, 3, 'x')} "
        f"vs eager, {_fmt(summary.geomean_speedup_vs_compile, 3, 'x')} vs torch.compile",
    ]
