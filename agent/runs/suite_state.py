"""A ``kgen solve`` folder's state (``suite.json``), and the names of the folder's files.

The suite's output folder (``--out``)::

    suite.json          the suite's state (:class:`SuiteRun`): per problem its file, run
                        directory, status, start and end times and exit reason
    suite.log           the suite's own progress lines, timestamped
    lock.json           while a ``kgen solve`` works on the folder (a second one is refused)
    runs/<problem>/     one ordinary run directory per problem (``kgen resume`` works on it)
    table/suite.md      kgen bench's table; also suite.csv, suite.svg and suite.json there
                        (``kgen bench --out``'s files; in their own folder because the
                        suite's state is ``suite.json`` here)
    index.html          every problem with its outcome, linking runs/<problem>/report.html

``suite.json`` is rewritten whole after every change (aside, then renamed): a suite killed at
any moment leaves the previous version, and the next ``kgen solve`` on the folder reads it to
know which problems to skip, resume or start (``suite_runs.py``).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kgen.agent.run_directory import write_atomic

STATE_FILE = "suite.json"
LOG_FILE = "suite.log"
RUNS_DIR = "runs"
TABLE_DIR = "table"
INDEX_FILE = "index.html"
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.json"

#: "unserved": offline, the library holds no kernel that may serve it, so no run was started
#: (``suite_library.py``); screened again by the next ``kgen solve``
Status = Literal["pending", "running", "finished", "failed", "interrupted", "unserved"]


def now_utc() -> str:
    """The time stamps of ``suite.json``: UTC, to the second, ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def relative_path(path: str | Path, base: Path) -> str:
    """``path`` as written in the suite's files: relative to the output folder when inside it."""
    try:
        return Path(path).resolve().relative_to(base).as_posix()
    except ValueError:
        return str(path)


class SuiteProblem(BaseModel):
    """One problem of the suite and where its run stands."""

    name: str
    problem_file: str
    #: the run directory, relative to the suite's output folder ("runs/19_ReLU")
    run_dir: str
    status: Status = "pending"
    started: str | None = None
    finished: str | None = None
    #: the run's stop reason when finished, the error when failed, why it stopped when interrupted
    exit_reason: str = ""
    #: runs started or resumed for it, over every ``solve`` of this folder
    attempts: int = 0
    #: why its report.html could not be written (the suite went on)
    report_error: str = ""


class SuiteRun(BaseModel):
    """``suite.json``: the state of one suite's runs, written whole after every change."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["kgen-suite"] = "kgen-suite"
    version: int = 1
    suite_dir: str
    created: str
    updated: str = ""
    #: the run options of the latest ``solve`` (request and problem_file are per problem);
    #: a resumed run keeps the options it started with (its run.json)
    options: dict[str, Any] = Field(default_factory=dict)
    problems: list[SuiteProblem] = Field(default_factory=list)

    def problem(self, name: str) -> SuiteProblem | None:
        return next((p for p in self.problems if p.name == name), None)

    @classmethod
    def load(cls, out: Path) -> SuiteRun | None:
        path = out / STATE_FILE
        if not path.is_file():
            return None
        return cls.model_validate_json(path.read_text())

    def save(self, out: Path) -> Path:
        self.updated = now_utc()
        path = out / STATE_FILE
        write_atomic(path, self.model_dump_json(indent=1) + "\n")
        return path

