"""The commands' flags, made from the option table (``kgen.core.option_table``), never by hand.

`kgen run` (and `kgen solve`, which takes a run's options) gets a flag for every run option
that has one, grouped in `--help` by the table's sections; `kgen eval` and `kgen bench` get
theirs from ``kgen.core.evaluation_flags`` (``EVAL_FLAGS``, ``BENCH_FLAGS``). A command
declares its own arguments and receives the flags' values in ``**options``, by option name;
typer reads the signature the decorators here give it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Sequence
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape

from kgen.core.evaluation_flags import CommandFlag
from kgen.core.option_table import OPTIONS, Option

Command = TypeVar("Command", bound=Callable[..., Any])


def run_option_parameters(exclude: Collection[str] = (),
                          options: Sequence[Option] = OPTIONS) -> list[inspect.Parameter]:
    """The flags of every run option that has one, as typer reads them from a signature:
    keyword-only ``Annotated[type, typer.Option(...)]`` parameters named after the options,
    None ("as configured") for a setting, the table's default for a run-only option."""
    parameters = []
    for entry in options:
        if not entry.flags or entry.run is None or entry.name in exclude:
            continue
        flag = typer.Option(*entry.flags, help=escape(entry.full_help()), metavar=entry.metavar,
                            rich_help_panel=entry.section)
        parameters.append(inspect.Parameter(
            entry.name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[entry.flag_type(), flag],
            default=None if entry.is_setting else entry.default))
    return parameters


def command_flag_parameters(flags: Sequence[CommandFlag]) -> list[inspect.Parameter]:
    """`kgen eval`'s or `kgen bench`'s flags as typer reads them from a signature: keyword-only
    parameters named as the command receives them, with the default its `--help` shows."""
    return [
        inspect.Parameter(
            flag.name, inspect.Parameter.KEYWORD_ONLY, default=flag.default_value(),
            annotation=Annotated[flag.flag_type(),
                                 typer.Option(*flag.flags, help=escape(flag.help_text()), min=flag.minimum())])
        for flag in flags
    ]


def with_run_options(exclude: Collection[str] = ()) -> Callable[[Command], Command]:
    """Give a command every run option's flag, as `kgen run` has them (`kgen solve SUITE_DIR`
    takes the same): the command declares its own arguments and options, then ``**options``,
    and receives the parsed run options there (option name -> value, None = not given),
    ready for ``kgen.api.run_options(request, options)``::

        @with_run_options(exclude={"problem"})
        def solve_command(suite: Annotated[Path, typer.Argument()], *, json_output: ... = False,
                          **options: Any) -> None: ...

    typer reads ``__signature__``: the command's positional parameters, the run options (in
    the table's order, grouped in `--help` by section), then its own keyword-only ones."""
    return _with_parameters(lambda: run_option_parameters(exclude))


def with_run_option_flags(*names: str) -> Callable[[Command], Command]:
    """Give a command some run options' flags, spelled and explained as `kgen run` has them
    (`kgen doctor -m MODEL` checks the models a run with that flag would ask); the command
    receives them in ``**options`` (None: not given)."""
    from kgen.core.option_table import option

    return _with_parameters(lambda: run_option_parameters(options=[option(name) for name in names]))


def with_command_flags(flags: Sequence[CommandFlag]) -> Callable[[Command], Command]:
    """Give a command the flags the table declares for it (``EVAL_FLAGS``, ``BENCH_FLAGS``), in
    that order, after its positional arguments; it receives them in ``**options``::

        @with_command_flags(EVAL_FLAGS)
        def eval_command(problem: Annotated[str, typer.Argument()], candidate: ..., **options: Any): ...
    """
    return _with_parameters(lambda: command_flag_parameters(flags))


def _with_parameters(made: Callable[[], list[inspect.Parameter]]) -> Callable[[Command], Command]:
    def decorate(command: Command) -> Command:
        own = inspect.signature(command, eval_str=True).parameters.values()
        first = [p for p in own if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        last = [p for p in own if p.kind == p.KEYWORD_ONLY]
        command.__signature__ = inspect.Signature([*first, *made(), *last])  # type: ignore[attr-defined]
        return command

    return decorate
