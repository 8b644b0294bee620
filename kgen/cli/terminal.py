"""The consoles every command prints to, and the one way a command fails on bad usage."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)


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
