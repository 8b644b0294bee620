"""`kgen solve SUITE_DIR`: the main job over every problem of a KernelBench-style folder.

Each problem gets its own run with `kgen run`'s options (``--budget`` is per problem); the
suite ends with `kgen bench`'s fast_p table against eager and torch.compile and an index of
every problem's report (``kgen.agent.runs.suite_runs``). Running it again with the same ``--out``
continues: finished problems are kept, interrupted ones resumed.

Exit codes (``SuiteSummary.exit_code``, as `kgen bench`): the selected problems decide (every
problem, or those ``--only`` names): 0 a verified kernel for every selected problem, 1 some
selected problem without one (a failed run or an unreadable problem file included), 2 bad usage,
130 interrupted (it prints the command, as typed, that continues).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from kgen.agent.runs.suite_runs import solve_suite
from kgen.agent.runs.suite_state import relative_path
from kgen.api import api_keys, run_options
from kgen.cli.option_flags import with_run_options
from kgen.cli.run import LiveProgress
from kgen.cli.suite_display import print_suite_result
from kgen.cli.terminal import console, err_console, fail_usage
from kgen.core.evaluation_flags import MARKDOWN_HELP
from kgen.errors import KgenUsageError

DEFAULT_OUT = Path("kgen-solve")


@with_run_options(exclude={"problem", "out"})
def solve_command(
    suite: Annotated[Path, typer.Argument(help="A folder of KernelBench-format problem files (a KernelBench "
                                                "level folder works).")],
    *,
    out: Annotated[Path, typer.Option("--out", help="The suite's folder: state, one run per problem, the "
                                                    "fast_p table and index.html. Same --out again continues.")
                   ] = DEFAULT_OUT,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Problems at once on a CPU (verification only); "
                                                            "with a GPU problems always run one at a time.")] = 1,
    only: Annotated[list[str] | None, typer.Option("--only", metavar="NAME", help="Run only this problem "
                                                   "(name or file stem), repeatable: the table shows the selected "
                                                   "problems and they decide the exit code; the suite's files "
                                                   "(suite.md, index.html) still list all.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help=MARKDOWN_HELP)] = False,
    **options: Any,
) -> None:
    """Run the agent over every problem of a suite folder and report fast_p.

    Every problem is a run of its own (`kgen run`'s options apply: models, --budget per problem,
    targets, device, ...). Offline, a problem needs a knowledge-base kernel for it or for an
    operation whose reference computes the same (said up front, before any run); with models,
    they write the kernels. The table counts every problem: one without a verified
    kernel stays in the denominator.

    Example: kgen solve KernelBench/level1 -m openai:gpt-5 --budget 8 --out level1-gpt5
    """

    if not suite.is_dir():
        fail_usage(f"suite folder not found: {suite}")
    try:
        # request and problem file are set per problem: the template's request is a placeholder
        template, settings = run_options("", options)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    command = shlex.join(["kgen", "solve", *sys.argv[2:]])
    try:
        with LiveProgress() as progress:
            outcome = solve_suite(suite, template, out=out, jobs=jobs, progress=progress,
                                  api_keys=api_keys(settings), only=only or None, command=command)
    except KgenUsageError as exc:  # a bad suite, request, key or server; a run in use
        fail_usage(exc.message)
    except KeyboardInterrupt:
        # the command as typed, every option and each --only kept; one line the terminal may
        # wrap, never broken by Rich in the middle of the command
        err_console.print(escape(f"interrupted: `{command}` continues this suite"), highlight=False,
                          soft_wrap=True)
        raise typer.Exit(130) from None
    table = outcome.table.get("md")
    shown = outcome.rows if outcome.selected is None else [r for r in outcome.rows if r.problem in outcome.selected]
    print_suite_result(shown, outcome.summary, table, markdown=markdown)
    # with --markdown, stdout is the markdown table alone (`kgen solve ... --markdown > table.md`)
    here = Path.cwd().resolve()  # paths as short as they can be said: from here when under it
    (err_console if markdown else console).print(
        escape(f"table: {relative_path(table, here)}\nreports: {relative_path(outcome.index, here)}"),
        highlight=False, soft_wrap=True)
    raise typer.Exit(outcome.summary.exit_code)  # the one rule `kgen bench` exits by too
