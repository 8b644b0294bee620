"""A run's directory: everything a person needs to audit a run, and what resuming needs.

``$KGEN_HOME/runs/<id>/`` (or ``--out``) holds ``run.json`` (the request and
options, never keys), ``spec.json``, ``checkpoints.sqlite`` (LangGraph's
checkpointer), ``events.log``, ``usage.json``, ``stopped.json`` (why a run ended without its summary:
``agent/runs/run_end.py``), one folder per candidate with
its source, prompt, reply and evaluation JSON, ``model_calls/`` (the calls that are
no candidate's: ``spec/`` reads the request, ``reference_problem/`` writes a reference
problem for an operation outside the catalog), ``best_<target>.py`` (the best
kernel per target as a standalone importable module) and ``summary.json``. Each
model call leaves ``prompt.md``, ``reply.md`` and ``usage.json`` in its folder
(``prompt_2.md``, ... for the folder's later calls; see ``model_calls.py``).

Files are written whole (aside, then renamed), so a run killed mid-write
leaves the previous version, never half a file. ``lock.json`` names the kgen process
working on the run while it works (``RunDirectory.claimed``): a second kgen on the same run
(a resume while the first still runs, or while a killed one's verifiers are still ending)
is refused instead of verifying the same candidate twice.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from kgen.evals.result import EvalResult
from kgen.evals.sandbox.lifecycle import is_running, start_ticks, verifiers_of

if TYPE_CHECKING:
    from kgen.evals.result import EvalResult
from kgen.errors import KgenUsageError

RUN_FILE = "run.json"
CHECKPOINTS = "checkpoints.sqlite"
LOCK_FILE = "lock.json"
#: How long a resume waits for a killed run's verifiers to end (their watchdog polls twice a second).
VERIFIERS_END_WAIT_S = 5.0
#: An unreadable lock older than this was torn by its writer's death, not being written now.
TORN_LOCK_AGE_S = 2.0


class RunNotFoundError(KgenUsageError, LookupError):
    """A run id or path that names no run directory."""


class RunInUseError(KgenUsageError, RuntimeError):
    """Another kgen process (or the verifiers of one that was killed) is working on the run."""


class RunLock(BaseModel):
    """Who works on a run: the process, told apart from a later one with the same pid."""

    pid: int
    started: int | None = None
    host: str
    since: str


def new_run_id() -> str:
    """Sortable by start time, unique without coordination: 20261122-075000-3fa9c1."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, runs_dir: Path, out: Path | None = None) -> RunDirectory:
        path = out.expanduser() if out is not None else runs_dir.expanduser() / new_run_id()
        if path.exists() and any(path.iterdir()):
            raise FileExistsError(f"run directory {path} already exists and is not empty")
        path.mkdir(parents=True, exist_ok=True)
        return cls(path.resolve())

    @classmethod
    def find(cls, run: str, runs_dir: Path) -> RunDirectory:
        """A run id under runs_dir (or its unambiguous start), or a path to a run directory."""
        as_path = Path(run).expanduser()
        if (as_path / RUN_FILE).is_file():
            return cls(as_path.resolve())
        # a prefix, never a pattern: "" or "*" must not pick some run
        candidates = [p for p in cls.list_runs(runs_dir) if run and p.name.startswith(run)]
        if len(candidates) == 1:
            return cls(candidates[0].resolve())
        if not candidates:
            raise RunNotFoundError(f"no run {run!r} in {runs_dir} (see `kgen runs`)")
        raise RunNotFoundError(
            f"run id {run!r} is ambiguous: {', '.join(p.name for p in candidates[:5])}"
        )

    @staticmethod
    def list_runs(runs_dir: Path) -> list[Path]:
        if not runs_dir.expanduser().is_dir():
            return []
        return sorted(p for p in runs_dir.expanduser().iterdir() if (p / RUN_FILE).is_file())

    # -- paths -----------------------------------------------------------------------

    def file(self, name: str) -> Path:
        return self.path / name

    def candidate_dir(self, candidate_id: str) -> Path:
        return self.path / "candidates" / candidate_id

    def candidate_source(self, candidate_id: str) -> Path:
        return self.candidate_dir(candidate_id) / f"{candidate_id}.py"

    def candidate_eval(self, candidate_id: str) -> Path:
        return self.candidate_dir(candidate_id) / "eval.json"

    def load_eval(self, candidate_id: str, name: str = "eval.json") -> EvalResult | None:
        """A candidate's saved evaluation (``eval.json``; ``final_eval.json``: the winner's
        full-size verification on a GPU); None when there is none."""

        path = self.candidate_dir(candidate_id) / name
        if not path.is_file():
            return None
        return EvalResult.model_validate_json(path.read_text())

    def best_module(self, target: str) -> Path:
        return self.path / f"best_{target.replace('-', '_')}.py"

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        write_atomic(path, text)
        return path

    def holds_results(self) -> bool:
        """Something to inspect: what a model wrote (``model_calls/``, a reference problem file)
        or a candidate. A run that failed holding only kgen's own bookkeeping (``run.json``,
        ``spec.json``, the log, checkpoints) is removed."""
        return (any((self.path / "candidates").glob("*")) or (self.path / "model_calls").is_dir()
                or any(self.path.glob("problem_*.py")))

    def holder(self) -> RunLock | None:
        """The kgen process working on the run now (on this host, alive), else None."""
        held = _read_lock(self.file(LOCK_FILE))
        if held is None or held.host != socket.gethostname() or not is_running(held.pid, held.started):
            return None
        return held

    @contextmanager
    def claimed(self, verifiers_wait_s: float = VERIFIERS_END_WAIT_S) -> Iterator[None]:
        """Work on the run as its only kgen process; ``RunInUseError`` while another does.

        A lock whose process is gone (killed, crashed) is taken over, once the verifiers that
        process started have ended: after a SIGKILL of kgen they end by themselves within a
        second, and one still running would verify a candidate beside the resumed run."""

        path = self.file(LOCK_FILE)
        held = _read_lock(path)
        if held is not None:
            if held.host != socket.gethostname():
                raise RunInUseError(
                    f"run {self.run_id} is marked in use by kgen process {held.pid} on {held.host} (since "
                    f"{held.since}); if that process is gone, delete {path} and resume again")
            if is_running(held.pid, held.started):
                raise RunInUseError(
                    f"run {self.run_id} is in use by kgen process {held.pid} (since {held.since}): wait for "
                    f"it to finish, or stop it (`kill {held.pid}`) and resume again")
            deadline = time.monotonic() + verifiers_wait_s
            while (left := verifiers_of(held.pid)) and time.monotonic() < deadline:
                time.sleep(0.1)
            if left:
                raise RunInUseError(
                    f"run {self.run_id}: the verifier process(es) {', '.join(map(str, left))} of its killed kgen "
                    f"(pid {held.pid}) still run; stop them (`kill {' '.join(map(str, left))}`) and resume again")
            path.unlink(missing_ok=True)
        elif path.exists() and time.time() - path.stat().st_mtime > TORN_LOCK_AGE_S:
            path.unlink(missing_ok=True)  # unreadable and not being written: its writer died mid-write
        mine = RunLock(pid=os.getpid(), started=start_ticks(os.getpid()), host=socket.gethostname(),
                       since=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise RunInUseError(f"run {self.run_id} was just claimed by another kgen process") from None
        with os.fdopen(fd, "w") as handle:
            handle.write(mine.model_dump_json())
        try:
            yield
        finally:
            if _read_lock(path) == mine:
                path.unlink(missing_ok=True)

    def log(self, line: str) -> None:
        """Append one timestamped line to events.log (appends of one line are atomic enough)."""
        stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
        with open(self.path / "events.log", "a") as handle:
            handle.write(f"{stamp} {line}\n")


def _read_lock(path: Path) -> RunLock | None:
    """The lock at ``path``; None when there is none or it cannot be read (a torn write: its
    writer died while writing, so nobody holds it)."""
    try:
        return RunLock.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return None
