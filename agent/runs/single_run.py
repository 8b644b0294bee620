"""One run of one backend: its ``run.json``, its graph to the end, its outputs.

``start.py`` hands a request here when it names one backend (or none), and a request over
several backends (``backend_runs.py``) hands each of its backends here in turn: both reach
a run's directory, its lock and its resume hint through these functions alone.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from kgen.agent.llm.models import parse_model
from kgen.agent.llm.providers import choose_api_key
from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import RunOptions
from kgen.agent.runs.run_end import clear_stop, record_stop
from kgen.agent.runs.summary import RunSummary, write_outputs
from kgen.agent.search.graph import Progress, RunError, Runner, execute, usable_backend
from kgen.agent.search.state import RunState
from kgen.agent.spec.catalog_matcher import parse_request
from kgen.backends.targets import DEFAULT_TARGET, resolve_target
from kgen.errors import KgenUsageError
from kgen.evals.executors.session import ExecutorChoice, preflight


def validate_options(options: RunOptions, api_keys: dict[str, str] | None = None) -> None:
    """Bad input caught before a run directory exists: an empty or unreadable request (offline,
    where the matcher reads it), bad model strings, missing keys, unknown targets, a Ray cluster
    that cannot be reached."""

    if not options.request.strip() and not options.problem_file:
        raise RunError("empty request: say what kernel you want, e.g. kgen \"Triton RMSNorm backward for H100\"")
    for model in options.models:
        spec = parse_model(model)
        choice = choose_api_key(spec, (api_keys or {}).get(spec.provider))
        if choice.key is None:
            raise RunError(choice.missing_message(spec.label))
    if options.offline and not options.problem_file:
        parse_request(options.request, default_target=DEFAULT_TARGET)
    for target in options.targets:
        resolve_target(target)
    if options.backend:  # else the request names it: checked once the spec is read
        usable_backend(options.backend, list(options.targets))
    preflight(ExecutorChoice.of(options))  # Ray installed and its cluster reachable


def save_options(run: RunDirectory, options: RunOptions) -> None:
    run.write("run.json", json.dumps({"options": options.model_dump(mode="json")}, indent=1))


def load_options(run: RunDirectory) -> RunOptions:
    return RunOptions.model_validate(json.loads(run.file("run.json").read_text())["options"])


def resume_ref(run: RunDirectory, runs_dir: Path) -> str:
    """What `kgen resume` needs to find the run: its id under the runs folder, else its path
    (a run made with ``--out`` elsewhere)."""
    inside = run.path.parent == runs_dir.expanduser().resolve()
    return run.run_id if inside else shlex.quote(str(run.path))


def _finish(runner: Runner, resume: bool, runs_dir: Path) -> RunSummary:
    """The run to its end, as the run's only kgen process; an interrupt (Ctrl-C, or SIGTERM /
    SIGHUP, which end the verifiers first) says how to continue before it goes on up. Whatever
    ends it without a summary is recorded in the run (``run_end.record_stop``): a kept run says
    why it stopped, and `kgen runs` knows whether resuming it can help."""
    with runner.run.claimed():
        clear_stop(runner.run)
        try:
            return _execute(runner, resume)
        except (KeyboardInterrupt, SystemExit) as exc:
            if not isinstance(exc, SystemExit) or exc.code not in (0, None):
                record_stop(runner.run, exc)
                runner.say(f"interrupted: `kgen resume {resume_ref(runner.run, runs_dir)}` continues this run")
            raise
        except Exception as exc:
            record_stop(runner.run, exc)
            raise


def _execute(runner: Runner, resume: bool) -> RunSummary:
    def report(state: RunState) -> None:
        write_outputs(runner.run, state, options=runner.options, device=runner.device, say=runner.say)

    execute(runner, report, resume=resume)
    # the report step wrote it: reading it back keeps the modules and evaluations read once
    summary = RunSummary.model_validate_json(runner.run.file("summary.json").read_text())
    if not summary.best and any(n.startswith("no model returned code") for n in summary.notes):
        raise RunError(summary.notes[-1] + f" (run {runner.run.run_id} kept; `kgen resume` retries)")
    return summary


def start_single_run(options: RunOptions, *, runs_dir: Path, out: Path | None = None,
                     progress: Progress | None = None, api_keys: dict[str, str] | None = None) -> RunSummary:
    """A new run of ``options`` (validated by the caller: ``validate_options``), to its end."""
    run = RunDirectory.create(runs_dir, out)
    save_options(run, options)
    runner = Runner(run, options, progress, api_keys)
    runner.say(f"run {run.run_id} in {run.path}")
    if options.offline:
        runner.say("offline mode: no model configured, so kgen tunes the best known kernels' "
                   "parameters for the target (configure models with `kgen config`)")
    try:
        return _finish(runner, resume=False, runs_dir=runs_dir)
    except KgenUsageError as exc:
        if not run.holds_results():
            # nothing was produced (bad request, unreachable store): leave no husk behind
            shutil.rmtree(run.path, ignore_errors=True)
            raise
        if run.run_id in str(exc):
            raise
        # what the models wrote (a reference problem that failed its check, replies) is kept
        raise RunError(f"{exc} (run {run.run_id} kept for inspection: {run.path})") from exc


def resume_single_run(run: RunDirectory, *, runs_dir: Path, progress: Progress | None = None,
                      api_keys: dict[str, str] | None = None) -> RunSummary:
    """An existing run continued from its checkpoint with the options it started with."""
    runner = Runner(run, load_options(run), progress, api_keys)
    runner.say(f"resuming run {run.run_id}")
    return _finish(runner, resume=True, runs_dir=runs_dir)
