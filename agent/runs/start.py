"""Starting and resuming runs: the one place the CLI and ``kgen.generate()`` both call.

A request of one backend is one run (``single_run.py``); a request over several backends is
one run per backend in a folder of its own (``backend_runs.py``).
"""

from __future__ import annotations

from pathlib import Path

from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import RunOptions
from kgen.agent.runs.backend_runs import is_backend_runs, resume_backend_runs, start_backend_runs
from kgen.agent.runs.single_run import (
    load_options,
    resume_single_run,
    start_single_run,
    validate_options,
)
from kgen.agent.runs.summary import RunSummary
from kgen.agent.search.graph import Progress
from kgen.agent.spec.request_scan import requested_backends


def _requested_backends(request: str) -> list[str]:
    return requested_backends(request)


def start_run(options: RunOptions, *, runs_dir: Path, out: Path | None = None,
              progress: Progress | None = None, api_keys: dict[str, str] | None = None) -> RunSummary:
    validate_options(options, api_keys)
    backends = [] if options.backend else _requested_backends(options.request)
    if backends:  # "..., both backends": one run per backend (agent/runs/backend_runs.py)
        return start_backend_runs(options, backends, runs_dir=runs_dir, out=out, progress=progress,
                                  api_keys=api_keys)
    return start_single_run(options, runs_dir=runs_dir, out=out, progress=progress, api_keys=api_keys)


def resume_run(run_ref: str, *, runs_dir: Path, progress: Progress | None = None,
               api_keys: dict[str, str] | None = None) -> RunSummary:
    run = RunDirectory.find(run_ref, runs_dir)
    if is_backend_runs(run):
        return resume_backend_runs(run, load_options(run), runs_dir=runs_dir, progress=progress,
                                   api_keys=api_keys)
    return resume_single_run(run, runs_dir=runs_dir, progress=progress, api_keys=api_keys)
