"""Evaluate one candidate on one problem: the parent side of the sandbox.

This is what `kgen eval` and the agent call. Usage mistakes (a missing file,
an unknown problem or target, no GPU for ``--device cuda``) raise
``UsageError`` before anything runs; everything the candidate does wrong
ends as a rejected ``EvalResult``, never as an exception here.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

import kgen
from kgen.evals.catalog import UnknownProblemError, resolve_problem
from kgen.evals.child import ChildReport, ChildRequest
from kgen.evals.problem import ProblemError, ProblemInfo
from kgen.evals.result import EvalResult, RejectionClass, StageResult, StageStatus, Verdict
from kgen.evals.sandbox import SandboxLimits, SandboxOutcome, run_python_module

#: Stages in the order the child runs them; a killed child was in the first one missing.
STAGE_ORDER = ("load", "correctness", "compile")


class UsageError(Exception):
    """Bad input from the person or program calling kgen: exit code 2, nothing ran."""


class EvalOptions(BaseModel):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: str = "triton"
    targets: list[str] = Field(default_factory=list)
    #: fixed seeds for reproducing a failure; by default every run draws fresh ones
    seeds: list[int] | None = None
    n_seeds: int = Field(default=3, ge=1)
    timeout_s: float = Field(default=300.0, gt=0)
    keep_workdir: bool = False


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is visible to torch on this machine")
    return device


def size_sets_for(info: ProblemInfo, device: str) -> list[dict[str, int]]:
    """A GPU checks the default sizes and the problem's extra ones; the CPU interpreter the small set."""
    if device == "cpu":
        return [info.cpu_sizes()]
    return [dict(info.sizes), *({**info.sizes, **extra} for extra in info.extra_sizes)]


def _validate_targets(names: list[str]) -> list[str]:
    from kgen.backends.targets import UnknownTargetError, resolve_target

    resolved = []
    for name in names:
        try:
            resolved.append(resolve_target(name).name)
        except UnknownTargetError as exc:
            raise UsageError(str(exc.args[0] if exc.args else exc)) from exc
    return resolved


def _validate_backend(name: str) -> None:
    from kgen.backends.registry import UnknownBackendError, get_backend

    try:
        get_backend(name)
    except UnknownBackendError as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from exc


def _resolve_problem(problem: str | Path) -> ProblemInfo:
    try:
        return resolve_problem(problem)
    except (UnknownProblemError, ProblemError) as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from exc


def evaluate(problem: str | Path, candidate: str | Path, options: EvalOptions | None = None) -> EvalResult:
    """Verify a candidate against a problem's reference in a sandboxed child process."""
    options = options or EvalOptions()
    started = time.monotonic()
    info = _resolve_problem(problem)
    candidate_path = Path(candidate).expanduser()
    if not candidate_path.is_file():
        raise UsageError(f"candidate file not found: {candidate}")
    _validate_backend(options.backend)
    targets = _validate_targets(options.targets)
    device = resolve_device(options.device)
    seeds = options.seeds or [secrets.randbelow(2**31 - 1) for _ in range(options.n_seeds)]

    workdir = Path(tempfile.mkdtemp(prefix="kgen-eval-"))
    try:
        boxed_candidate = workdir / candidate_path.name
        shutil.copyfile(candidate_path, boxed_candidate)
        request = ChildRequest(
            problem_path=str(info.path),
            candidate_path=str(boxed_candidate),
            backend=options.backend,
            device=device,
            seeds=seeds,
            size_sets=size_sets_for(info, device),
            targets=targets,
        )
        request_path, report_path = workdir / "request.json", workdir / "report.json"
        request_path.write_text(request.model_dump_json())
        limits = SandboxLimits(timeout_s=options.timeout_s)
        outcome = run_python_module(
            "kgen.evals.child", [str(request_path), str(report_path)], limits, workdir=workdir
        )
        report = _read_report(report_path)
    finally:
        if not options.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    result = EvalResult(
        problem=info.name,
        problem_path=str(info.path),
        candidate=str(candidate_path),
        backend=options.backend,
        device=device,
        targets=targets,
        verdict=Verdict.PASSED,
        stages=report.stages,
        trials=report.trials,
        kernels=report.kernels,
        kgen_version=kgen.__version__,
    )
    _apply_outcome(result, report, outcome, options.timeout_s)
    result.seconds = time.monotonic() - started
    return result


def _read_report(path: Path) -> ChildReport:
    if not path.exists():
        return ChildReport()
    try:
        return ChildReport.model_validate_json(path.read_text())
    except ValueError:
        return ChildReport()


def _apply_outcome(result: EvalResult, report: ChildReport, outcome: SandboxOutcome, timeout_s: float) -> None:
    if report.finished and report.rejection is None and outcome.returncode == 0:
        result.reason = "verified against the fp64 reference"
        return
    result.verdict = Verdict.REJECTED
    if report.finished and report.rejection is not None:
        result.rejection, result.reason = report.rejection, report.reason
        return
    done = {s.name for s in report.stages}
    stage = next((name for name in STAGE_ORDER if name not in done), STAGE_ORDER[-1])
    if outcome.timed_out:
        result.rejection = RejectionClass.TIMEOUT
        result.reason = f"killed after the {timeout_s:g} s time limit during {stage}"
    else:
        result.rejection = RejectionClass.CRASH
        how = f"by {outcome.signal_name}" if outcome.signal_name else f"with exit code {outcome.returncode}"
        last = _last_line(outcome.stderr_tail)
        result.reason = f"the candidate's process died {how} during {stage}" + (f": {last}" if last else "")
    result.stages.append(
        StageResult(
            name=stage,
            status=StageStatus.FAILED,
            message=result.reason,
            seconds=outcome.seconds,
            evidence={"stderr_tail": outcome.stderr_tail[-2000:], "stdout_bytes": outcome.stdout_bytes},
        )
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
