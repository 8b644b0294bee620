"""The evaluation that runs inside the sandbox: load, check correctness, cross-compile.

Run as ``python -m kgen.evals.child REQUEST.json REPORT.json``. The report is
rewritten after every stage and every trial, so when the candidate kills
this process (segfault, illegal memory access, timeout) the parent still
has the evidence gathered up to that point.

Nothing here imports triton before the backend has prepared the process:
the CPU interpreter is chosen by an environment variable read at import.
"""

from __future__ import annotations

import copy
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kgen.backends.base import KernelLaunch, KernelReport
from kgen.evals.result import RejectionClass, StageResult, StageStatus, Trial


class ChildRequest(BaseModel):
    problem_path: str
    candidate_path: str
    backend: str = "triton"
    device: str = "cpu"
    seeds: list[int]
    size_sets: list[dict[str, int]]
    targets: list[str] = Field(default_factory=list)


class ChildReport(BaseModel):
    stages: list[StageResult] = Field(default_factory=list)
    trials: list[Trial] = Field(default_factory=list)
    kernels: list[KernelReport] = Field(default_factory=list)
    rejection: RejectionClass | None = None
    reason: str = ""
    finished: bool = False


class Rejected(Exception):
    def __init__(self, rejection: RejectionClass, message: str):
        super().__init__(message)
        self.rejection = rejection


def _write(report: ChildReport, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(report.model_dump_json())
    os.replace(tmp, path)


def _exception_line(exc: BaseException, candidate_path: str) -> str:
    """One line: the exception and the candidate's own line where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == Path(candidate_path).resolve()]
    where = f" at {Path(own[-1].filename).name}:{own[-1].lineno}" if own else ""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}{where}: {text[0] if text else ''}".rstrip(": ")


class _Evaluation:
    def __init__(self, request: ChildRequest, report_path: Path):
        self.request = request
        self.report_path = report_path
        self.report = ChildReport()
        from kgen.backends.registry import get_backend

        self.backend = get_backend(request.backend)
        self.backend.prepare_process(request.device)
        import torch  # after prepare_process: torch may import triton

        self.torch = torch
        self.device = torch.device(request.device)
        self.module: Any = None
        self.first_launches: list[KernelLaunch] = []

    def save(self) -> None:
        _write(self.report, self.report_path)

    def stage(self, name: str, status: StageStatus, message: str, started: float, **evidence: Any):
        self.report.stages.append(
            StageResult(
                name=name,
                status=status,
                message=message,
                seconds=time.monotonic() - started,
                evidence=evidence,
            )
        )
        self.save()

    # -- stages -----------------------------------------------------------------
    def load(self) -> None:
        from kgen.backends.module_loading import CandidateLoadError

        started = time.monotonic()
        try:
            self.module = self.backend.load_candidate(Path(self.request.candidate_path))
        except CandidateLoadError as exc:
            raise Rejected(RejectionClass.LOAD_ERROR, str(exc)) from exc
        model_new = getattr(self.module, "ModelNew", None)
        if not isinstance(model_new, type):
            raise Rejected(
                RejectionClass.NO_MODEL_NEW,
                f"{Path(self.request.candidate_path).name} defines no class ModelNew",
            )
        self.stage("load", StageStatus.PASSED, "ModelNew found", started)

    def correctness(self) -> None:
        from kgen.evals.problem import load_problem

        started = time.monotonic()
        worst: float = 0.0
        for sizes in self.request.size_sets:
            problem = load_problem(self.request.problem_path, sizes)
            for seed in self.request.seeds:
                trial = self._trial(problem, seed)
                worst = max([worst, *(o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300) for o in trial.outputs)])
        n = len(self.request.seeds) * len(self.request.size_sets)
        self.stage(
            "correctness",
            StageStatus.PASSED,
            f"{n} trial(s) matched the fp64 reference; worst error {worst:.2f}x of tolerance",
            started,
            seeds=self.request.seeds,
            size_sets=self.request.size_sets,
            worst_error_over_tolerance=worst,
        )

    def _to_device(self, value: Any, upcast: bool = False) -> Any:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            value = value.to(self.device)
            if upcast and value.is_floating_point():
                value = value.to(torch.float64)
            return value
        return value

    def _models(self, problem, seed: int, init: list[Any]):
        torch = self.torch
        torch.manual_seed(seed)
        reference = problem.model_class(*init).to(self.device)
        torch.manual_seed(seed)
        try:
            candidate = self.module.ModelNew(*init)
        except Exception as exc:  # noqa: BLE001 - untrusted code
            raise Rejected(RejectionClass.CONSTRUCTION_ERROR, f"ModelNew(*init_inputs) raised {_exception_line(exc, self.request.candidate_path)}") from exc
        if isinstance(candidate, torch.nn.Module):
            candidate = candidate.to(self.device)
            ref_state, cand_state = reference.state_dict(), candidate.state_dict()
            if list(ref_state) == list(cand_state):
                # Same parameters under the same names: give them the reference's values,
                # so a candidate initialised differently is judged on its kernels alone.
                candidate.load_state_dict(
                    {k: v.to(cand_state[k].dtype) for k, v in ref_state.items()}
                )
        return reference, candidate

    def _trial(self, problem, seed: int) -> Trial:
        from kgen.evals.compare import (
            ComparisonFailure,
            check_structure,
            compare_output,
            failure_of,
            flatten_outputs,
        )

        torch = self.torch
        started = time.monotonic()
        trial = Trial(seed=seed, sizes=problem.sizes)
        self.report.trials.append(trial)
        torch.manual_seed(seed)
        init = problem.get_init_inputs()
        inputs = [self._to_device(x) for x in problem.get_inputs()]
        reference, candidate = self._models(problem, seed, init)
        with torch.no_grad():
            ref_native = flatten_outputs(reference(*[_clone(x) for x in inputs]))
            ref64 = flatten_outputs(
                copy.deepcopy(reference).double()(*[self._to_device(x, upcast=True) for x in inputs])
            )
            try:
                with self.backend.record_launches() as log:
                    outputs = flatten_outputs(candidate(*[_clone(x) for x in inputs]))
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
            except Exception as exc:  # noqa: BLE001 - untrusted code
                raise Rejected(RejectionClass.RUNTIME_ERROR, f"forward raised {_exception_line(exc, self.request.candidate_path)}") from exc
        trial.launches = len(log.launches)
        trial.seconds = time.monotonic() - started
        if not self.first_launches:
            self.first_launches = list(log.launches)
        if trial.launches == 0:
            raise Rejected(
                RejectionClass.NO_KERNEL_LAUNCH,
                f"forward launched no {self.backend.name} kernel (seed {seed}, sizes {problem.sizes})",
            )
        try:
            check_structure(outputs, ref_native)
        except ComparisonFailure as exc:
            raise Rejected(exc.rejection, str(exc)) from exc
        trial.outputs = [
            compare_output(i, out, r64, rn)
            for i, (out, r64, rn) in enumerate(zip(outputs, ref64, ref_native, strict=True))
        ]
        failure = failure_of(trial.outputs)
        self.save()
        if failure is not None:
            raise Rejected(
                failure.rejection, f"{failure} (seed {seed}, sizes {_sizes_text(problem.sizes)})"
            )
        trial.passed = True
        self.save()
        return trial

    def compile(self) -> None:
        from kgen.backends.targets import resolve_target

        if not self.request.targets:
            return
        started = time.monotonic()
        for name in self.request.targets:
            target = resolve_target(name)
            reports = self.backend.cross_compile(self.module, self.first_launches, target)
            self.report.kernels.extend(reports)
            self.save()
            failed = [r for r in reports if not r.ok]
            if failed:
                raise Rejected(
                    RejectionClass.COMPILE_ERROR,
                    f"kernel {failed[0].kernel} does not compile for {target.name}: {failed[0].error}",
                )
        self.stage(
            "compile",
            StageStatus.PASSED,
            f"{len(self.report.kernels)} kernel build(s) for {', '.join(self.request.targets)}",
            started,
        )


def _clone(value: Any) -> Any:
    import torch

    return value.clone() if isinstance(value, torch.Tensor) else value


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def run(request: ChildRequest, report_path: Path) -> ChildReport:
    evaluation = _Evaluation(request, report_path)
    stage_name = "load"
    started = time.monotonic()
    try:
        evaluation.load()
        stage_name, started = "correctness", time.monotonic()
        evaluation.correctness()
        stage_name, started = "compile", time.monotonic()
        evaluation.compile()
    except Rejected as exc:
        evaluation.report.rejection = exc.rejection
        evaluation.report.reason = str(exc)
        evaluation.stage(stage_name, StageStatus.FAILED, str(exc), started)
    evaluation.report.finished = True
    evaluation.save()
    return evaluation.report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    request = ChildRequest.model_validate_json(Path(argv[0]).read_text())
    run(request, Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
