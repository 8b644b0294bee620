"""`kgen config`: the effective settings and where each value came from, or the default
config file (every option documented) and its path."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.table import Table

from kgen.cli.terminal import console, fail_usage, print_table
from kgen.core.settings import (
    config_file_path,
    default_config_text,
    describe_settings,
    load_settings,
)
from kgen.errors import KgenUsageError


def config_command(
    default: Annotated[
        bool, typer.Option("--default", help="Print the default config file, every option documented.")
    ] = False,
    path: Annotated[bool, typer.Option("--path", help="Print the config file's path.")] = False,
) -> None:
    """Show the effective settings and where each value came from (default, config file, env, flag).

    Start a config file with: kgen config --default > "$(kgen config --path)"
    """
    from rich import box
    from rich.text import Text

    if default and path:
        fail_usage("--default and --path are alternatives; give one")
    if default:
        sys.stdout.write(default_config_text())
        return
    if path:
        print(config_file_path())
        return
    try:
        settings = load_settings()
    except KgenUsageError as exc:
        fail_usage(exc.message)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("option", "value", "source"):
        table.add_column(column, overflow="fold")
    file = config_file_path()
    for name, value, source in describe_settings(settings):
        source = source.removesuffix(f" {file}")  # the path is printed once, below
        table.add_row(Text(name), Text(value), Text(source, style="dim" if source == "default" else ""))
    print_table(table)
    console.print(
        Text(f"config file: {file}" + ("" if file.is_file() else " (not present)") + "\n"
             "Set an option there, as KGEN_<OPTION> in the environment, or with a flag. "
             "Every option, documented: kgen config --default")
    )
