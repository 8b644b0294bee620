"""A run's outputs: ``summary.json`` and the best kernel per target as a module (the table a
person reads is drawn from the summary by ``kgen.cli.run_summary``).

The summary is also what ``kgen.generate()`` returns, so a script and a person
reading the terminal see the same figures; every figure in it comes from an
evaluation JSON in the run directory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from kgen.agent.candidates import CandidateRecord, apply_result, best_for, describe
from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import RunOptions
from kgen.agent.search.state import RunState
from kgen.backends.device import Device
from kgen.backends.registry import backend_info
from kgen.core.text import counted
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.timeline import SEPARATOR, busy_fraction, phase_totals
from kgen.knowledge_base.schema import Timing

if TYPE_CHECKING:
    from kgen.evals.result import EvalResult


def no_gpu_note(backend: str) -> str:
    """What a CPU run could not do, as the backend allows: Triton's interpreter verifies but
    does not time; a backend without one only compiles (``BackendInfo.runs_on_cpu``)."""

    info = backend_info(backend)
    if info.runs_on_cpu:
        return f"timings need a GPU: kernels were verified in {info.label}'s CPU interpreter, not timed"
    return (f"{info.label} kernels need a GPU to run: here they were compiled for the targets, not run, "
            "so none is verified or timed (--device cuda)")


class Evidence(BaseModel):
    device: str
    trials: int
    seeds: list[int]
    shapes: list[dict[str, int]]
    distributions: list[str]
    checks_passed: list[str]
    max_rel_l2_error: float | None = None


class BestKernel(Timing):
    """A target's winner: its timing fields as measured (``device_name``: the GPU), or none."""

    target: str
    #: the backend the kernel is written in (a request over several backends compares them)
    backend: str = ""
    candidate: str
    module: str
    origin: str
    description: str = ""
    #: why there is no time for this target, when there is none
    timing_note: str = ""
    evidence: Evidence
    #: per-kernel registers / spills / shared memory from the cross-compile for the target
    compile_report: list[str] = Field(default_factory=list)
    knowledge_base: str = ""


class GpuLoad(BaseModel):
    """One GPU's (one lane's) share of a run's evaluations."""

    #: ``host/lane`` (``Placement.label``); "this machine" for results saved before placements
    gpu: str
    gpu_name: str | None = None
    candidates: int = 0
    #: the share of the run's evaluating wall time this GPU was busy (its evaluations' GPU spans)
    busy_fraction: float | None = None
    #: its evaluations per minute of the run's evaluating wall time
    per_minute: float | None = None


class RunSummary(BaseModel):
    run_id: str
    run_dir: str
    request: str
    problem: str
    backend: str
    targets: list[str]
    mode: str
    device: str
    stop_reason: str = ""
    candidates: int = 0
    passed: int = 0
    rejected: dict[str, int] = Field(default_factory=dict)
    no_code: int = 0
    best: dict[str, BestKernel] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    #: models were asked and none returned code (every call failed, or only prose came back):
    #: a kernel in ``best`` is the knowledge base's, re-measured, not the models' work
    no_model_code: bool = False
    #: a request over several backends (agent/runs/backend_runs.py): each backend's own run, by
    #: name; ``backend`` then lists them and ``best`` holds the fastest per target
    by_backend: dict[str, RunSummary] = Field(default_factory=dict)
    #: where the evaluations' seconds went: seconds per timeline phase (``evals/timeline.py``),
    #: summed over the run's evaluations; nested phases (``correctness.trial``) are inside
    #: their top-level phase, the top-level ones add up to the evaluations' seconds
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    #: the share of ``evaluation_wall_s`` during which at least one evaluation kept the GPU busy
    #: (the union of every evaluation's GPU spans); None when no evaluation has a timeline
    gpu_busy_fraction: float | None = None
    #: the run's wall time while it evaluated: the first evaluation's start to the last one's
    #: end, the generations between them included (a resumed run's pause too)
    evaluation_wall_s: float | None = None
    #: evaluations per minute of ``evaluation_wall_s`` per GPU that worked (``GpuLoad``)
    candidates_per_gpu_minute: float | None = None
    #: each GPU's (each lane's) evaluations and busy share: several on a multi-GPU host or a cluster
    per_gpu: list[GpuLoad] = Field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return bool(self.best)


def _evidence(result: EvalResult) -> Evidence:
    from kgen.knowledge_base.write_back import summarise_verification

    summary = summarise_verification(result)
    return Evidence(device=summary.device, trials=summary.trials, seeds=summary.seeds,
                    shapes=summary.shapes, distributions=summary.distributions,
                    checks_passed=summary.checks_passed, max_rel_l2_error=summary.max_rel_l2_error)


class EvaluationTime(BaseModel):
    """Where a run's evaluation seconds went (``RunSummary``'s fields of the same names)."""

    phase_seconds: dict[str, float] = Field(default_factory=dict)
    gpu_busy_fraction: float | None = None
    evaluation_wall_s: float | None = None
    #: evaluations per minute per GPU: over the evaluating wall time and the GPUs that worked;
    #: None for a CPU run
    candidates_per_gpu_minute: float | None = None
    per_gpu: list[GpuLoad] = Field(default_factory=list)


def evaluation_time(results: list[EvalResult]) -> EvaluationTime:
    """The run's per-phase totals, GPU-busy fraction, evaluating wall time and each GPU's
    share from its evaluations' timelines (results saved before timelines add nothing)."""
    timed = [r for r in results if r.timeline.spans]
    walls = [w for r in timed if (w := r.timeline.wall()) is not None]
    if not walls:
        return EvaluationTime()
    wall = min(w[0] for w in walls), max(w[1] for w in walls)
    minutes = max(wall[1] - wall[0], 1e-9) / 60.0
    busy = busy_fraction([r.timeline for r in timed], wall)
    by_gpu: dict[str, list[EvalResult]] = {}
    for result in timed:
        by_gpu.setdefault(result.placement.label if result.placement else "this machine", []).append(result)
    loads = []
    for gpu, own in by_gpu.items():
        share = busy_fraction([r.timeline for r in own], wall)
        loads.append(GpuLoad(gpu=gpu, gpu_name=next((r.device_name for r in own if r.device_name), None),
                             candidates=len(own), busy_fraction=round(share, 4) if share is not None else None,
                             per_minute=round(len(own) / minutes, 2)))
    on_gpu = [r for r in timed if r.device.is_gpu]  # a CPU run has no GPU-minutes to count
    gpus = {r.placement.label if r.placement else "this machine" for r in on_gpu}
    return EvaluationTime(phase_seconds=phase_totals([r.timeline for r in timed]),
                          evaluation_wall_s=round(wall[1] - wall[0], 3),
                          gpu_busy_fraction=round(busy, 4) if busy is not None else None,
                          candidates_per_gpu_minute=round(len(on_gpu) / minutes / len(gpus), 2) if on_gpu else None,
                          per_gpu=sorted(loads, key=lambda load: load.gpu))


def _run_evaluations(run: RunDirectory, records: list[CandidateRecord]) -> list[EvalResult]:
    """Every evaluation the run saved: each candidate's, and a winner's full-size one."""
    found = (run.load_eval(r.id, name) for r in records for name in ("eval.json", "final_eval.json"))
    return [result for result in found if result is not None]


def _module_text(record: CandidateRecord, source: str, summary_line: str) -> str:
    header = (
        f"# kgen: best kernel for {record.target} ({record.id}, {record.origin}).\n"
        f"# {summary_line}\n"
        "# Import it and use ModelNew like the problem's Model.\n"
    )
    return header + source


def build_summary(run: RunDirectory, state: RunState, *, options: RunOptions, device: Device) -> RunSummary:
    """The run's summary from its final state and the evaluations in its directory; writes
    each target's winner as a module (``best_<target>.py``) on the way."""

    spec = state.spec
    records = state.records
    summary = RunSummary(
        run_id=run.run_id, run_dir=str(run.path), request=options.request,
        problem=resolve_problem(spec.problem).name if spec else "", backend=spec.backend if spec else "",
        targets=list(spec.targets) if spec else [],
        mode="offline (tuning known kernels)" if options.offline
        else "models: " + ", ".join(options.models),
        device=device, stop_reason=state.stop_reason,
        candidates=len(records), passed=sum(r.passed for r in records),
        rejected=dict(Counter(r.rejection or "rejected" for r in records if r.verdict == "rejected")),
        no_code=sum(r.status == "no_code" for r in records),
        usage=state.usage.model_dump(mode="json"),
    )
    if not device.is_gpu and summary.backend:
        summary.notes.append(no_gpu_note(summary.backend))
    for name, value in evaluation_time(_run_evaluations(run, records)):
        setattr(summary, name, value)
    for target, winner in state.winners.items():
        record = next(r for r in records if r.id == winner.candidate)
        final = run.load_eval(record.id, "final_eval.json") or run.load_eval(record.id)
        record = apply_result(record, final)
        module = run.best_module(target)
        source = run.candidate_source(record.id).read_text()
        module.write_text(_module_text(record, source, describe(record)))
        note = ""
        if record.time_on(target) is None:
            note = ("not timed: no GPU here" if not device.is_gpu
                    else f"timed on {record.device_name or 'this GPU'}, not on {target}")
        summary.best[target] = BestKernel(
            **Timing.model_validate(record.model_dump(include=set(Timing.model_fields))).model_dump(),
            target=target, backend=summary.backend, candidate=record.id, module=str(module),
            origin=record.origin,
            description=record.description, timing_note=note, evidence=_evidence(final),
            compile_report=record.kernels, knowledge_base=winner.kb,
        )
    for target in summary.targets:
        if target not in summary.best:
            tried = [r for r in records if r.target == target]
            summary.notes.append(f"no verified kernel for {target} ({counted(len(tried), 'candidate')} tried)")
    model_records = [r for r in records if r.origin == "model"]
    if model_records and all(r.status == "no_code" for r in model_records):
        summary.no_model_code = True
        summary.notes.append(f"no model returned code in {counted(len(model_records), 'request')}: "
                             f"{model_records[0].reason}")
    return summary


def write_outputs(run: RunDirectory, state: RunState, *, options: RunOptions, device: Device,
                  say: Callable[[str], None]) -> RunSummary:
    """The run's outputs from its final state: ``summary.json``, ``usage.json`` and the best
    kernel per target as a module; ``say`` gets the closing line."""
    summary = build_summary(run, state, options=options, device=device)
    run.write("summary.json", summary.model_dump_json(indent=1))
    run.write("usage.json", json_dump(summary.usage))
    records = state.records
    best = best_for(records, summary.targets[0]) if summary.targets else []
    compiled_only = [r for r in records if r.verdict == "inconclusive" and r.rejection == "compiled_not_run"]
    say(f"run finished: {counted(len(summary.best), 'target')} with a verified kernel"
               + (f"; best {best[0].id}" if best else "")
               + (f"; {counted(len(compiled_only), 'candidate')} compiled, not run: this backend's kernels need a GPU "
                  "to be verified (--device cuda)" if compiled_only and not best else ""))
    return summary


def json_dump(value: Any) -> str:
    import json

    return json.dumps(value, indent=1)


def _num(value: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if value is None else fmt.format(value)


def speedup_cell(timing: Timing, baseline: str, ratio: float | None) -> str:
    """The ratio, marked "≈" when its interval overlapped the baseline's: a figure, not a claim."""
    return ("≈" if ratio is not None and baseline in timing.same_speed_as else "") + _num(ratio, "{:.2f}x")


def top_level_phases(phase_seconds: dict[str, float]) -> dict[str, float]:
    """The phases that add up to the evaluations' seconds (nested ones are inside them)."""
    return {name: seconds for name, seconds in phase_seconds.items() if SEPARATOR not in name}


def busy_line(spent: EvaluationTime) -> str:
    """The GPU-busy fraction in words, with the wall time it is a share of, and each GPU's
    share and the candidates per GPU-minute when several GPUs worked."""
    if spent.gpu_busy_fraction is None or spent.evaluation_wall_s is None:
        return "GPU busy: no evaluation recorded a timeline"
    if spent.candidates_per_gpu_minute is None and not spent.gpu_busy_fraction:
        # no evaluation ran on a GPU: "GPU busy 0%" read as an idle GPU, on a machine without one
        return (f"evaluations ran on the CPU for {spent.evaluation_wall_s:.1f} s from the first one's start to "
                "the last one's end (no GPU to keep busy)")
    line = (f"GPU busy {100 * spent.gpu_busy_fraction:.0f}% of the {spent.evaluation_wall_s:.1f} s from the "
            "first evaluation's start to the last one's end")
    if spent.candidates_per_gpu_minute is not None:
        line += f"; {spent.candidates_per_gpu_minute:.1f} candidates per GPU-minute"
    if len(spent.per_gpu) > 1:
        line += "; per GPU: " + ", ".join(
            f"{load.gpu} {100 * (load.busy_fraction or 0):.0f}% busy ({counted(load.candidates, 'candidate')})"
            for load in spent.per_gpu)
    return line
