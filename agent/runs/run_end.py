"""How a run stopped, and whether `kgen resume` can take it further.

A run that ends without its summary (an error, an interrupt) writes ``stopped.json`` (a
:class:`RunStop`: the error's message and type, the model and the requests sent when a model
call was the cause, when, and how many candidates it holds) and says the same in ``events.log``;
a resume removes it while it works, and a run that finishes has its ``summary.json`` instead.

``standing`` reads a run folder and decides, in this one place, what `kgen runs` lists and
what `kgen solve` resumes:

* **finished**: ``summary.json`` exists (whatever its outcome). Nothing to resume.
* **running**: a live kgen process holds the run's lock. Not resumable while it works.
* **interrupted** (Ctrl-C, SIGTERM/SIGHUP; or no record at all: the process was killed or the
  machine went down): resumable when a LangGraph checkpoint exists, since resuming continues
  from it, reusing paid replies and finished evaluations. Without one the run stopped before
  its search began, and running the request again is all there is.
* **failed** (an error ended it: an unreachable server, a rejected key, a request or problem
  kgen cannot use, an unexpected error): resumable only when the search had made progress (at
  least one candidate, and a checkpoint). Resuming repeats the run with the options it started
  with, so an error met before any candidate (the issue's unreachable server, met when the
  model first reads the request) is met again the same way, and a resume would do nothing a
  fresh run does not; such a run is listed with its error and the hint to fix the cause and
  run the request again. With candidates kept, fixing the cause outside the run (the server
  back up, a key set) and resuming keeps them, so it is listed with its error and `kgen resume`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kgen.agent.llm.providers import ProviderError
from kgen.agent.run_directory import RUN_FILE, RunDirectory, write_atomic
from kgen.agent.search.state import open_checkpointer
from kgen.core.text import counted

STOP_FILE = "stopped.json"
SUMMARY_FILE = "summary.json"

StopStatus = Literal["failed", "interrupted"]


class RunStop(BaseModel):
    """``stopped.json``: why a run ended without a summary."""

    status: StopStatus
    #: the error's own message ("interrupted" for an interrupt)
    error: str
    #: the exception's type (RunError, ProviderError, KeyboardInterrupt, ...)
    error_type: str
    #: the model call that ended it, when one did: its kind (unreachable, auth, timeout, ...),
    #: the model (its label names the server) and the requests sent, retries included
    error_kind: str | None = None
    model: str | None = None
    attempts: int | None = None
    #: the models the run was configured with
    models: list[str] = []
    #: candidates the run holds (each has its folder under candidates/)
    candidates: int = 0
    at: str


class RunStanding(BaseModel):
    """Where a run stands for `kgen runs` and `kgen solve` (see the module docstring)."""

    state: Literal["finished", "running", "interrupted", "failed"]
    resumable: bool
    #: why it stopped, in words (the error for a failed run)
    reason: str = ""
    #: what to do next
    hint: str = ""


def _provider_error(exc: BaseException) -> ProviderError | None:
    """The model call's error behind ``exc`` (a RunError is raised from it), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ProviderError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _models(run: RunDirectory) -> list[str]:
    try:
        return list(json.loads(run.file(RUN_FILE).read_text())["options"].get("models") or [])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def candidate_count(path: Path) -> int:
    """Candidates with their source on disk: what a resume keeps (a folder holding only the
    prompt of a call that failed is no candidate)."""
    folder = path / "candidates"
    if not folder.is_dir():
        return 0
    return sum(1 for p in folder.iterdir() if (p / f"{p.name}.py").is_file())


def record_stop(run: RunDirectory, exc: BaseException) -> RunStop:
    """Write ``stopped.json`` for a run that ``exc`` ended, and one line in ``events.log``: a
    kept run says why it stopped, not only what its model calls left behind."""
    interrupted = isinstance(exc, (KeyboardInterrupt, SystemExit))
    cause = _provider_error(exc)
    if interrupted:
        message = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped (exit {exc.code})"
    else:
        message = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    stop = RunStop(
        status="interrupted" if interrupted else "failed", error=message, error_type=type(exc).__name__,
        error_kind=cause.kind if cause else None, model=cause.model if cause else None,
        attempts=cause.attempts if cause else None, models=_models(run), candidates=candidate_count(run.path),
        at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    details = [f"{k} {v}" for k, v in (("model", stop.model), ("kind", stop.error_kind)) if v]
    if stop.attempts is not None:
        details.append(counted(stop.attempts, "attempt"))
    try:
        write_atomic(run.file(STOP_FILE), stop.model_dump_json(indent=1) + "\n")
        run.log(f"stopped ({stop.status}, {stop.error_type}): {stop.error}"
                + (f" [{', '.join(details)}]" if details else "") + f"; {counted(stop.candidates, 'candidate')} kept")
    except OSError:
        pass  # a folder that cannot be written (gone, disk full): the error itself still goes on up
    return stop


def clear_stop(run: RunDirectory) -> None:
    """A run being worked on again has no stop record (its events.log keeps the history)."""
    run.file(STOP_FILE).unlink(missing_ok=True)


def read_stop(path: Path) -> RunStop | None:
    try:
        return RunStop.model_validate_json((path / STOP_FILE).read_text())
    except (OSError, ValueError):
        return None


def _backend_runs(path: Path) -> list[Path]:
    """The backends' run folders inside a run of several backends (none for a single run)."""
    return [p for p in path.iterdir() if (p / RUN_FILE).is_file()] if path.is_dir() else []


def has_checkpoint(path: Path) -> bool:
    """Whether the run at ``path`` holds a LangGraph checkpoint, i.e. ``resume_run`` can
    continue it (a run stopped before its graph started holds none). A folder of several
    backends' runs has its checkpoints in the backends' folders."""
    children = _backend_runs(path)
    if children:
        return any(has_checkpoint(child) for child in children)
    run = RunDirectory(path)
    if not run.checkpoints.is_file():
        return False
    try:
        saver, connection = open_checkpointer(run)
    except Exception:
        return False
    try:
        return saver.get_tuple({"configurable": {"thread_id": run.run_id}}) is not None
    except Exception:
        return False
    finally:
        connection.close()


def _progress(path: Path) -> int:
    """Candidates the run (or its backends' runs) holds: the search's progress a resume keeps."""
    children = _backend_runs(path)
    return candidate_count(path) + sum(candidate_count(child) for child in children)


def standing(path: Path, resume: str | None = None) -> RunStanding:
    """The run at ``path``: finished, interrupted or failed, and whether resuming it can do
    anything a fresh run cannot (the rule is the module docstring's). ``resume`` is how the
    hint names the run for `kgen resume` (its id; by default its path)."""
    resume = resume or str(path)
    if (path / SUMMARY_FILE).is_file():
        return RunStanding(state="finished", resumable=False)
    holder = RunDirectory(path).holder()
    if holder is not None:
        return RunStanding(state="running", resumable=False, reason=f"kgen process {holder.pid} since {holder.since}",
                           hint="wait for it to finish")
    stop = read_stop(path)
    checkpoint = has_checkpoint(path)
    if stop is None or stop.status == "interrupted":
        reason = stop.error if stop is not None else "stopped without a record (killed)"
        if checkpoint:
            return RunStanding(state="interrupted", resumable=True, reason=reason, hint=f"kgen resume {resume}")
        return RunStanding(state="interrupted", resumable=False, reason=f"{reason}, before its search began",
                           hint="run the request again")
    kept = _progress(path)
    if kept and checkpoint:
        return RunStanding(state="failed", resumable=True, reason=stop.error,
                           hint=f"fix the cause, then `kgen resume {resume}` continues with the "
                                f"{counted(kept, 'candidate')} kept")
    return RunStanding(state="failed", resumable=False, reason=stop.error,
                       hint="resuming would meet the same error before any candidate: fix the cause and "
                            "run the request again")


__all__ = ["STOP_FILE", "RunStanding", "RunStop", "clear_stop", "has_checkpoint", "read_stop",
           "record_stop", "standing"]
