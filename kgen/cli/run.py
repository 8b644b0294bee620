"""The main job: `kgen "Triton RMSNorm backward for H100"`, `kgen resume RUN`, `kgen runs`.

Exit codes: 0 a verified kernel for every target, 1 the run finished without
one for some target, 2 bad usage (request, key, server, options), 3 a verified
kernel for every target but no model produced code (every call failed, or prose
only: the kernel is the knowledge base's), 130 interrupted (it prints how to
resume the run).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from kgen.agent.run_directory import RunDirectory
from kgen.agent.runs.start import resume_run
from kgen.api import api_keys, run_options
from kgen.cli.display import RunStatusLine
from kgen.cli.option_flags import with_run_options
from kgen.cli.run_summary import render_summary
from kgen.cli.terminal import console, err_console, fail_usage, new_table, print_table
from kgen.core.settings import load_settings
from kgen.core.text import counted
from kgen.errors import KgenUsageError


def _settings(overrides: dict):
    try:
        return load_settings(overrides)
    except KgenUsageError as exc:
        fail_usage(exc.message)


class LiveProgress:
    """Event lines on stderr under a spinner whose line (``kgen.cli.display.RunStatusLine``) shows
    the run's clock, the latest step and the model calls being waited on, live."""

    def __init__(self, console=None) -> None:
        self.console = console or err_console
        self.line = RunStatusLine()
        self.started = self.line.started
        self.status = self.console.status(self.line)

    def __enter__(self) -> LiveProgress:
        self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.status.__exit__(*exc)

    def __call__(self, line: str) -> None:
        elapsed = time.monotonic() - self.started
        # lines quote model labels and verifier reasons: text, never markup
        self.console.print(f"[dim]{elapsed:6.1f}s[/] {escape(line)}", highlight=False, soft_wrap=True)
        self.line.event(line)


def _report(summary, json_output: bool) -> None:
    if json_output:
        print(summary.model_dump_json(indent=1))
    else:
        render_summary(summary, console)
    if not summary.best or len(summary.best) < len(summary.targets):
        raise typer.Exit(1)
    if summary.no_model_code:
        raise typer.Exit(3)  # a kernel, but not the models': none of them produced code


def _run(start) -> None:
    try:
        with LiveProgress() as progress:
            summary = start(progress)
    except KgenUsageError as exc:  # a bad request, key or server; no such run; a run in use
        fail_usage(exc.message)
    except FileExistsError as exc:
        fail_usage(str(exc))
    except KeyboardInterrupt:
        # the run said how to continue; the CLI framework would turn this into "Aborted!"
        raise typer.Exit(130) from None
    return summary


@with_run_options()
def run_command(
    request: Annotated[str, typer.Argument(help="What to build, e.g. 'Triton RMSNorm backward for H100'.")],
    *,
    json_output: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
    **options: Any,
) -> None:
    """Generate, verify, measure and remember a kernel for a request (the main job).

    With no model configured kgen runs offline: it takes the knowledge base's best
    kernel for the request and tunes its parameters for the target. `kgen "..."` is
    short for `kgen run "..."`; options not given come from `KGEN_*` variables, then
    $KGEN_HOME/config.toml (`kgen config`). An interrupted run continues with
    `kgen resume RUN`. A request for "both backends" (or naming two) runs each
    backend in turn and reports the best of each.

    Example: kgen "layernorm fwd bf16 for H100 and MI300X" -m openai:gpt-5 --budget 16
    """
    from kgen.agent.runs.start import start_run

    try:
        run, settings = run_options(request, options)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    summary = _run(lambda progress: start_run(run, runs_dir=settings.runs_location, out=options.get("out"),
                                              progress=progress, api_keys=api_keys(settings)))
    _report(summary, json_output)


def resume_command(
    run: Annotated[str, typer.Argument(help="Run id (or its start), or a run directory.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Continue an interrupted run; finished evaluations and paid model replies are reused."""

    settings = _settings({})
    summary = _run(lambda progress: resume_run(run, runs_dir=settings.runs_location,
                                               progress=progress, api_keys=api_keys(settings)))
    _report(summary, json_output)


def runs_command() -> None:
    """List runs in $KGEN_HOME/runs, newest last, with their outcome."""
    import json

    from kgen.agent.runs.run_end import standing

    settings = _settings({})
    console.print(Text(f"runs in {settings.runs_location}", style="table.title"), highlight=False, soft_wrap=True)
    table = new_table(None, "run", "request", "outcome", whole=("run",))
    paths = RunDirectory.list_runs(settings.runs_location)
    for path in paths:
        request = json.loads((path / "run.json").read_text())["options"]["request"]
        summary_path = path / "summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text())
            outcome = f"{len(summary['best'])} of {counted(len(summary['targets']), 'target')} verified"
        else:  # why it stopped, and `kgen resume` only where resuming can help (run_end.standing)
            where = standing(path, path.name)
            reason = f"{where.reason}; " if where.reason and where.reason != where.state else ""
            outcome = f"{where.state}: {reason}{where.hint}"
        table.add_row(path.name, escape(request), escape(outcome))
    print_table(table)
    console.print(counted(len(paths), "run"), highlight=False)
