"""The `kgen` command line: the app, its commands, and the process's entry point.

Each command lives in a module of its own (`kgen run` and `resume` in ``run.py``, `kgen eval`
and `bench` in ``evaluate.py``, ...); this module puts them together. `kgen "..."` is short
for `kgen run "..."`.

Exit codes: ``kgen.cli.exit_codes`` (0 success, 1 no verified kernel / the candidate rejected,
2 bad usage, 3 no model code / inconclusive, 130 interrupted). Errors, parse errors included,
are one line on stderr, never a traceback (``kgen.cli.command_line``). Heavy modules (torch, triton, the LLM
SDKs, Chroma) are imported inside the commands so `kgen --help` stays fast
(``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from kgen.cli.catalog import problems_app, targets_command
from kgen.cli.command_line import (
    MisplacedOptions,
    UsageError,
    is_help_request,
    quiet_flag_metavars,
    reflow_help,
    usage_error_line,
    with_default_command,
    with_short_help,
    with_whole_help_tables,
)
from kgen.cli.config import config_command
from kgen.cli.doctor import doctor_command
from kgen.cli.evaluate import bench_command, eval_command
from kgen.cli.exit_codes import BAD_USAGE, INTERRUPTED, SUCCESS, exit_codes_text
from kgen.cli.export import export_command
from kgen.cli.kb import kb_app
from kgen.cli.report import report_command
from kgen.cli.run import resume_command, run_command, runs_command
from kgen.cli.solve import solve_command
from kgen.cli.terminal import err_console, print_error, print_text
from kgen.cli.train_check import train_check_command
from kgen.cli.verify import verify_command
from kgen.core.version import __version__
from kgen.evals.sandbox.lifecycle import install_signal_handlers
from kgen.knowledge_base.errors import KnowledgeBaseError

app = typer.Typer(
    name="kgen",
    help=(
        "Generate GPU kernels whose 'correct' is verified and whose 'fast' is measured.\n\n"
        "kgen \"Triton RMSNorm backward for H100\" turns the request into a spec, starts from the "
        "knowledge base's best kernel, asks the configured models for variants (or, offline, tunes "
        "the known kernel's parameters), verifies each against an fp64 reference in a sandbox, "
        "times it on the GPU, and remembers the winner. `kgen doctor` says what it will do here."
    ),
    epilog=(
        "Examples:\n\n"
        "  kgen \"Triton RMSNorm backward for H100\"\n\n"
        "  kgen \"softmax for H100 and MI300X\" -m openai:gpt-5 --budget 20\n\n"
        "  kgen resume 20261122-081500-3fa9c1\n\n"
        "  kgen eval rmsnorm_backward my_kernel.py --target h100 --target mi300x\n\n"
        "  kgen kb search 'rms norm backward h100'\n\n"
        "Options of `kgen run` may come before or after the request.\n\n"
        + exit_codes_text()
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(asked: bool) -> None:
    """``kgen --version``: ``kgen X.Y.Z`` (the installed distribution's version) and exit 0."""
    if asked:
        typer.echo(f"kgen {__version__}")
        raise typer.Exit(SUCCESS)


@app.callback()
def kgen_options(
    version: Annotated[bool, typer.Option("--version", "-V", is_eager=True, callback=_print_version,
                                          help="Print kgen's version and exit.")] = False,
) -> None:
    """The options of `kgen` itself (the app's help text is the group's help)."""


app.add_typer(problems_app, name="problems")
app.add_typer(kb_app, name="kb")
# `kgen --help` lists the commands in this order, then the groups
app.command("run")(run_command)
app.command("resume")(resume_command)
app.command("runs")(runs_command)
app.command("report")(report_command)
app.command("solve")(solve_command)
app.command("targets")(targets_command)
app.command("eval")(eval_command)
app.command("bench")(bench_command)
app.command("verify")(verify_command)
app.command("export")(export_command)
app.command("train-check")(train_check_command)
app.command("doctor")(doctor_command)
app.command("config")(config_command)


def kgen_command() -> Any:
    """The `kgen` command as the process runs it: the app's click command, ``-h`` as ``--help``
    everywhere, flags without a metavar in `--help`, help tables that cut no name."""
    import typer.main

    with_whole_help_tables()
    return reflow_help(quiet_flag_metavars(with_short_help(typer.main.get_command(app))))


def main(argv: Sequence[str] | None = None) -> None:
    """Run `kgen` with ``argv`` (default: the process's arguments) and exit with its code."""
    install_signal_handlers()  # SIGTERM, SIGINT, SIGHUP end the verifier children first

    command = kgen_command()
    try:
        args = with_default_command(sys.argv[1:] if argv is None else argv, command)
        code = command.main(args=args, prog_name="kgen", standalone_mode=False)
    except MisplacedOptions as exc:
        print_error(str(exc))
        sys.exit(BAD_USAGE)
    except UsageError as exc:
        if is_help_request(exc):  # `kgen` or `kgen kb` alone
            print_text(exc.format_message())  # type: ignore[attr-defined]
            sys.exit(SUCCESS)
        print_error(usage_error_line(exc))
        sys.exit(BAD_USAGE)
    except KnowledgeBaseError as exc:
        # a store that fails mid-command (server gone, lock held): one line, exit 2
        print_error(exc.message)
        sys.exit(BAD_USAGE)
    except (KeyboardInterrupt, typer.Abort):
        err_console.print("interrupted: `kgen runs` lists unfinished runs; `kgen resume RUN` continues one")
        sys.exit(INTERRUPTED)
    sys.exit(code if isinstance(code, int) else SUCCESS)


if __name__ == "__main__":
    main()
