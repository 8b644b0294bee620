"""Seeding a knowledge base with the shipped kernel library and guidance notes.

Seeds are ordinary entries: each carries the evidence of its GPU verification
and its measured timing from ``seed_kernels/<backend>/evidence.json``, and the evidence
bundle of that verification from ``seed_kernels/<backend>/bundles/<problem>.json`` (both
written by ``scripts/seed_evidence.py`` from the recorded GPU run), tied to the seed's code
hash. A seed without matching evidence or bundle is refused rather than stored unverified.
Seeding goes through the write-back policy, so running it twice changes nothing (and a store
seeded before seeds shipped their bundles gets them from `kgen kb init`).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from kgen.evals.bundle import BundleError, EvidenceBundle, read_bundle
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import input_dtype
from kgen.knowledge_base import SEED_KERNELS_DIR
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.errors import KnowledgeBaseError
from kgen.knowledge_base.guidance import shipped_notes
from kgen.knowledge_base.schema import (
    KernelEntry,
    Provenance,
    Timing,
    VerificationSummary,
    kernel_id,
    target_family,
)
from kgen.knowledge_base.store import KnowledgeBase
from kgen.knowledge_base.write_back import record_kernel

EVIDENCE_FILE = "evidence.json"
#: beside the evidence: each seed's evidence bundle, ``bundles/<problem>.json``
BUNDLES_DIR = "bundles"


class SeedError(KnowledgeBaseError):
    """A shipped seed whose evidence is missing or belongs to other code."""


class SeedReport(BaseModel):
    added: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    guidance: int = 0


def _spec_text(problem: str) -> str:
    info = resolve_problem(problem)
    return "; ".join([info.name.replace("_", " "), info.description, *info.aliases])


def _seed_bundle(backend_dir: Path, problem: str, code_hash: str) -> EvidenceBundle:
    """The seed's evidence bundle, intact and for its current code; a SeedError otherwise."""
    where = f"{backend_dir.name}/{BUNDLES_DIR}/{problem}.json"
    path = backend_dir / BUNDLES_DIR / f"{problem}.json"
    if not path.is_file():
        raise SeedError(f"seed {backend_dir.name}/{problem}.py has no evidence bundle ({where}): "
                        "re-run scripts/seed_evidence.py")
    try:
        bundle = read_bundle(path)
    except BundleError as exc:
        raise SeedError(f"seed bundle {where}: {exc.message}") from exc
    if normalised_code_hash(bundle.kernel_source) != code_hash or bundle.problem != problem:
        raise SeedError(f"seed bundle {where} is the evidence of other code: re-run scripts/seed_evidence.py")
    return bundle


def seed_entries(directory: Path = SEED_KERNELS_DIR) -> list[KernelEntry]:
    """Every shipped seed kernel as an entry with its recorded evidence and timing."""

    entries: list[KernelEntry] = []
    for backend_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
        evidence_path = backend_dir / EVIDENCE_FILE
        if not evidence_path.is_file():
            raise SeedError(f"seed kernels in {backend_dir.name}/ have no {EVIDENCE_FILE}")
        recorded = json.loads(evidence_path.read_text())
        for path in sorted(backend_dir.glob("*.py")):
            problem = path.stem
            record = recorded.get(problem)
            source = path.read_text()
            code_hash = normalised_code_hash(source)
            if record is None or record["code_hash"] != code_hash:
                raise SeedError(
                    f"seed {backend_dir.name}/{path.name} changed since it was verified on a GPU: "
                    "re-run scripts/gpu_verify.sh and scripts/seed_evidence.py"
                )
            target, dtype = record["target"], input_dtype(resolve_problem(problem))
            entries.append(
                KernelEntry(
                    id=kernel_id(code_hash, problem, backend_dir.name, target, dtype),
                    source=source,
                    spec_text=_spec_text(problem),
                    problem=problem,
                    operation=problem.replace("_", " "),
                    backend=backend_dir.name,
                    target=target,
                    target_family=target_family(target),
                    dtype=dtype,
                    evidence=VerificationSummary.model_validate(record["evidence"]),
                    timing=Timing.model_validate(record["timing"]),
                    provenance=Provenance(model="seed", run_id=record["measured_by"]),
                    code_hash=code_hash,
                    bundle=_seed_bundle(backend_dir, problem, code_hash),
                )
            )
    return entries


def seed_knowledge_base(kb: KnowledgeBase) -> SeedReport:
    """Load the shipped kernels and guidance; idempotent."""
    report = SeedReport()
    for entry in seed_entries():
        outcome = record_kernel(kb, entry, generation_best=True)
        (report.unchanged if outcome.action == "duplicate" else report.added).append(entry.problem)
    notes = shipped_notes()
    kb.put_guidance(notes)
    report.guidance = len(notes)
    return report


def open_knowledge_base(location: str | None = None, *, embedding: str | None = None) -> KnowledgeBase:
    """Open a store, seeding it on first use (an empty store gets the shipped library)."""
    kb = KnowledgeBase.open(location, embedding=embedding)
    if kb.kernel_count() == 0 and not kb.guidance():
        seed_knowledge_base(kb)
    return kb
