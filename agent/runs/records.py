"""A run's candidates rebuilt from its directory alone, for reports made after the run.

The graph keeps its records in the SQLite checkpoint, but a report (``kgen report``) must
work on any run directory a person has: one copied from another machine, one whose
checkpoint belongs to an older kgen, one that was killed half-way. Everything needed is on
disk as plain files: each candidate's ``task.json`` (what it is and where it came from), its
source, and its ``eval.json`` (the verifier's verdict and the timing stage's figures), so the
records are rebuilt the way the graph builds them: ``CandidateRecord(**task)`` then
:func:`~kgen.agent.candidates.apply_result`. Nothing here is re-measured or guessed: a
candidate without an evaluation stays ``pending`` (or ``no_code`` when its model's reply held
none).

Also here: everything else a report reads from the run directory (:class:`RunData`, read
once by :func:`load_run`), and the numbers it derives from those files alone: the
verification margin of an evaluation, the search's progress, a winner's lineage through
``parent_ids`` and the gain of each step.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from kgen.agent.candidates import CandidateRecord, apply_result, best_for
from kgen.agent.llm.code_extraction import NoCodeError, extract_candidate
from kgen.agent.llm.usage import UsageLedger
from kgen.agent.run_directory import RunDirectory
from kgen.agent.runs.summary import RunSummary
from kgen.evals.result import EvalResult

#: a parent that is a knowledge-base kernel, not a candidate of this run: ``kb:<entry id>``
KB_PREFIX = "kb:"


def load_eval(run: RunDirectory, candidate_id: str, name: str = "eval.json") -> EvalResult | None:
    """A candidate's saved evaluation; None when there is none or it cannot be read (a report
    on a damaged run shows what it can instead of failing)."""
    try:
        return run.load_eval(candidate_id, name)
    except (OSError, ValueError, ValidationError):
        return None


def load_source(run: RunDirectory, candidate_id: str) -> str | None:
    """The candidate's kernel source, as verified; None when it never had one."""
    path = run.candidate_source(candidate_id)
    try:
        return path.read_text() if path.is_file() else None
    except OSError:
        return None


def _no_code_reasons(run: RunDirectory) -> dict[str, str]:
    """Why candidates got no code, as the run logged it: ``<stamp> <id> (<model>, <kind>): no
    code: <reason>`` (the graph's line; the last one wins on a resumed run)."""
    reasons: dict[str, str] = {}
    try:
        lines = run.file("events.log").read_text(errors="replace").splitlines()
    except OSError:
        return reasons
    for line in lines:
        _, _, rest = line.partition(" ")
        head, marker, reason = rest.partition("): no code: ")
        if marker and " (" in head:
            reasons[head.split(" (", 1)[0]] = reason
    return reasons


def _reply_reason(run: RunDirectory, candidate_id: str) -> str | None:
    """Why the saved reply holds no code (the extractor's own words); None without a reply."""

    replies = sorted(run.candidate_dir(candidate_id).glob("reply*.md"))
    if not replies:
        return None
    try:
        extract_candidate(replies[-1].read_text(errors="replace"))
    except NoCodeError as exc:
        return str(exc)
    return "the reply's code was not saved"


def load_records(run: RunDirectory) -> list[CandidateRecord]:
    """Every candidate of the run with what became of it, in the order they were made."""
    records: list[CandidateRecord] = []
    logged = _no_code_reasons(run)
    for folder in sorted((run.path / "candidates").glob("*")):
        task_file = folder / "task.json"
        if not task_file.is_file():
            continue
        try:
            task = json.loads(task_file.read_text())
            task.pop("source", None)
            record = CandidateRecord(**task)
        except (OSError, ValueError, ValidationError, TypeError):
            continue
        result = load_eval(run, record.id)
        if result is not None:
            record = apply_result(record, result)
        elif not run.candidate_source(record.id).is_file():
            reason = logged.get(record.id) or _reply_reason(run, record.id)
            if reason is not None:
                record = record.model_copy(update={"status": "no_code", "reason": reason})
        records.append(record)
    return sorted(records, key=lambda r: (r.generation, r.id))


def error_margin(result: EvalResult) -> float | None:
    """How close the candidate came to failing: the largest relative L2 error over every
    output of every trial, divided by that output's tolerance (below 1 passes; 0.9 passed
    with little room). Inf when an output was not finite; None when no output was compared."""
    ratios: list[float] = []
    for trial in result.trials:
        for output in trial.outputs:
            if output.tolerance_rel_l2 > 0:
                error = output.rel_l2_error
                ratios.append(math.inf if math.isnan(error) else error / output.tolerance_rel_l2)
    return max(ratios) if ratios else None


def max_rel_l2_error(result: EvalResult) -> float | None:
    errors = [o.rel_l2_error for t in result.trials for o in t.outputs]
    return max(errors) if errors else None


def progress_series(records: list[CandidateRecord],
                    targets: list[str]) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    """What the search's progress can be shown as, and per target the best so far after each
    evaluated candidate (``(candidates evaluated, value)``, from the first passed one on).

    The measure is the best speedup over torch.compile when one was measured, else the best
    time, else (no timing at all: a CPU run) the count of verified kernels; a figure counts
    for a target only when measured on its hardware (``Timing.time_on``)."""
    evaluated = [r for r in records if r.status == "evaluated"]
    timed = [r for r in evaluated if r.passed and r.time_on(r.target) is not None]
    metric = ("speedup" if any(r.speedup_vs_compile is not None for r in timed)
              else "time" if timed else "verified")
    series: dict[str, list[tuple[int, float]]] = {}
    for target in targets:
        best: float | None = None
        points: list[tuple[int, float]] = []
        for count, r in enumerate(evaluated, start=1):
            if r.passed and (r.target == target or r.time_on(target) is not None):
                value = {"speedup": r.speedup_vs_compile if r.time_on(target) is not None else None,
                         "time": r.time_on(target), "verified": (best or 0.0) + 1}[metric]
                if value is not None and (best is None or (value < best if metric == "time" else value > best)):
                    best = value
            if best is not None:
                points.append((count, best))
        series[target] = points
    return metric, series


@dataclass
class LineageNode:
    """One kernel in a winner's ancestry, and the kernels it was made from."""

    #: the candidate id, or ``kb:<id>`` for a knowledge-base kernel
    ref: str
    #: the candidate; for a knowledge-base parent, this run's re-measure of that kernel (its
    #: baseline candidate: same source), None when the run holds no copy of it
    record: CandidateRecord | None
    parents: list[LineageNode] = field(default_factory=list)
    #: already shown elsewhere in the tree (two paths to one ancestor): not expanded again
    repeated: bool = False

    @property
    def is_kb(self) -> bool:
        return self.ref.startswith(KB_PREFIX)


def lineage(records: list[CandidateRecord], winner_id: str) -> LineageNode | None:
    """The winner's ancestry, following ``parent_ids`` back to the roots (baselines, fresh
    model kernels, knowledge-base kernels); None when the winner is not among the records."""
    by_id = {r.id: r for r in records}
    baselines = {r.kb_id: r for r in records if r.kind == "baseline" and r.kb_id}
    if winner_id not in by_id:
        return None
    seen: set[str] = set()

    def node(ref: str) -> LineageNode:
        record = (baselines.get(ref[len(KB_PREFIX):]) if ref.startswith(KB_PREFIX)
                  else by_id.get(ref))
        if ref in seen:
            return LineageNode(ref=ref, record=record, repeated=True)
        seen.add(ref)
        parents = record.parent_ids if record is not None and not ref.startswith(KB_PREFIX) else []
        return LineageNode(ref=ref, record=record, parents=[node(p) for p in parents])

    return node(winner_id)


def gain(parent: CandidateRecord | None, child: CandidateRecord | None, target: str) -> float | None:
    """Parent time / child time on the target (above 1: the child is faster); None unless both
    were timed on the target's own hardware."""
    if parent is None or child is None:
        return None
    before, after = parent.time_on(target), child.time_on(target)
    if before is None or after is None or after <= 0:
        return None
    return before / after


def read_json(path: Path) -> dict:
    """A JSON object from the run directory; empty when absent or unreadable."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


NO_GPU = "not timed: no GPU"


@dataclass
class RunData:
    """Everything the report shows, read once from the run directory."""

    run: RunDirectory
    options: dict
    spec: dict
    #: None while the run has not finished (or its summary cannot be read)
    summary: RunSummary | None
    records: list[CandidateRecord]
    sources: dict[str, str]
    evals: dict[str, EvalResult]
    usage: UsageLedger
    #: a candidate whose lineage the report traces besides each target's winner's
    focus: str | None = None

    @property
    def targets(self) -> list[str]:
        if self.summary is not None and self.summary.targets:
            return self.summary.targets
        named = self.spec.get("targets") or self.options.get("targets") or []
        return list(dict.fromkeys([*named, *(r.target for r in self.records)]))

    @property
    def device(self) -> str:
        return self.summary.device if self.summary is not None else str(self.options.get("device", ""))

    @property
    def untimed_reason(self) -> str:
        return NO_GPU if self.device == "cpu" else "not timed: no candidate was timed on its target's GPU"

    def winner(self, target: str) -> str | None:
        """The run's winner for the target; for an unfinished run, the best so far."""
        if self.summary is not None:
            best = self.summary.best.get(target)
            return best.candidate if best is not None else None
        best = best_for(self.records, target)
        return best[0].id if best else None


def load_run(run_path: Path) -> RunData:
    run = RunDirectory(Path(run_path).expanduser().resolve())
    records = load_records(run)
    summary = None
    if run.file("summary.json").is_file():
        try:
            summary = RunSummary.model_validate_json(run.file("summary.json").read_text())
        except (OSError, ValueError, ValidationError):
            summary = None
    usage_dump = summary.usage if summary is not None and summary.usage else read_json(run.file("usage.json"))
    try:
        usage = UsageLedger.model_validate(usage_dump)
    except ValidationError:
        usage = UsageLedger()
    return RunData(
        run=run, options=read_json(run.file("run.json")).get("options", {}), spec=read_json(run.file("spec.json")),
        summary=summary, records=records,
        sources={r.id: s for r in records if (s := load_source(run, r.id)) is not None},
        evals={r.id: e for r in records if (e := load_eval(run, r.id)) is not None}, usage=usage,
    )
