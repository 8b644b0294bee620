"""What a SOURCE of `kgen export` holds: verified kernels, and why others cannot leave.

A SOURCE is a run (its id, or its folder): each target's winner that ``summary.json`` names,
its verdict read from the candidate's ``final_eval.json`` (the full-size verification) or
``eval.json``. Or it is a kernel file with ``--problem``: its verdict is the ``eval.json``
beside it (a run's candidate folder), else the seed library's ``evidence.json`` entry for the
problem whose code hash is the file's, else kgen verifies it now, exactly as `kgen eval` does.
Only a "passed" verdict exports; every other kernel is listed with the reason it cannot.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kgen.agent.run_directory import RunDirectory
from kgen.agent.runs.summary import RunSummary
from kgen.agent.spec.kernel_spec import KernelSpec
from kgen.backends.device import Device
from kgen.core.settings import load_settings
from kgen.errors import KgenUsageError
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import ProblemInfo
from kgen.evals.result import EvalResult
from kgen.export.problem_signature import ExportError, defines_model_new
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.schema import Timing

#: the verdict that exports; anything else is refused
PASSED = "passed"
#: the seed library's record of each seed's verification, beside the seeds
SEED_EVIDENCE = "evidence.json"


class Exportable(BaseModel):
    """One kernel a SOURCE holds, as `kgen export --list` shows it."""

    source: str
    #: the run's candidate id where the kernel is a run's winner ("" for a kernel file): what
    #: ``kgen export RUN --list`` names it by (the run is the one the person named)
    candidate: str = ""
    problem: str
    problem_path: Path
    target: str = ""
    backend: str
    verdict: str
    speed: str
    kernel_path: Path
    #: where the verdict was read (or that it was verified now)
    evidence: str
    code_hash: str
    #: why it cannot be exported; "" when it can
    reason: str = ""

    @property
    def exportable(self) -> bool:
        return not self.reason


def speed_text(timing: Timing) -> str:
    """A measured time and its ratio to torch.compile, or that it was not measured."""
    if timing.time_ms is None:
        return "not timed"
    ratio = timing.speedup_text("torch.compile")
    return f"{timing.time_ms:.4g} ms on {timing.device_name or 'a GPU'}" + (f", {ratio}" if ratio else "")


def _refusal(verdict: str, reason: str, where: str) -> str:
    """Why a kernel with this verdict cannot be exported ("" when it passed)."""
    if verdict == PASSED:
        return ""
    return f"not verified: {where} says {verdict}" + (f" ({reason})" if reason else "")


def _problem(name: str) -> ProblemInfo:
    try:
        return resolve_problem(name)
    except KgenUsageError as exc:  # unknown name, missing file, unreadable file: one line
        raise ExportError(exc.message) from exc


def _run_exportables(run: RunDirectory, target: str | None) -> list[Exportable]:
    """Each target's winner of a run (``summary.json``), with its verdict."""
    summary_path = run.file("summary.json")
    if not summary_path.is_file():
        raise ExportError(f"run {run.run_id} has no summary.json: it has not finished (`kgen resume {run.run_id}`), "
                          "so it names no verified winner")
    try:
        summary = RunSummary.model_validate_json(summary_path.read_text())
    except (ValidationError, ValueError) as exc:
        raise ExportError(f"run {run.run_id}: summary.json cannot be read ({type(exc).__name__})") from exc
    if not summary.best:
        raise ExportError(f"run {run.run_id} has no verified winner to export "
                          f"({'; '.join(summary.notes) or 'no target has a verified kernel'})")
    if target is not None and target not in summary.best:
        raise ExportError(f"run {run.run_id} has no winner for target {target} (it has: {', '.join(summary.best)})")
    spec_path = run.file("spec.json")
    problem_name = summary.problem
    if spec_path.is_file():  # the spec names a run's own problem file by path; the summary by name
        try:
            problem_name = KernelSpec.model_validate_json(spec_path.read_text()).problem or problem_name
        except (ValidationError, ValueError):
            pass
    if not problem_name:
        raise ExportError(f"run {run.run_id} names no problem")
    info = _problem(problem_name)
    rows = []
    for name, best in summary.best.items():
        if target is not None and name != target:
            continue
        # a run over several backends keeps each winner in its backend's run folder
        folder = Path(best.module).parent / "candidates" / best.candidate
        kernel = folder / f"{best.candidate}.py"
        result = _saved_eval(folder)
        verdict, reason = (result.verdict.value, result.reason) if result else ("not found", "no eval.json")
        rows.append(Exportable(
            source=f"{run.run_id}:{name}", candidate=best.candidate, problem=info.name, problem_path=info.path,
            target=name,
            backend=best.backend or summary.backend, verdict=verdict, speed=speed_text(best),
            kernel_path=kernel, evidence=f"{folder.name}/{'final_eval.json' if (folder / 'final_eval.json').is_file() else 'eval.json'}",
            code_hash=normalised_code_hash(kernel.read_text()) if kernel.is_file() else "",
            reason=_refusal(verdict, reason, f"candidate {best.candidate}'s evaluation") if kernel.is_file()
            else f"the winner's source {kernel} is missing"))
    return rows


def _saved_eval(folder: Path) -> EvalResult | None:
    """A candidate folder's verdict: the full-size verification where there is one."""
    for name in ("final_eval.json", "eval.json"):
        path = folder / name
        if path.is_file():
            try:
                return EvalResult.model_validate_json(path.read_text())
            except (ValidationError, ValueError):
                return None
    return None


def _seed_evidence(kernel: Path, info: ProblemInfo, code_hash: str) -> tuple[str, Timing] | None:
    """The seed library's verdict for this problem, when its recorded code hash is this file's."""
    path = kernel.parent / SEED_EVIDENCE
    if not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text()).get(info.name)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("code_hash") != code_hash:
        return None
    timing = Timing.model_validate(entry.get("timing") or {})
    return str(entry.get("evidence", {}).get("verdict", "unknown")), timing


def _file_exportable(kernel: Path, problem: str, backend: str, device: Device | None) -> Exportable:
    """A kernel file's verdict: a run's eval.json beside it, a seed's evidence, or verified now."""
    if not kernel.is_file():
        raise ExportError(f"kernel file not found: {kernel}")
    source = kernel.read_text()
    if not defines_model_new(source):
        raise ExportError(f"{kernel} defines no class ModelNew: a kernel file is a KernelBench solution "
                          "whose ModelNew launches the kernels")
    info = _problem(problem)
    code_hash = normalised_code_hash(source)
    common = dict(source=str(kernel), problem=info.name, problem_path=info.path, backend=backend,
                  kernel_path=kernel, code_hash=code_hash)
    saved = _saved_eval(kernel.parent) if (kernel.parent / "eval.json").is_file() else None
    if saved is not None:
        verdict = saved.verdict.value
        return Exportable(**common, verdict=verdict, speed=speed_text(_bench_timing(saved)),
                          evidence=f"{kernel.parent.name}/eval.json",
                          reason=_refusal(verdict, saved.reason, f"{kernel.parent.name}/eval.json"))
    seed = _seed_evidence(kernel, info, code_hash)
    if seed is not None:
        verdict, timing = seed
        return Exportable(**common, verdict=verdict, speed=speed_text(timing), evidence=f"seed {SEED_EVIDENCE}",
                          reason=_refusal(verdict, "", SEED_EVIDENCE))
    result = _verify_now(kernel, info, backend, device)
    verdict = result.verdict.value
    return Exportable(**common, verdict=verdict, speed=speed_text(_bench_timing(result)),
                      evidence=f"verified now on {result.device.value}",
                      reason=_refusal(verdict, result.reason, "kgen's verification"))


def _bench_timing(result: EvalResult) -> Timing:
    bench = result.bench
    if bench is None:
        return Timing()
    return Timing.model_validate(bench.model_dump(include=set(Timing.model_fields)))


def _verify_now(kernel: Path, info: ProblemInfo, backend: str, device: Device | None) -> EvalResult:
    """Verify a kernel file no record vouches for, the way `kgen eval` does."""
    from kgen.evals.harness import EvalOptions, evaluate

    options = EvalOptions(backend=backend) if device is None else EvalOptions(backend=backend, device=device)
    return evaluate(info.path, kernel, options)


def find_exportables(source: str, *, problem: str | None = None, target: str | None = None,
                     backend: str = "triton", device: Device | None = None) -> list[Exportable]:
    """Every kernel SOURCE holds: a run's winners (one ``target``'s with it), or one kernel file
    with its ``problem``. ``ExportError`` for a SOURCE that is neither, or holds no winner."""
    path = Path(source).expanduser()
    if path.suffix == ".py" or path.is_file():
        if problem is None:
            raise ExportError(f"{source} is a kernel file: name its problem with --problem NAME (a catalog "
                              "problem or a problem file)")
        if target is not None:
            raise ExportError("--target picks a run's winner; a kernel file has none to pick")
        return [_file_exportable(path, problem, backend, device)]
    if problem is not None:
        raise ExportError("--problem goes with a kernel file; a run names its own problem")
    try:
        run = RunDirectory.find(source, load_settings({}).runs_location)
    except KgenUsageError as exc:
        raise ExportError(exc.message) from exc
    return _run_exportables(run, target)
