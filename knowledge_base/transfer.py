"""Export and import: a knowledge base as JSON lines, one kernel or guidance note per line.

An export is how a team seeds a shared server from a laptop, or how a store
is moved across Chroma versions. Import trusts nothing: every row is parsed
and validated, its code hash recomputed, its problem resolved and, unless the
caller says the file comes from a store they control, its kernel re-verified
in the sandbox. Bad rows are reported with their line numbers and skipped;
nothing is written until every row has been judged, and each record is
written whole, so an interrupted import can simply be run again.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from kgen.core.validation_errors import error_message
from kgen.errors import KgenUsageError
from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.problem.catalog import UnknownProblemError, resolve_problem
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.schema import GuidanceNote, KernelEntry, kernel_id, utc_now
from kgen.knowledge_base.store import KnowledgeBase, where_equal
from kgen.knowledge_base.write_back import settle_best, unmeasured_reason

FORMAT = "kgen-knowledge-base"
FORMAT_VERSION = 1


class ExportReport(BaseModel):
    path: str
    kernels: int
    guidance: int


class BadRow(BaseModel):
    line: int
    reason: str


class ImportReport(BaseModel):
    kernels: int = 0
    guidance: int = 0
    bad_rows: list[BadRow] = Field(default_factory=list)
    verified: int = 0


def export_knowledge_base(kb: KnowledgeBase, path: Path) -> ExportReport:
    """Write every kernel and note; the file appears only once complete (written aside, renamed)."""
    entries, notes = kb.kernels(), kb.guidance()
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"kind": FORMAT, "version": FORMAT_VERSION, "embedding": kb.embedding,
              "created": utc_now(), "kernels": len(entries), "guidance": len(notes)}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(header) + "\n")
            for entry in sorted(entries, key=lambda e: e.id):
                out.write(json.dumps({"kind": "kernel", **entry.model_dump(mode="json")}) + "\n")
            for note in sorted(notes, key=lambda n: n.id):
                out.write(json.dumps({"kind": "guidance", **note.model_dump(mode="json")}) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ExportReport(path=str(path), kernels=len(entries), guidance=len(notes))


def _check_kernel(entry: KernelEntry) -> str | None:
    """Why a kernel row cannot be trusted as written, or None."""

    if normalised_code_hash(entry.source) != entry.code_hash:
        return "code_hash does not match the source (edited after export?)"
    if kernel_id(entry.code_hash, *entry.slot) != entry.id:
        return "id does not match the kernel's code and slot"
    try:
        resolve_problem(entry.problem)
    except UnknownProblemError:
        return f"unknown problem {entry.problem!r} (not in this kgen's catalog)"
    if (why := unmeasured_reason(entry)) is not None:
        return f"not measured: {why}"
    return None


def reverify(entry: KernelEntry, device: Literal["auto", "cpu", "cuda"] = "auto") -> str | None:
    """Run the kernel through the verifier again; the rejection as text, or None if it passed."""

    with tempfile.TemporaryDirectory(prefix="kgen-import-") as tmp:
        candidate = Path(tmp) / f"{entry.problem}_{entry.id}.py"
        candidate.write_text(entry.source)
        try:
            result = evaluate(entry.problem, candidate, EvalOptions(device=device, backend=entry.backend))
        except KgenUsageError as exc:
            return f"cannot be re-verified: {exc}"
    if result.passed:
        return None
    rejection = result.rejection.value if result.rejection else "rejected"
    return f"fails re-verification ({rejection}): {result.reason}"


def _parse_rows(lines: list[str]) -> tuple[list[tuple[int, KernelEntry]], list[GuidanceNote],
                                           list[BadRow]]:
    kernels: list[tuple[int, KernelEntry]] = []
    notes: list[GuidanceNote] = []
    bad: list[BadRow] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append(BadRow(line=number, reason=f"not JSON ({exc.msg} at column {exc.colno})"))
            continue
        if not isinstance(row, dict):
            bad.append(BadRow(line=number, reason="not a JSON object"))
            continue
        kind = row.pop("kind", None)
        try:
            if kind == FORMAT:
                if row.get("version") != FORMAT_VERSION:
                    bad.append(BadRow(line=number, reason=f"unsupported export version {row.get('version')}"))
            elif kind == "kernel":
                entry = KernelEntry.model_validate(row)
                problem = _check_kernel(entry)
                if problem:
                    bad.append(BadRow(line=number, reason=problem))
                else:
                    kernels.append((number, entry))
            elif kind == "guidance":
                notes.append(GuidanceNote.model_validate(row))
            else:
                bad.append(BadRow(line=number, reason=f"unknown row kind {kind!r}"))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "row"
            bad.append(BadRow(line=number, reason=f"invalid {kind} row: {where}: {error_message(first)}"))
    return kernels, notes, bad


def import_knowledge_base(
    kb: KnowledgeBase,
    path: Path,
    *,
    verify: bool = True,
    device: Literal["auto", "cpu", "cuda"] = "auto",
    progress: Callable[[str], None] | None = None,
) -> ImportReport:
    """Judge every row, then write the good ones; see the module docstring."""

    lines = path.expanduser().read_text().splitlines()
    kernels, notes, bad = _parse_rows(lines)
    report = ImportReport(bad_rows=bad)
    accepted: list[KernelEntry] = []
    first_line: dict[str, int] = {}
    for index, (number, entry) in enumerate(kernels, start=1):
        if entry.id in first_line:
            report.bad_rows.append(BadRow(line=number, reason=f"repeats the kernel of line {first_line[entry.id]}"))
            continue
        first_line[entry.id] = number
        if verify:
            if progress is not None:
                progress(f"re-verifying {index}/{len(kernels)}: {entry.problem} ({entry.id})")
            why = reverify(entry, device)
            if why:
                report.bad_rows.append(BadRow(line=number, reason=why))
                continue
            report.verified += 1
        accepted.append(entry)
    report.bad_rows.sort(key=lambda row: row.line)
    with kb.write_lock():
        occupied = {
            entry.slot for entry in accepted
            if any(e.id != entry.id for e in kb.kernels(where_equal(slot="|".join(entry.slot))))
        }
        kb.put_kernels(accepted)
        kb.put_guidance(notes)
        for slot in occupied:
            # merging into a slot that already had kernels: one best again, the fastest
            settle_best(kb, *slot)
    report.kernels, report.guidance = len(accepted), len(notes)
    return report
