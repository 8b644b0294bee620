"""One evaluation to run somewhere: what a lane needs, by value.

A lane on another machine shares no files with the caller, so a job carries the candidate's
source, and the problem's source when the problem is a file rather than a catalog name; a
lane on this machine reads the caller's files (``LaneRunner.shares_files``).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from kgen.backends.device import Device
from kgen.evals.harness import EvalOptions
from kgen.evals.placement import Placement
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.result import EvalResult
from kgen.evals.verdict import InconclusiveCause, Verdict


class EvalJob(BaseModel):
    """A candidate, its problem and how to evaluate it."""

    #: the caller's problem argument: a catalog name or a file path (how results name it)
    problem: str
    #: the problem file's text when ``problem`` is a file; None for a catalog problem
    problem_source: str | None = None
    #: the caller's candidate path (results keep it, wherever the job ran)
    candidate: str
    candidate_source: str
    options: EvalOptions

    @classmethod
    def of(cls, problem: str | Path, candidate: str | Path, options: EvalOptions) -> EvalJob:
        """The job for one candidate. Raises ``KgenUsageError`` for an unknown problem or a
        missing candidate file, here in the caller, as ``harness.evaluate`` would."""
        from kgen.errors import KgenUsageError

        info = resolve_problem(problem)
        path = Path(candidate).expanduser()
        if not path.is_file():
            raise KgenUsageError(f"candidate file not found: {candidate}")
        in_catalog = str(problem) == info.name and not Path(str(problem)).is_file()
        return cls(problem=str(problem), problem_source=None if in_catalog else info.path.read_text(encoding="utf-8"),
                   candidate=str(candidate), candidate_source=path.read_text(encoding="utf-8", errors="replace"),
                   options=options)

    def problem_file_name(self) -> str:
        """The name a copy of the problem file keeps: a problem is named by its file's stem."""
        return _file_name(self.problem)

    def candidate_file_name(self) -> str:
        """The name a copy of the candidate keeps (its messages name the file)."""
        return _file_name(self.candidate)

    def as_asked(self, result: EvalResult) -> EvalResult:
        """``result`` naming the caller's files, not the lane's copies."""
        result.candidate = self.candidate
        if self.problem_source is not None:
            result.problem_path = str(resolve_problem(self.problem).path)
        return result

    def no_verdict(self, placement: Placement, cause: InconclusiveCause, reason: str) -> EvalResult:
        """The result of a job that no lane could judge (lost, or kgen failed in the lane)."""
        info = resolve_problem(self.problem)
        return EvalResult(problem=info.name, problem_path=str(info.path), candidate=self.candidate,
                          backend=self.options.backend,
                          device=Device.CUDA if placement.gpu_index is not None else Device.CPU,
                          targets=list(self.options.targets), verdict=Verdict.INCONCLUSIVE, inconclusive=cause,
                          reason=reason, placement=placement)


def _file_name(path: str) -> str:
    name = Path(path).name
    return name if re.fullmatch(r"[\w.\-]+\.py", name) else "module.py"
