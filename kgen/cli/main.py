"""The `kgen` command line: the app, its commands, and the process's entry point.

Each command lives in a module of its own (`kgen run` and `resume` in ``run.py``, `kgen eval`
and `bench` in ``evaluate.py``, ...); this module puts them together. `kgen "..."` is short
for `kgen run "..."`.

Exit codes: 0 success (a verified kernel for every target, the candidate passed), 1 the run
ended without one for some target / the candidate was rejected, 2 bad usage (an unknown
problem, target or run, a missing file, an invalid option, a key or server that cannot be
used: a ``kgen.errors.KgenUsageError``), 3 `kgen run`: a verified kernel for every target but
no model produced code; `kgen eval`: inconclusive (kgen could not judge the candidate here),
130 interrupted. Errors are one line on stderr, never a traceback. Heavy modules (torch, triton, the LLM
SDKs, Chroma) are imported inside the commands so `kgen --help` stays fast
(``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

import sys

import typer

from kgen.cli.catalog import problems_app, targets_command
from kgen.cli.config import config_command
from kgen.cli.doctor import doctor_command
from kgen.cli.evaluate import bench_command, eval_command
from kgen.cli.kb import kb_app
from kgen.cli.report import report_command
from kgen.cli.run import resume_command, run_command, runs_command
from kgen.cli.solve import solve_command
from kgen.cli.terminal import err_console, print_error
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
        "  kgen \"softmax for H100 and MI300X\" -m openai:gpt-5 -m anthropic:claude-sonnet-4-5 --budget 20\n\n"
        "  kgen resume 20261122-081500-3fa9c1\n\n"
        "  kgen eval rmsnorm_backward my_kernel.py --target h100 --target mi300x\n\n"
        "  kgen kb search 'rms norm backward h100'\n\n"
        "Exit codes: 0 success (kernel verified / candidate passed), 1 no verified kernel / "
        "candidate rejected, 2 bad usage."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
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
app.command("doctor")(doctor_command)
app.command("config")(config_command)


def _with_default_command(argv: list[str]) -> list[str]:
    """`kgen "Triton RMSNorm backward for H100"` means `kgen run "..."`: a first argument that
    is neither an option nor a command is a request."""
    import typer.main

    if not argv or argv[0].startswith("-"):
        return argv
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    return argv if argv[0] in commands else ["run", *argv]


def main() -> None:
    install_signal_handlers()  # SIGTERM, SIGINT, SIGHUP end the verifier children first

    try:
        app(args=_with_default_command(sys.argv[1:]), prog_name="kgen")
    except KnowledgeBaseError as exc:
        # a store that fails mid-command (server gone, lock held): one line, exit 2
        print_error(exc.message)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted: `kgen runs` lists unfinished runs; `kgen resume RUN` continues one")
        sys.exit(130)


if __name__ == "__main__":
    main()
