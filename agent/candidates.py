"""A candidate's identity and record, and the one ranking rule over records.

The graph's state holds these (checkpointed), the report and the suite runner rebuild
them from the run directory (``runs/records.py``), and the search policy, the archive and
the operator statistics all read them. A record is filled from its evaluation here
(:func:`apply_result`), and a verified one becomes a knowledge-base entry here
(:func:`entry_for_candidate`): the knowledge base sits below the agent and never sees a
record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from kgen.core.units import byte_size
from kgen.knowledge_base.schema import KernelEntry, Provenance, Timing

if TYPE_CHECKING:
    from kgen.backends.base import KernelReport
    from kgen.evals.bundle import EvidenceBundle
    from kgen.evals.result import EvalResult

Origin = Literal["knowledge_base", "mutation", "model"]
TaskKind = Literal["baseline", "mutate", "sweep", "generate", "improve", "fix", "crossover"]


class CandidateIdentity(BaseModel):
    """What a candidate is and where it came from; planned (and checkpointed) before any model
    is called, so its id is stable across a resume."""

    id: str
    generation: int
    target: str
    kind: TaskKind
    origin: Origin
    model: str = ""
    parent_ids: list[str] = Field(default_factory=list)
    description: str = ""
    #: knowledge-base id the source came from (baseline), for provenance
    kb_id: str | None = None
    #: the archive island it belongs to (``archive.py``); children inherit their parent's
    island: int = 0


class CandidateTask(CandidateIdentity):
    """One candidate to produce."""

    #: ready source for baseline and mutation tasks; models write theirs
    source: str | None = None


class CandidateRecord(CandidateIdentity, Timing):
    """A candidate and what became of it; its timing fields are the timing stage's
    (``device_name`` is the GPU it was timed on)."""

    status: Literal["pending", "no_code", "evaluated"] = "pending"
    verdict: Literal["passed", "rejected", "inconclusive"] | None = None
    rejection: str | None = None
    reason: str = ""
    #: the kgen target the timing GPU resolves to: a time counts only for that target
    timed_target: str | None = None
    kernels: list[str] = Field(default_factory=list)
    #: target -> whether every kernel compiled for it (a resource overflow there is False)
    compiles_for: dict[str, bool] = Field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"


def rank_key(record: CandidateRecord, target: str) -> tuple:
    """Passed first, then timed on the target and fastest, then earliest (the baseline first)."""
    time = record.time_on(target)
    return (not record.passed, time is None, time if time is not None else 0.0,
            record.generation, record.id)


def best_for(records: list[CandidateRecord], target: str, n: int = 1) -> list[CandidateRecord]:
    """The n best passed candidates for a target."""
    passed = [r for r in records if r.passed and (r.target == target or r.compiles_for.get(target))]
    return sorted(passed, key=lambda r: rank_key(r, target))[:n]


def first_line(text: str) -> str:
    """The first non-blank line of a compiler's (or anyone's) message, stripped."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def kernel_lines(reports: Iterable[KernelReport]) -> list[str]:
    """One line per compiled kernel and target: the resources that limit occupancy."""
    lines: list[str] = []
    for r in reports:
        if not r.ok:
            lines.append(f"{r.kernel} on {r.target}: does not compile ({first_line(r.error or '')})")
            continue
        parts = [
            f"{r.registers} registers/thread" if r.registers is not None else None,
            f"{r.spills} spills" if r.spills is not None else None,
            f"{byte_size(r.shared_bytes)} shared memory" if r.shared_bytes is not None else None,
            f"{r.num_warps} warps" if r.num_warps is not None else None,
            f"{r.num_stages} stages" if r.num_stages is not None else None,
        ]
        line = f"{r.kernel} on {r.target}: " + (", ".join(p for p in parts if p) or "compiled")
        if line not in lines:
            lines.append(line)
    return lines


def apply_result(record: CandidateRecord, result: EvalResult) -> CandidateRecord:
    """A candidate's record updated with its evaluation's verdict, timing and compile report."""
    from kgen.knowledge_base.write_back import timing_from_result

    timing = timing_from_result(result)
    return record.model_copy(update={
        **timing.model_dump(),
        "status": "evaluated",
        "verdict": result.verdict.value,
        "rejection": result.rejection.value if result.rejection else (
            result.inconclusive.value if result.inconclusive else None
        ),
        "reason": result.reason,
        "timed_target": timing.timed_on,
        "kernels": kernel_lines(result.kernels),
        "compiles_for": {t: ok for t in dict.fromkeys(k.target for k in result.kernels)
                         if (ok := result.compiles_for(t)) is not None},
        "seconds": result.seconds,
    })


def describe(record: CandidateRecord) -> str:
    if record.status == "no_code":
        return f"no code ({record.reason})"
    if record.verdict == "inconclusive" and record.rejection == "compiled_not_run":
        return "compiled, not run (its kernels need a GPU): " + record.reason.removeprefix("compiled, not run: ")
    if not record.passed:
        return f"{(record.verdict or 'rejected').upper()} ({record.rejection}): {record.reason}"
    if record.time_ms is None:
        return "passed (not timed: no GPU)"
    speed = f"{record.time_ms:.4g} ms"
    if (versus := record.speedup_text("torch.compile")) is not None:
        speed += f", {versus}"
    return f"passed, {speed}"


def entry_for_candidate(result: EvalResult, source: str, record: CandidateIdentity, *, run_id: str,
                        spec_text: str, target: str, dtype: str, operation: str,
                        shapes: dict[str, int] | None, bundle: EvidenceBundle | None = None) -> KernelEntry:
    """A run's verified candidate as a knowledge-base entry, its provenance naming who wrote it
    (the model, offline tuning or the knowledge base), the run, its generation and its parents."""
    from kgen.knowledge_base.write_back import entry_from_result

    provenance = Provenance(
        model=record.model or ("offline-mutation" if record.origin == "mutation" else "knowledge-base"),
        run_id=run_id,
        parent_ids=[p.removeprefix("kb:") for p in record.parent_ids] + ([record.kb_id] if record.kb_id else []),
        generation=record.generation,
    )
    return entry_from_result(result, source, spec_text=spec_text, target=target, dtype=dtype,
                             provenance=provenance, operation=operation, shapes=shapes, bundle=bundle)
