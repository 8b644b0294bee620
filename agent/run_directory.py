"""A run's directory: everything a person needs to audit a run, and what resuming needs.

``$KGEN_HOME/runs/<id>/`` (or ``--out``) holds ``run.json`` (the request and
options, never keys), ``spec.json``, ``checkpoints.sqlite`` (LangGraph's
checkpointer), ``events.log``, ``usage.json``, one folder per candidate with
its source, prompt, reply and evaluation JSON, ``best_<target>.py`` (the best
kernel per target as a standalone importable module) and ``summary.json``.

Files are written whole (aside, then renamed), so a run killed mid-write
leaves the previous version, never half a file.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from datetime import datetime, timezone
from pathlib import Path

RUN_FILE = "run.json"
CHECKPOINTS = "checkpoints.sqlite"


class RunNotFoundError(LookupError):
    """A run id or path that names no run directory."""


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

    def best_module(self, target: str) -> Path:
        return self.path / f"best_{target.replace('-', '_')}.py"

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        write_atomic(path, text)
        return path

    def log(self, line: str) -> None:
        """Append one timestamped line to events.log (appends of one line are atomic enough)."""
        stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
        with open(self.path / "events.log", "a") as handle:
            handle.write(f"{stamp} {line}\n")
