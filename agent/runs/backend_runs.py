"""One request over several backends: "RMSNorm backward for H100, both backends".

Each backend gets an ordinary run of its own, one after the other (on a GPU two runs at once
would time each other's kernels), with the same options and the backend fixed; the request's
run folder holds them and a summary of both::

    run.json        the request's options (as any run's) and ``backends``: the plan
    <backend>/      one ordinary run directory per backend (``kgen resume`` works on it alone)
    summary.json    a :class:`RunSummary` whose ``by_backend`` holds each backend's summary and
                    whose ``best`` is, per target, the fastest of the backends' best kernels
    events.log      the backends' event lines, each prefixed with its backend

A backend whose run fails (offline with no known kernel for it, its toolchain missing) is a
note in the summary, and the other backends go on; the request fails only when every backend
failed. ``kgen resume`` on the request's folder skips the backends that finished, resumes the
one that was interrupted and starts the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

from kgen.agent.llm.usage import UsageLedger
from kgen.agent.run_directory import RUN_FILE, RunDirectory
from kgen.agent.run_options import RunOptions
from kgen.agent.runs.run_end import record_stop
from kgen.agent.runs.single_run import (
    resume_ref,
    resume_single_run,
    save_options,
    start_single_run,
    validate_options,
)
from kgen.agent.runs.summary import BestKernel, RunSummary
from kgen.agent.search.graph import Progress, RunError
from kgen.errors import KgenUsageError

#: the key of run.json that makes a run folder a run over several backends
PLAN_KEY = "backends"


def is_backend_runs(run: RunDirectory) -> bool:
    """Whether the folder is a request over several backends (run.json names its backends)."""
    try:
        return bool(json.loads(run.file(RUN_FILE).read_text()).get(PLAN_KEY))
    except (OSError, ValueError):
        return False


def backends_of(run: RunDirectory) -> list[str]:
    """The backends the request asked for, in its order (each one's run is ``run.path / name``)."""
    return list(json.loads(run.file(RUN_FILE).read_text())[PLAN_KEY])


def started_runs(run: RunDirectory) -> list[Path]:
    """The backends' run directories that exist so far, in the request's order."""
    return [run.path / b for b in backends_of(run) if (run.path / b / RUN_FILE).is_file()]


def start_backend_runs(options: RunOptions, backends: list[str], *, runs_dir: Path, out: Path | None,
                       progress: Progress | None, api_keys: dict[str, str] | None) -> RunSummary:
    run = RunDirectory.create(runs_dir, out)
    save_options(run, options)
    document = json.loads(run.file(RUN_FILE).read_text())
    run.write(RUN_FILE, json.dumps({**document, PLAN_KEY: backends}, indent=1))
    _say(run, progress, f"run {run.run_id} in {run.path}: {' and '.join(backends)}, one run each")
    return _run_each(run, options, backends, runs_dir=runs_dir, progress=progress, api_keys=api_keys)


def resume_backend_runs(run: RunDirectory, options: RunOptions, *, runs_dir: Path,
                        progress: Progress | None, api_keys: dict[str, str] | None) -> RunSummary:
    backends = backends_of(run)
    _say(run, progress, f"resuming run {run.run_id} ({' and '.join(backends)})")
    return _run_each(run, options, backends, runs_dir=runs_dir, progress=progress, api_keys=api_keys)


def _say(run: RunDirectory, progress: Progress | None, line: str) -> None:
    run.log(line)
    if progress is not None:
        progress(line)


def _run_each(run: RunDirectory, options: RunOptions, backends: list[str], *, runs_dir: Path,
              progress: Progress | None, api_keys: dict[str, str] | None) -> RunSummary:
    summaries: dict[str, RunSummary] = {}
    failures: dict[str, str] = {}
    with run.claimed():
        for backend in backends:
            child = run.path / backend

            def tagged(line: str, backend: str = backend) -> None:
                _say(run, progress, f"[{backend}] {line}")

            done = child / "summary.json"
            try:
                if done.is_file():
                    summaries[backend] = RunSummary.model_validate_json(done.read_text())
                    tagged("finished before: kept")
                elif (child / RUN_FILE).is_file():
                    summaries[backend] = resume_single_run(RunDirectory.find(str(child), runs_dir),
                                                           runs_dir=runs_dir, progress=tagged, api_keys=api_keys)
                else:
                    backend_options = options.model_copy(update={"backend": backend})
                    validate_options(backend_options, api_keys)
                    summaries[backend] = start_single_run(backend_options, runs_dir=runs_dir, out=child,
                                                          progress=tagged, api_keys=api_keys)
            except KgenUsageError as exc:
                failures[backend] = str(exc)
                tagged(f"failed: {exc}")
            except (KeyboardInterrupt, SystemExit) as exc:
                if not isinstance(exc, SystemExit) or exc.code not in (0, None):
                    _say(run, progress, f"interrupted: `kgen resume {resume_ref(run, runs_dir)}` continues "
                                        "every backend of this request")
                raise
    if not summaries:
        error = RunError("no backend produced a run: " + "; ".join(f"{b}: {m}" for b, m in failures.items()))
        record_stop(run, error)  # each backend's folder holds its own record
        raise error
    summary = merge_backend_summaries(run, options.request, summaries, failures)
    run.write("summary.json", summary.model_dump_json(indent=1))
    return summary


def fastest(kernels: list[BestKernel], target: str) -> BestKernel:
    """The kernel to report for ``target`` among several backends' winners: the fastest time
    measured on the target (``Timing.time_on``, the one ranking rule), else, when none was
    timed there (a CPU run), the first in the request's backend order."""
    timed = [k for k in kernels if k.time_on(target) is not None]
    return min(timed, key=lambda k: k.time_on(target)) if timed else kernels[0]


def merge_backend_summaries(run: RunDirectory, request: str, summaries: dict[str, RunSummary],
                            failures: dict[str, str]) -> RunSummary:
    first = next(iter(summaries.values()))
    targets = list(dict.fromkeys(t for s in summaries.values() for t in s.targets))
    best: dict[str, BestKernel] = {}
    for target in targets:
        kernels = [s.best[target] for s in summaries.values() if target in s.best]
        if kernels:
            best[target] = fastest(kernels, target)
    notes = [f"{backend}: no run ({message})" for backend, message in failures.items()]
    for target, kernel in best.items():
        if kernel.time_on(target) is not None and len(summaries) > 1:
            times = ", ".join(f"{b} {s.best[target].time_ms:.4g} ms" for b, s in summaries.items()
                              if target in s.best and s.best[target].time_on(target) is not None)
            notes.append(f"{target}: fastest is {kernel.backend} ({times})")
    usage = UsageLedger()
    for s in summaries.values():
        usage.merge(UsageLedger.model_validate(s.usage or {}))
    rejected: dict[str, int] = {}
    for s in summaries.values():
        for reason, count in s.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + count
    return RunSummary(
        run_id=run.run_id, run_dir=str(run.path), request=request, problem=first.problem,
        backend=", ".join(summaries), targets=targets, mode=first.mode, device=first.device,
        stop_reason="; ".join(f"{b}: {s.stop_reason}" for b, s in summaries.items() if s.stop_reason),
        candidates=sum(s.candidates for s in summaries.values()),
        passed=sum(s.passed for s in summaries.values()), rejected=rejected,
        no_code=sum(s.no_code for s in summaries.values()), best=best,
        usage=usage.model_dump(mode="json"),
        notes=notes, no_model_code=all(s.no_model_code for s in summaries.values()),
        by_backend=summaries,
    )
