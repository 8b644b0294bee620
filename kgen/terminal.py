"""The consoles every command prints to, and the one way a command fails on bad usage."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail_usage(message: str) -> NoReturn:
    """One line on stderr, exit code 2, never a traceback."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)
