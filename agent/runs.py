"""Starting and resuming runs: the one place the CLI and ``kgen.generate()`` both call."""

from __future__ import annotations

import shutil
from pathlib import Path

from kgen.agent.graph import Progress, RunError, Runner, execute, load_options, save_options
from kgen.agent.reporting import RunSummary, build_summary
from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import RunOptions


def validate_options(options: RunOptions) -> None:
    """Bad input caught before a run directory exists: empty request, bad model strings,
    unknown targets, an executor that cannot run here."""
    from kgen.agent.models import ModelSpecError, parse_model
    from kgen.backends.targets import UnknownTargetError, resolve_target

    if not options.request.strip() and not options.problem_file:
        raise RunError("empty request: say what kernel you want, e.g. kgen \"Triton RMSNorm backward for H100\"")
    for model in options.models:
        try:
            parse_model(model)
        except ModelSpecError as exc:
            raise RunError(str(exc)) from exc
    for target in options.targets:
        try:
            resolve_target(target)
        except UnknownTargetError as exc:
            raise RunError(str(exc.args[0] if exc.args else exc)) from exc


def _finish(runner: Runner, resume: bool) -> RunSummary:
    state = execute(runner, resume=resume)
    summary = build_summary(runner, state)
    if not summary.best and any(n.startswith("no model returned code") for n in summary.notes):
        raise RunError(summary.notes[-1] + f" (run {runner.run.run_id} kept; `kgen resume` retries)")
    return summary


def start_run(options: RunOptions, *, runs_dir: Path, out: Path | None = None,
              progress: Progress | None = None, api_keys: dict[str, str] | None = None) -> RunSummary:
    validate_options(options)
    run = RunDirectory.create(runs_dir, out)
    save_options(run, options)
    runner = Runner(run, options, progress, api_keys)
    runner.say(f"run {run.run_id} in {run.path}")
    if options.offline:
        runner.say("offline mode: no model configured, so kgen tunes the best known kernels' "
                   "parameters for the target (configure models with `kgen config`)")
    try:
        return _finish(runner, resume=False)
    except RunError:
        if not any((run.path / "candidates").glob("*")):
            # nothing was produced (bad request, unreachable store): leave no husk behind
            shutil.rmtree(run.path, ignore_errors=True)
        raise


def resume_run(run_ref: str, *, runs_dir: Path, progress: Progress | None = None,
               api_keys: dict[str, str] | None = None) -> RunSummary:
    run = RunDirectory.find(run_ref, runs_dir)
    runner = Runner(run, load_options(run), progress, api_keys)
    runner.say(f"resuming run {run.run_id}")
    return _finish(runner, resume=True)
