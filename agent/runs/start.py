"""Starting and resuming runs: the one place the CLI and ``kgen.generate()`` both call."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import RunOptions
from kgen.agent.runs.summary import RunSummary
from kgen.agent.search.graph import (
    Progress,
    RunError,
    Runner,
    execute,
    load_options,
    save_options,
    usable_backend,
)


def validate_options(options: RunOptions, api_keys: dict[str, str] | None = None) -> None:
    """Bad input caught before a run directory exists: an empty or unreadable request (offline,
    where the matcher reads it), bad model strings, missing keys, unknown targets."""
    from kgen.agent.llm.models import ModelSpecError, parse_model
    from kgen.agent.llm.providers import choose_api_key
    from kgen.agent.spec.kernel_spec import SpecError, parse_request
    from kgen.backends.targets import DEFAULT_TARGET, UnknownTargetError, resolve_target

    if not options.request.strip() and not options.problem_file:
        raise RunError("empty request: say what kernel you want, e.g. kgen \"Triton RMSNorm backward for H100\"")
    for model in options.models:
        try:
            spec = parse_model(model)
        except ModelSpecError as exc:
            raise RunError(str(exc)) from exc
        choice = choose_api_key(spec, (api_keys or {}).get(spec.provider))
        if choice.key is None:
            raise RunError(choice.missing_message(spec.label))
    if options.offline and not options.problem_file:
        try:
            parse_request(options.request, default_target=DEFAULT_TARGET)
        except SpecError as exc:
            raise RunError(str(exc)) from exc
    for target in options.targets:
        try:
            resolve_target(target)
        except UnknownTargetError as exc:
            raise RunError(exc.message) from exc
    if options.backend:  # else the request names it: checked once the spec is read
        usable_backend(options.backend, list(options.targets))


def _requested_backends(request: str) -> list[str]:
    from kgen.agent.spec.kernel_spec import SpecError, requested_backends

    try:
        return requested_backends(request)
    except SpecError as exc:
        raise RunError(str(exc)) from exc


def _finish(runner: Runner, resume: bool, runs_dir: Path) -> RunSummary:
    """The run to its end, as the run's only kgen process; an interrupt (Ctrl-C, or SIGTERM /
    SIGHUP, which end the verifiers first) says how to continue before it goes on up."""
    with runner.run.claimed():
        try:
            return _execute(runner, resume)
        except (KeyboardInterrupt, SystemExit) as exc:
            if not isinstance(exc, SystemExit) or exc.code not in (0, None):
                runner.say(f"interrupted: `kgen resume {resume_ref(runner.run, runs_dir)}` continues this run")
            raise


def resume_ref(run: RunDirectory, runs_dir: Path) -> str:
    """What `kgen resume` needs to find the run: its id under the runs folder, else its path
    (a run made with ``--out`` elsewhere)."""
    inside = run.path.parent == runs_dir.expanduser().resolve()
    return run.run_id if inside else shlex.quote(str(run.path))


def _execute(runner: Runner, resume: bool) -> RunSummary:
    execute(runner, resume=resume)
    # the report node wrote it: reading it back keeps the modules and evaluations read once
    summary = RunSummary.model_validate_json(runner.run.file("summary.json").read_text())
    if not summary.best and any(n.startswith("no model returned code") for n in summary.notes):
        raise RunError(summary.notes[-1] + f" (run {runner.run.run_id} kept; `kgen resume` retries)")
    return summary


def start_run(options: RunOptions, *, runs_dir: Path, out: Path | None = None,
              progress: Progress | None = None, api_keys: dict[str, str] | None = None) -> RunSummary:
    validate_options(options, api_keys)
    backends = [] if options.backend else _requested_backends(options.request)
    if backends:  # "..., both backends": one run per backend (agent/runs/backend_runs.py)
        from kgen.agent.runs.backend_runs import start_backend_runs

        return start_backend_runs(options, backends, runs_dir=runs_dir, out=out, progress=progress,
                                  api_keys=api_keys)
    run = RunDirectory.create(runs_dir, out)
    save_options(run, options)
    runner = Runner(run, options, progress, api_keys)
    runner.say(f"run {run.run_id} in {run.path}")
    if options.offline:
        runner.say("offline mode: no model configured, so kgen tunes the best known kernels' "
                   "parameters for the target (configure models with `kgen config`)")
    try:
        return _finish(runner, resume=False, runs_dir=runs_dir)
    except RunError as exc:
        if not run.holds_results():
            # nothing was produced (bad request, unreachable store): leave no husk behind
            shutil.rmtree(run.path, ignore_errors=True)
            raise
        if run.run_id in str(exc):
            raise
        # what the models wrote (a reference problem that failed its check, replies) is kept
        raise RunError(f"{exc} (run {run.run_id} kept for inspection: {run.path})") from exc


def resume_run(run_ref: str, *, runs_dir: Path, progress: Progress | None = None,
               api_keys: dict[str, str] | None = None) -> RunSummary:
    from kgen.agent.runs.backend_runs import is_backend_runs, resume_backend_runs

    run = RunDirectory.find(run_ref, runs_dir)
    if is_backend_runs(run):
        return resume_backend_runs(run, load_options(run), runs_dir=runs_dir, progress=progress,
                                   api_keys=api_keys)
    runner = Runner(run, load_options(run), progress, api_keys)
    runner.say(f"resuming run {run.run_id}")
    return _finish(runner, resume=True, runs_dir=runs_dir)
