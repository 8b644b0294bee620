"""The consoles every command prints to, the one rule for how wide output may be, and the one way
a command fails on bad usage.

The width rule, asked by every command that prints code or a table:

* **code and markdown are text, never laid out**: a kernel's source, a problem's reference and a
  markdown table are written line for line as they are (``print_code``, ``print_text``); Rich
  neither wraps, crops nor pads them, whatever the terminal's width and also when the output is
  a file. On a terminal code is highlighted and the terminal itself soft-wraps a long line, so a
  copied line is still whole. (Syntax rendering cut every line at the console width: ``kgen kb
  show ID > file`` lost the ends of 77 source lines.)
* **tables fold cells, never words** (``print_table``): a table fits the console's width (the
  terminal's, else ``COLUMNS``, else 80) by wrapping its text cells at spaces; identifier and
  number columns (``new_table(..., whole=...)``) never wrap. A long name (KernelBench's run to
  96 characters) may break after an underscore, never inside a part (``NameCell``). Where even
  that does not fit, the table is printed as wide as it needs rather than cut: no word, name
  part or number is ever split.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from typing import IO, Any, NoReturn

import typer
from rich import box as boxes
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

#: measuring a table's natural widths: wide enough that no column is squeezed while measuring
_UNBOUNDED = 1_000_000


def make_console(*, stderr: bool = False, file: IO[str] | None = None, width: int | None = None,
                 force_terminal: bool | None = None) -> Console:
    """The one way kgen makes a console (tests make theirs here too, e.g. a terminal 80 wide)."""
    return Console(stderr=stderr, file=file, width=width, force_terminal=force_terminal)


console = make_console()
err_console = make_console(stderr=True)


def print_error(message: str) -> None:
    """``error: <message>`` on stderr, the message exactly as written.

    The message is escaped because Rich reads ``[...]`` as markup and drops what it takes
    for a tag: ``expected PROVIDER:MODEL[@BASE_URL]`` lost its ``[@BASE_URL]``, and a
    reason quoting ``x[i]`` would lose ``[i]``. Only the ``error:`` prefix is styled.
    """
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def fail_usage(message: str) -> NoReturn:
    """One line on stderr, exit code 2, never a traceback."""
    print_error(message)
    raise typer.Exit(2)


def print_text(text: str, out: Console | None = None) -> None:
    """Plain text (a markdown table, a JSON document) written exactly: no markup read, no
    highlighting, no line wrapped or cut; one trailing newline."""
    out = out or console
    out.file.write(text if text.endswith("\n") else text + "\n")
    out.file.flush()


def print_code(source: str, language: str = "python", out: Console | None = None) -> None:
    """Source code whole, every line as written: highlighted on a terminal (which soft-wraps a
    long line itself), plain text anywhere else."""
    out = out or console
    if not out.is_terminal:
        print_text(source, out)
        return
    from rich.syntax import Syntax

    # the highlighted text, not the Syntax renderable: that one crops each line to the width
    highlighted = Syntax(source, language, background_color="default").highlight(source)
    highlighted.rstrip()
    out.print(highlighted, soft_wrap=True, highlight=False)


def new_table(title: str | None, *columns: str, whole: Collection[str] = (), **layout: Any) -> Table:
    """A table for ``print_table``: text columns wrap at spaces; the ``whole`` ones (names, ids,
    numbers) never wrap. Compact by default (a rule under the header, two spaces between
    columns, no outer edge), so more of the cells fit 80 columns unwrapped; ``layout``: Rich's
    ``Table`` keywords (``box``, ``show_header``, ...) to change that."""
    layout = {"box": boxes.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "collapse_padding": True,
              **layout}
    table = Table(title=title, title_justify="left", **layout)
    for column in columns:
        table.add_column(column, no_wrap=column in whole, overflow="fold")
    return table


def print_table(table: Table, out: Console | None = None) -> None:
    """The table at the console's width, or as wide as it must be so that no word, name or
    number is split: the width rule (module docstring).

    The columns' widths are set here, not left to Rich, which squeezes a text column below its
    longest word (to two characters: "ve/rd/ic/t") when whole columns take the room.
    """
    out = out or console
    needed = fit_columns(table, out, out.width)
    if needed <= out.width:
        out.print(table)
        return
    width = out.width
    out.width = needed
    try:
        out.print(table)
    finally:
        out.width = width


def fit_columns(table: Table, out: Console, width: int) -> int:
    """Set the columns' widths so that ``table`` fits ``width`` with no word, name or number split
    (each column at least its longest word, a whole column its widest cell); returns the width
    the table needs, more than ``width`` where even that does not fit. Leaves the widths to Rich
    where the table fits as it is. `print_table` and the help tables (``command_line``) ask it."""
    unbounded = out.options.update_width(_UNBOUNDED)
    spans = [_column_span(out, column) for column in table.columns]
    overhead = Measurement.get(out, unbounded, table).maximum - sum(hi for _, hi in spans)
    room = width - overhead
    if sum(hi for _, hi in spans) > room:
        names = [i for i, column in enumerate(table.columns)
                 if column.cells and all(isinstance(cell, NameCell) for cell in column.cells)]
        for column, fitted in zip(table.columns, _fit(spans, room, first=names), strict=True):
            column.width = fitted
    return overhead + sum(column.width or hi for column, (_, hi) in zip(table.columns, spans, strict=True))


def _column_span(out: Console, column: Column) -> tuple[int, int]:
    """A column's content width: (narrowest it may be, widest it needs). The narrowest is its
    longest word, or its widest cell for a column that never wraps."""
    unbounded = out.options.update_width(_UNBOUNDED)
    lo = hi = 0
    for cell in (column.header, *column.cells):
        renderable = out.render_str(cell) if isinstance(cell, str) else cell
        measured = Measurement.get(out, unbounded, renderable)
        lo, hi = max(lo, measured.minimum), max(hi, measured.maximum)
    return (hi, hi) if column.no_wrap else (lo, hi)


def _fit(spans: list[tuple[int, int]], room: int, first: Collection[int] = ()) -> list[int]:
    """Column widths within ``room`` where they fit: each column gets its narrowest; the room
    left goes first to the ``first`` columns (names: whole where they fit in half the room, so
    that a short name never breaks for a long verdict, nor a long name squeezes the verdict
    into a word a line), then one character at a time to the column that lacks most of its widest."""
    widths = [lo for lo, _ in spans]
    spare = room - sum(widths)
    for index in first:
        grow = max(0, min(spare, min(spans[index][1], room // 2) - widths[index]))
        widths[index] += grow
        spare -= grow
    while spare > 0:
        lacking = [(hi - width, index) for index, (width, (_, hi)) in enumerate(zip(widths, spans, strict=True))]
        lack, index = max(lacking)
        if lack <= 0:
            break
        widths[index] += 1
        spare -= 1
    return widths


class NameCell:
    """A name in a table cell that breaks only after an underscore, never inside a part:
    ``75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped____padded____dilated__``
    is two lines of whole parts at 80 columns, where kept whole it made the table 146 wide.
    Its column is a text column (not ``whole``): its narrowest is its longest part."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parts: list[str] = re.findall(r"[^_]*_+|[^_]+", name) or [""]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(max(cell_len(part) for part in self.parts), cell_len(self.name))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        lines = [""]
        for part in self.parts:
            if lines[-1] and cell_len(lines[-1] + part) > options.max_width:
                lines.append("")
            lines[-1] += part
        yield Text("\n".join(lines))

