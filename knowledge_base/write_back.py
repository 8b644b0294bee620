"""Writing verified kernels back: only what passed, once per code, the best per slot.

The policy per slot (problem, backend, target, dtype):

* a kernel that did not pass full verification is refused (``NotVerifiedError``);
* a kernel without a GPU timing on its slot's target is not written (``not_measured``, with
  :func:`unmeasured_reason`'s words): a CPU-verified kernel, or one timed on another GPU, would
  otherwise become an empty slot's "best" that later runs, suites and prompts take as measured;
* the same code (normalised hash) is stored once: a second sighting only
  improves the record's timing if it measured faster (its evidence bundle with it), or gives
  a record without an evidence bundle its own;
* the fastest measured kernel is the slot's ``best``; a previous best becomes
  a ``stepping_stone`` (it was best of its generation once);
* a kernel that is not the best is kept as a stepping stone only when the run
  says it was the best of its generation; otherwise it is not stored;

``prune`` trims each slot to its best plus the most recent stepping stones, repairs slots
that two writers on a shared server both claimed, and removes kernels a store kept without
a timing on their target (written before this rule).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kgen.errors import KgenError
from kgen.evals.bundle import EvidenceBundle
from kgen.evals.problem.format import ProblemInfo
from kgen.evals.result import EvalResult
from kgen.evals.suites.suite import row_from_result
from kgen.evals.verdict import StageStatus
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.schema import (
    KernelEntry,
    Provenance,
    Timing,
    VerificationSummary,
    faster_on,
    kernel_id,
    target_family,
)
from kgen.knowledge_base.store import KnowledgeBase, where_equal

#: stepping stones kept per slot by ``prune`` unless told otherwise
DEFAULT_STEPPING_STONES = 5


class NotVerifiedError(KgenError, ValueError):
    """Only fully verified kernels enter the knowledge base."""


class WriteOutcome(BaseModel):
    id: str
    action: Literal["added_best", "added_stepping_stone", "improved_timing", "duplicate", "skipped",
                    "not_measured"]
    reason: str = ""


def unmeasured_reason(entry: KernelEntry) -> str | None:
    """Why ``entry`` may not be stored, or None when its timing was measured on its target's GPU.

    The one rule every write into the store asks (a run's write-back, seeding, an import, prune):
    the knowledge base keeps only kernels whose evidence says where and how they were measured.
    Verification on a CPU proves a kernel correct, never fast; a time from another GPU ranks
    nothing on this one (``Timing.time_on``)."""
    timing = entry.timing
    if timing.time_on(entry.target) is not None:
        return None
    rule = f"the knowledge base keeps a kernel only with a timing on its target's GPU ({entry.target})"
    if timing.time_ms is None:
        return f"verified on {entry.evidence.device}, never timed on a GPU: {rule}"
    return f"timed on {timing.device_name or 'an unnamed device'}, not on {entry.target}: {rule}"


def summarise_verification(result: EvalResult) -> VerificationSummary:
    """The evidence a reader needs: seeds, shapes, distributions and the checks that passed."""
    if not result.passed:
        why = result.rejection.value if result.rejection is not None else "not passed"
        raise NotVerifiedError(f"kernel was rejected ({why}): {result.reason}")
    failed = [s.name for s in result.stages if s.status is StageStatus.FAILED]
    if failed or not result.trials:
        raise NotVerifiedError(
            "kernel lacks full verification evidence "
            f"({'failed stages: ' + ', '.join(failed) if failed else 'no trials ran'})"
        )
    shapes: list[dict[str, int]] = []
    for trial in result.trials:
        if trial.sizes not in shapes:
            shapes.append(dict(trial.sizes))
    errors = [o.rel_l2_error for t in result.trials for o in t.outputs]
    train = result.train_check or {}
    return VerificationSummary(
        device=result.device,
        seeds=sorted({t.seed for t in result.trials}),
        shapes=shapes,
        distributions=sorted({t.distribution for t in result.trials}),
        checks_passed=[s.name for s in result.stages if s.status is StageStatus.PASSED],
        trials=len(result.trials),
        max_rel_l2_error=max(errors) if errors else None,
        train_check="passed" if train.get("passed") else "not_run",
        compiled_for=list(result.targets),
        kgen_version=result.kgen_version,
    )


def timing_from_result(result: EvalResult) -> Timing:
    """The timing stage's figures (GPU only); an empty Timing when none were measured."""
    if result.bench is None:
        return Timing()

    # the row's figures come from the result alone: a problem file moved since is no reason
    # to lose them
    row = row_from_result(result, ProblemInfo(name=result.problem, path=Path(result.problem_path)),
                          result.candidate)
    return Timing(
        device_name=row.device_name,
        time_ms=row.candidate_ms,
        eager_ms=row.eager_ms,
        compile_ms=row.compile_ms,
        speedup_vs_eager=row.speedup_vs_eager,
        speedup_vs_compile=row.speedup_vs_compile,
        same_speed_as=[name for name in row.same_speed_as if name in ("eager", "torch.compile")],
        pct_of_sol=row.pct_of_sol,
        achieved_tbs=row.achieved_tbs,
        achieved_tflops=row.achieved_tflops,
    )


def entry_from_result(
    result: EvalResult,
    source: str,
    *,
    spec_text: str,
    target: str,
    dtype: str,
    provenance: Provenance,
    operation: str = "",
    shapes: dict[str, int] | None = None,
    bundle: EvidenceBundle | None = None,
) -> KernelEntry:
    """A knowledge-base entry for a kernel that passed, with its evidence bundle where there is
    one; raises NotVerifiedError otherwise."""
    evidence = summarise_verification(result)
    code_hash = normalised_code_hash(source)
    return KernelEntry(
        id=kernel_id(code_hash, result.problem, result.backend, target, dtype),
        source=source,
        spec_text=spec_text,
        problem=result.problem,
        operation=operation or result.problem.replace("_", " "),
        backend=result.backend,
        target=target,
        target_family=target_family(target),
        dtype=dtype,
        shapes=dict(shapes or {}),
        evidence=evidence,
        timing=timing_from_result(result),
        provenance=provenance,
        code_hash=code_hash,
        bundle=bundle,
    )


def record_kernel(kb: KnowledgeBase, entry: KernelEntry, *, generation_best: bool = True,
                  starting_point: bool = False) -> WriteOutcome:
    """Apply the write-back policy for one verified kernel (see the module docstring).

    ``starting_point``: the kernel is placed on purpose as the only kernel of its slot in a
    knowledge base made for one search (a de-tuned seed that a search must start from, a test's
    fixture), so it is stored untimed where its slot is empty; a run's write-back never passes it,
    and ``prune`` removes such a kernel as any other unmeasured one."""
    if entry.evidence.verdict != "passed":
        raise NotVerifiedError(f"{entry.id}: only verified kernels are stored")
    with kb.write_lock():
        problem, backend, target, dtype = entry.slot
        slot = kb.kernels(where_equal(slot="|".join(entry.slot)))
        same = next((e for e in slot if e.code_hash == entry.code_hash), None)
        if same is not None:
            if faster_on(entry.timing, same.timing, target):
                # the bundle goes with the timing it measured (where the new sighting has one)
                kb.put_kernels([same.model_copy(update={"timing": entry.timing, "bundle": entry.bundle or same.bundle})])
                settle_best(kb, problem, backend, target, dtype)
                return WriteOutcome(id=same.id, action="improved_timing")
            if same.bundle is None and entry.bundle is not None:
                kb.put_kernels([same.model_copy(update={"bundle": entry.bundle})])
                return WriteOutcome(id=same.id, action="duplicate",
                                    reason="same code already stored; its evidence bundle added")
            return WriteOutcome(id=same.id, action="duplicate", reason="same code already stored")
        if (why := unmeasured_reason(entry)) is not None and not (starting_point and not slot):
            return WriteOutcome(id=entry.id, action="not_measured", reason=why)
        best = next((e for e in slot if e.role == "best"), None)
        if best is None or faster_on(entry.timing, best.timing, target):
            demoted = [] if best is None else [best.model_copy(update={"role": "stepping_stone"})]
            kb.put_kernels([*demoted, entry.model_copy(update={"role": "best"})])
            return WriteOutcome(id=entry.id, action="added_best")
        if generation_best:
            kb.put_kernels([entry.model_copy(update={"role": "stepping_stone"})])
            return WriteOutcome(id=entry.id, action="added_stepping_stone")
        return WriteOutcome(
            id=entry.id, action="skipped",
            reason="not faster than the slot's best and not the best of its generation",
        )


def settle_best(kb: KnowledgeBase, problem: str, backend: str, target: str, dtype: str) -> None:
    """Make exactly one kernel of the slot its best: the fastest measured on the slot's target,
    else the current one (a time from another GPU ranks nothing here: ``Timing.time_on``)."""
    slot = kb.kernels(where_equal(slot="|".join((problem, backend, target, dtype))))
    if not slot:
        return
    ranked = sorted(
        slot,
        key=lambda e: (
            e.timing.time_on(target) is None,
            e.timing.time_on(target) or 0.0,
            e.role != "best",
            e.provenance.created,
        ),
    )
    changed = [
        e.model_copy(update={"role": "best" if i == 0 else "stepping_stone"})
        for i, e in enumerate(ranked)
        if e.role != ("best" if i == 0 else "stepping_stone")
    ]
    if changed:
        kb.put_kernels(changed)


class PruneReport(BaseModel):
    slots: int
    removed: list[str]
    kept: int
    #: of ``removed``, the kernels without a timing on their target (``unmeasured_reason``)
    unmeasured: list[str] = []


def prune(kb: KnowledgeBase, *, keep_stepping_stones: int = DEFAULT_STEPPING_STONES,
          dry_run: bool = False) -> PruneReport:
    """Keep each slot's best plus its newest stepping stones; one best per slot; nothing that
    was never measured on its target (``unmeasured_reason``)."""
    with kb.write_lock():
        slots: dict[tuple[str, str, str, str], list[KernelEntry]] = defaultdict(list)
        unmeasured: list[str] = []
        for entry in kb.kernels():
            if unmeasured_reason(entry) is None:
                slots[entry.slot].append(entry)
            else:
                unmeasured.append(entry.id)
        if unmeasured and not dry_run:
            kb.delete_kernels(unmeasured)
        removed: list[str] = []
        for key, entries in slots.items():
            if not dry_run:
                settle_best(kb, *key)
                entries = kb.kernels(where_equal(slot="|".join(key)))
            stones = sorted(
                (e for e in entries if e.role != "best"),
                key=lambda e: e.provenance.created, reverse=True,
            )
            removed += [e.id for e in stones[keep_stepping_stones:]]
        if removed and not dry_run:
            kb.delete_kernels(removed)
        total = sum(len(v) for v in slots.values())
        return PruneReport(slots=len(slots), removed=[*unmeasured, *removed], kept=total - len(removed),
                           unmeasured=unmeasured)
