"""The main job: `kgen "Triton RMSNorm backward for H100"`, `kgen resume RUN`, `kgen runs`.

Exit codes: 0 a verified kernel for every target, 1 the run finished without
one for some target, 2 bad usage (request, key, server, options), 3 a verified
kernel for every target but no model produced code (every call failed, or prose
only: the kernel is the knowledge base's), 130 interrupted (it prints how to
resume the run).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from kgen.terminal import console, err_console, fail_usage


def _settings(overrides: dict):
    from kgen.settings import SettingsError, load_settings

    try:
        return load_settings(overrides)
    except SettingsError as exc:
        fail_usage(str(exc))


class LiveProgress:
    """Event lines on stderr under a spinner whose line (``kgen.display.RunStatusLine``) shows
    the run's clock, the latest step and the model calls being waited on, live."""

    def __init__(self, console=None) -> None:
        from kgen.display import RunStatusLine

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
    from kgen.agent.reporting import render_summary

    if json_output:
        print(summary.model_dump_json(indent=1))
    else:
        render_summary(summary, console)
    if not summary.best or len(summary.best) < len(summary.targets):
        raise typer.Exit(1)
    if summary.no_model_code:
        raise typer.Exit(3)  # a kernel, but not the models': none of them produced code


def _run(start) -> None:
    from kgen.agent.graph import RunError
    from kgen.agent.run_directory import RunInUseError, RunNotFoundError

    try:
        with LiveProgress() as progress:
            summary = start(progress)
    except (RunError, RunNotFoundError, RunInUseError, FileExistsError) as exc:
        fail_usage(str(exc))
    except KeyboardInterrupt:
        # the run said how to continue; the CLI framework would turn this into "Aborted!"
        raise typer.Exit(130) from None
    return summary


def run_command(
    request: Annotated[str, typer.Argument(help="What to build, e.g. 'Triton RMSNorm backward for H100'.")],
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="Model to ask, repeatable: openai:gpt-5, anthropic:claude-sonnet-4-5, "
        "openai:NAME@http://host:8000/v1 (local server; ...#VAR sends it the key in $VAR), NAME*2 "
        "for weight 2. None: offline mode.")] = None,
    target: Annotated[list[str] | None, typer.Option(
        "--target", "-t", help="Hardware target, repeatable (h100, mi300x, ...). Default: the "
        "request's, else the local GPU's, else h100.")] = None,
    backend: Annotated[str | None, typer.Option(help="triton or cute. Default: the request's, else triton.")] = None,
    budget: Annotated[int | None, typer.Option(help="Candidates to evaluate in all.")] = None,
    generations: Annotated[int | None, typer.Option(help="Generations of the search.")] = None,
    time_s: Annotated[float | None, typer.Option("--time", help="Wall-clock limit of the run, seconds; "
        "model calls still waiting when it runs out are ended.")] = None,
    max_cost: Annotated[float | None, typer.Option("--max-cost", help="Stop once model calls cost this many USD.")] = None,
    problem: Annotated[Path | None, typer.Option(
        "--problem", help="Your own KernelBench-format problem file instead of the catalog.")] = None,
    kb: Annotated[str | None, typer.Option("--kb", metavar="DIR|URL", help="Knowledge base location.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run directory (default $KGEN_HOME/runs/<id>).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the search's random choices.")] = 0,
    persist: Annotated[bool, typer.Option("--persist/--no-persist", help="Write winners to the knowledge base.")] = True,
    train_check: Annotated[bool | None, typer.Option("--train-check", help="Train a small model with the winner's gradients.")] = None,
    llm_timeout: Annotated[float | None, typer.Option(
        "--llm-timeout", metavar="SECONDS", help="Deadline of one model call: every attempt, the waits "
        "between them and a reply however slowly it arrives; a model that has not answered by then gives "
        "no candidate this time. Default: llm_timeout_s (`kgen config`).")] = None,
    llm_retries: Annotated[int | None, typer.Option(
        "--llm-retries", metavar="N", help="How often a failed model call (rate limit, HTTP 5xx, dropped "
        "connection) is tried again, within --llm-timeout. Default: llm_retries (`kgen config`).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Generate, verify, measure and remember a kernel for a request (the main job).

    With no model configured kgen runs offline: it takes the knowledge base's best
    kernel for the request and tunes its parameters for the target. `kgen "..."` is
    short for `kgen run "..."`; options not given come from `KGEN_*` variables, then
    $KGEN_HOME/config.toml (`kgen config`). An interrupted run continues with
    `kgen resume RUN`.

    Example: kgen "layernorm fwd bf16 for H100 and MI300X" -m openai:gpt-5 --budget 16
    """
    from kgen.agent.runs import start_run
    from kgen.api import KgenUsageError, api_keys, run_options

    try:
        options, settings = run_options(
            request,
            {"models": model, "targets": target, "backend": backend, "budget": budget,
             "generations": generations, "time_s": time_s, "max_cost_usd": max_cost, "kb": kb,
             "device": device, "train_check": train_check, "llm_timeout_s": llm_timeout,
             "llm_retries": llm_retries},
            problem=problem, seed=seed, persist=persist,
        )
    except KgenUsageError as exc:
        fail_usage(str(exc))
    summary = _run(lambda progress: start_run(options, runs_dir=settings.runs_location, out=out,
                                              progress=progress, api_keys=api_keys(settings)))
    _report(summary, json_output)


def resume_command(
    run: Annotated[str, typer.Argument(help="Run id (or its start), or a run directory.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Continue an interrupted run; finished evaluations and paid model replies are reused."""
    from kgen.agent.runs import resume_run
    from kgen.api import api_keys

    settings = _settings({})
    summary = _run(lambda progress: resume_run(run, runs_dir=settings.runs_location,
                                               progress=progress, api_keys=api_keys(settings)))
    _report(summary, json_output)


def runs_command() -> None:
    """List runs in $KGEN_HOME/runs, newest last, with their outcome."""
    import json

    from rich.table import Table

    from kgen.agent.run_directory import RunDirectory

    settings = _settings({})
    table = Table(title=f"runs in {settings.runs_location}", title_justify="left")
    for column in ("run", "request", "outcome"):
        table.add_column(column, overflow="fold", no_wrap=column == "run")
    paths = RunDirectory.list_runs(settings.runs_location)
    for path in paths:
        request = json.loads((path / "run.json").read_text())["options"]["request"]
        summary_path = path / "summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text())
            outcome = f"{len(summary['best'])}/{len(summary['targets'])} target(s) verified"
        else:
            outcome = f"unfinished: kgen resume {path.name}"
        table.add_row(path.name, request, outcome)
    console.print(table)
    console.print(f"{len(paths)} run(s)", highlight=False)
