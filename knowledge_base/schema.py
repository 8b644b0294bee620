"""What the knowledge base holds: verified kernels with their evidence, and guidance notes.

A :class:`KernelEntry` is the unit of export/import and of Chroma storage. In
Chroma, the record's document is the whole entry as JSON (so every field
round-trips exactly, whatever Chroma's metadata types allow), and the fields
retrieval ranks and filters on (problem, backend, target, dtype, role,
timing) are small flat metadata.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from kgen.backends.targets import UnknownTargetError, resolve_target
from kgen.evals.bundle import EvidenceBundle
from kgen.evals.timing.bench_result import speedup_text

#: "best": the fastest verified kernel of its (problem, backend, target, dtype);
#: "stepping_stone": best of its generation once, kept so evolution can branch from it
KernelRole = Literal["best", "stepping_stone"]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def target_family(target: str) -> str:
    """The architecture family retrieval groups targets by: 'hopper', 'cdna-3', ...; 'any' if unknown."""

    try:
        architecture = resolve_target(target).architecture
    except UnknownTargetError:
        return "any"
    return re.sub(r"[^a-z0-9]+", "-", architecture.lower()).strip("-")


class VerificationSummary(BaseModel):
    """How the kernel was verified: enough for a reader to judge the claim 'correct'."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["passed"] = "passed"
    device: str
    seeds: list[int] = Field(default_factory=list)
    shapes: list[dict[str, int]] = Field(default_factory=list)
    distributions: list[str] = Field(default_factory=list)
    checks_passed: list[str] = Field(default_factory=list)
    trials: int = 0
    max_rel_l2_error: float | None = None
    train_check: Literal["passed", "not_run"] = "not_run"
    #: targets the kernel cross-compiled for during verification
    compiled_for: list[str] = Field(default_factory=list)
    kgen_version: str = ""


class Timing(BaseModel):
    """Measured on a GPU by kgen's timing stage; all None when verification ran on a CPU."""

    model_config = ConfigDict(extra="forbid")

    device_name: str = ""
    time_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    #: baselines ("eager", "torch.compile") whose p10-p90 interval overlapped the kernel's: the
    #: ratio is kept as measured but claims no speedup (``evals/timing/bench_result.py``)
    same_speed_as: list[str] = Field(default_factory=list)
    pct_of_sol: float | None = None
    achieved_tbs: float | None = None
    achieved_tflops: float | None = None

    @property
    def measured(self) -> bool:
        return self.time_ms is not None

    @property
    def timed_on(self) -> str | None:
        """The kgen target whose hardware took this timing (None: not timed, or a GPU kgen
        has no target for)."""
        if self.time_ms is None or not self.device_name:
            return None

        try:
            return resolve_target(self.device_name).name
        except UnknownTargetError:
            return None

    def time_on(self, target: str) -> float | None:
        """The one ranking rule: a time counts for a target only when it was measured on that
        target's hardware. An H100 time never ranks a kernel for MI300X, in the search or in
        the knowledge base."""
        return self.time_ms if self.timed_on == target else None

    def speedup_text(self, baseline: str) -> str | None:
        """The speedup over ``baseline`` as every summary prints it; None when not measured."""

        ratio = {"eager": self.speedup_vs_eager, "torch.compile": self.speedup_vs_compile}.get(baseline)
        return None if ratio is None else speedup_text(ratio, baseline, baseline not in self.same_speed_as)


def faster_on(a: Timing, b: Timing, target: str) -> bool:
    """``a`` is strictly faster than ``b`` on ``target`` by measurement on that target; a
    kernel not timed there never beats anything, and anything timed there beats one not."""
    time_a, time_b = a.time_on(target), b.time_on(target)
    return time_a is not None and (time_b is None or time_a < time_b)


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: who wrote it: "seed", "offline-mutation", or a model string such as "openai:gpt-5"
    model: str
    run_id: str = ""
    parent_ids: list[str] = Field(default_factory=list)
    generation: int | None = None
    created: str = Field(default_factory=utc_now)


class KernelEntry(BaseModel):
    """One verified kernel for one (problem, backend, target, dtype)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    source: str
    spec_text: str
    problem: str
    operation: str
    backend: str
    target: str
    target_family: str
    dtype: str
    shapes: dict[str, int] = Field(default_factory=dict)
    evidence: VerificationSummary
    timing: Timing = Field(default_factory=Timing)
    provenance: Provenance
    code_hash: str
    role: KernelRole = "best"
    #: the verification's evidence bundle (``evals/bundle.py``), which `kgen verify` re-checks;
    #: None for a kernel stored without one (seeds, entries written before bundles)
    bundle: EvidenceBundle | None = None

    @model_serializer(mode="wrap")
    def _bundle_when_present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Written only when there is one: entries without a bundle keep their bytes."""
        data = handler(self)
        if data.get("bundle", True) is None:
            del data["bundle"]
        return data

    @property
    def slot(self) -> tuple[str, str, str, str]:
        """The key the store keeps one best kernel for."""
        return (self.problem, self.backend, self.target, self.dtype)

    def search_text(self) -> str:
        """What the embedding sees: the spec and names, then the code's own names and summary.

        Not the whole source: a request is a few words, and a hundred lines of loads and
        stores would drown them in every kernel alike."""
        return "\n".join(
            [self.spec_text, self.problem, self.operation, self.backend, self.target,
             self.target_family, self.dtype, code_outline(self.source)]
        )

    def summary_line(self) -> str:
        timing = self.timing
        if timing.measured:
            speed = f"{timing.time_ms:.4g} ms"
            if (versus := timing.speedup_text("torch.compile")) is not None:
                speed += f", {versus}"
            if timing.pct_of_sol is not None:
                speed += f", {timing.pct_of_sol:.0f}% SOL"
            speed += f" on {timing.device_name or self.target}"
        else:
            speed = "not timed (verified on CPU)"
        return f"{self.problem} [{self.backend}, {self.target}, {self.dtype}] {speed}"


def code_outline(source: str) -> str:
    """The module docstring's first paragraph and the names of its functions and classes."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    doc = (ast.get_docstring(tree) or "").split("\n\n")[0]
    # top-level definitions and class bodies only: walking every node costs twice as much
    nodes = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
    names = [
        node.name for node in nodes
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in ("forward", "__init__")
    ]
    return "\n".join([doc, " ".join(names)])


def kernel_id(code_hash: str, problem: str, backend: str, target: str, dtype: str) -> str:
    """Deterministic: the same code for the same slot always gets the same id, so concurrent
    writers of one kernel converge on one record instead of duplicating it."""
    key = "|".join((code_hash, problem, backend, target, dtype))
    return "k-" + hashlib.sha256(key.encode()).hexdigest()[:16]


#: characters of an id shown in tables ("k-" and 10 hex digits): ``kgen kb show`` takes any
#: unambiguous start, so a short id opens its kernel as git's short hashes open a commit
SHORT_ID_LENGTH = 12


def short_id(full_id: str) -> str:
    """An id as tables show it (``SHORT_ID_LENGTH``): the kernel's row fits a terminal's width."""
    return full_id[:SHORT_ID_LENGTH]


class GuidanceNote(BaseModel):
    """A hardware / backend / correctness note from ``knowledge_base/guidance/*.md``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    backends: list[str]
    targets: list[str]
    topics: list[str] = Field(default_factory=list)
    text: str

    def applies_to(self, backend: str, target: str) -> bool:
        backend_ok = "all" in self.backends or backend in self.backends
        target_ok = "all" in self.targets or target in self.targets
        return backend_ok and target_ok


def scalar_metadata(entry: KernelEntry) -> dict[str, Any]:
    """The flat fields Chroma filters on; None values are left out (Chroma rejects them)."""
    fields: dict[str, Any] = {
        "problem": entry.problem,
        "operation": entry.operation,
        "backend": entry.backend,
        "target": entry.target,
        "target_family": entry.target_family,
        "dtype": entry.dtype,
        "role": entry.role,
        "code_hash": entry.code_hash,
        # single-field keys: a Chroma filter's cost grows with the records it matches, so
        # lookups use one selective equality instead of an $and of broad ones
        "slot": "|".join(entry.slot),
        # "-" rather than absent: an upsert merges metadata, so a demoted record must overwrite it
        "best_of": f"{entry.problem}|{entry.backend}" if entry.role == "best" else "-",
        "model": entry.provenance.model,
        "run_id": entry.provenance.run_id,
        "created": entry.provenance.created,
        "time_ms": entry.timing.time_ms,
        "speedup_vs_compile": entry.timing.speedup_vs_compile,
        "pct_of_sol": entry.timing.pct_of_sol,
    }
    return {key: value for key, value in fields.items() if value is not None}


def entry_document(entry: KernelEntry) -> str:
    """The whole entry, source included, as the record's document. Kept out of the metadata:
    Chroma returns every metadata field with every query result and indexes every string in it,
    so a large field there slows each search and doubles the store."""
    return entry.model_dump_json()


def entry_from_document(document: str) -> KernelEntry:
    return KernelEntry.model_validate_json(document)


def guidance_metadata(note: GuidanceNote) -> dict[str, Any]:
    return {
        "title": note.title,
        "backends": ",".join(note.backends),
        "targets": ",".join(note.targets),
        "topics": ",".join(note.topics),
        "note_json": note.model_dump_json(exclude={"text"}),
    }


def note_from_record(text: str, metadata: dict[str, Any]) -> GuidanceNote:
    return GuidanceNote.model_validate({**json.loads(metadata["note_json"]), "text": text})
