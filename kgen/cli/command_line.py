"""From the process's arguments to a command: the default command, options written before the
request, and parse errors as one plain line.

* ``kgen "softmax"`` is ``kgen run "softmax"``, and so is ``kgen --budget 2 "softmax"``: options
  of `kgen run` written before the request are `kgen run`'s. Options written before another
  command (``kgen --device cpu eval ...``) are refused with where they go.
* A parse error (an unknown option, a missing argument, a value of the wrong type) is one line,
  ``error: ...; see `kgen run --help```, exit 2, like every other usage error; typer's boxed
  panel is for help, not for errors.
* A flag takes no value, so `--help` shows none after it (typer printed ``<bool>``).
* ``-h`` is ``--help`` for every command (``HELP_OPTION_NAMES``).
* Help tables follow the width rule of every table (``kgen.cli.terminal``): only the prose
  wraps, at spaces; an option's name, a type, a word is never cut (typer's own layout cut
  ``--no-distributions`` to ``--no-distributi…`` at 80 columns).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import typer
from rich.table import Table

from kgen.cli.terminal import fit_columns
from kgen.errors import KgenUsageError

#: the help option's names, for `kgen` and every command under it
HELP_OPTION_NAMES = ["-h", "--help"]


class MisplacedOptions(KgenUsageError):
    """Options written before a command other than `kgen run`: the message says where they go."""


def _exception_class(name: str) -> type[Exception]:
    """The click exception class typer raises (typer vendors click in recent versions, so the
    class is found from one typer exports instead of importing a click module)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


UsageError = _exception_class("UsageError")


def with_default_command(argv: Sequence[str], command: Any) -> list[str]:
    """The arguments as `kgen`'s group parses them: a first argument that is neither a command
    nor one of the group's own options starts `kgen run`'s arguments (the request, or its
    options); raises ``MisplacedOptions`` for `kgen run` options written before another command."""
    argv = list(argv)
    if not argv or argv[0] == "--" or argv[0] in command.commands or _option_of(command, argv[0]):
        return argv
    if argv[0].startswith("-"):
        run = command.commands["run"]
        first = _first_positional(argv, run)
        if first is not None and argv[first] in command.commands:
            moved = [*argv[first:], *argv[:first]]
            raise MisplacedOptions(f"options go after the command: kgen {shlex.join(moved)}")
    return ["run", *argv]


def _option_of(command: Any, word: str) -> Any:
    """The option of ``command`` that ``word`` names (``--budget``, ``--budget=2``), if any."""
    name = word.split("=", 1)[0]
    context = _context(command)
    params = [*command.params, command.get_help_option(context)]
    return next((p for p in params if p is not None and name in (*p.opts, *p.secondary_opts)), None)


def _first_positional(argv: Sequence[str], command: Any) -> int | None:
    """Where the first argument that is no option of ``command`` (nor an option's value) is;
    None when there is none, or an unknown option comes first (its parser will name it)."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if not word.startswith("-") or word == "--":
            return index if word != "--" else None
        option = _option_of(command, word)
        if option is None:
            return None
        takes_value = not (option.is_flag or option.count) and "=" not in word
        index += 2 if takes_value else 1
    return None


def _context(command: Any) -> Any:
    """A context of ``command`` alone, with its settings (the help option's names among them)."""
    return typer.Context(command, **command.context_settings)


def with_short_help(command: Any) -> Any:
    """``-h`` beside ``--help`` (``HELP_OPTION_NAMES``) for ``command`` and every command under it;
    returns ``command``. Set on each command, not only the group, so that a context of one command
    alone (``_option_of``: is ``-h`` an option of `kgen`?) knows the names too. Before anything
    asks a command for its help option: click keeps the first one it makes."""
    command.context_settings = {**command.context_settings, "help_option_names": HELP_OPTION_NAMES}
    for sub in getattr(command, "commands", {}).values():
        with_short_help(sub)
    return command


def quiet_flag_metavars(command: Any) -> Any:
    """No metavar after a flag in `--help` (typer shows ``<bool>``: a flag takes no value), in
    ``command`` and every command under it; returns ``command``."""
    context = _context(command)
    for param in (*command.params, command.get_help_option(context)):
        if param is not None and getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        quiet_flag_metavars(sub)
    return command


class HelpTable(Table):
    """A table of `--help` (options, commands) laid out by the width rule of every kgen table
    (``kgen.cli.terminal.fit_columns``): each column at least its longest word, the room left to
    the columns that lack most, so the prose wraps at spaces and no name is cut. Rich alone
    shrinks the widest columns first, names included, and ends a cut one with "…"."""

    def add_row(self, *cells: Any, **layout: Any) -> None:
        """The row, with an option's help made one text: typer gives it as ``Columns`` (the help,
        then ``[default: ...]``), which has no width of its own to measure, so the width rule
        could not tell how narrow the prose may be. In an option's row (typer's: [required],
        name, short name, negative name, negative short name, type, help) the negative names go
        under the names, not in columns of their own that one option fills and every row pays
        for (``--no-distributions`` took 20 of 80 columns from the prose)."""
        if len(cells) >= 6:
            *head, name, short, negative, negative_short, kind, prose = cells
            cells = (*head, _stacked(name, negative), _stacked(short, negative_short), kind, prose)
        super().add_row(*(_one_text(cell) for cell in cells), **layout)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        fit_columns(self, console, options.max_width)
        yield from super().__rich_console__(console, options)


def _stacked(first: Any, second: Any) -> Any:
    """Two names of a help row as one cell, the second under the first (either may be empty)."""
    from rich.text import Text

    if not (isinstance(first, Text) and isinstance(second, Text)) or not second.plain:
        return first
    return Text("\n").join(part for part in (first, second) if part.plain)


def _one_text(cell: Any) -> Any:
    """A ``Columns`` of texts as one text, the parts separated by a space; any other cell as it is."""
    from rich.columns import Columns
    from rich.text import Text

    if isinstance(cell, Columns) and all(isinstance(part, Text) for part in cell.renderables):
        return Text(" ").join(part for part in cell.renderables if part.plain)
    return cell


def with_whole_help_tables() -> None:
    """typer's rich help lays out its tables with ``HelpTable`` from now on, in this process (its
    help module makes each table from the name ``Table`` it imported)."""
    import typer.rich_utils

    typer.rich_utils.Table = HelpTable  # type: ignore[misc]


def reflowed(text: str) -> str:
    """Help text whose prose paragraphs are one line each, so the terminal folds them at its
    width: typer's rich help keeps every line break of a docstring, and a docstring wrapped at
    100 columns comes out ragged at 80. Indented lines (examples), list items and ``\\b``
    blocks keep their breaks."""
    paragraphs = []
    for paragraph in text.split("\n\n"):
        if paragraph.startswith((" ", "\b")):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        for line in paragraph.split("\n"):
            if lines and not line.startswith((" ", "- ", "* ")):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def reflow_help(command: Any) -> Any:
    """``reflowed`` help for ``command`` and every command under it; returns ``command``."""
    if command.help:
        command.help = reflowed(command.help)
    for sub in getattr(command, "commands", {}).values():
        reflow_help(sub)
    return command


def usage_error_line(exc: Exception) -> str:
    """A parse error as one line: the message, then where the command's options are listed."""
    message = " ".join(str(getattr(exc, "format_message", lambda: str(exc))()).split()).rstrip(".")
    context = getattr(exc, "ctx", None)
    if context is None:
        return message
    return f"{message}; see `{context.command_path} --help`"


def is_help_request(exc: Exception) -> bool:
    """``kgen`` or ``kgen kb`` alone: the help, not an error (click raises it as one)."""
    return type(exc).__name__ == "NoArgsIsHelpError"

