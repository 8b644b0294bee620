"""The search policy: which candidates each generation asks for, and which one wins.

Generation 0 always re-measures the knowledge base's best kernel for the
problem (the "baseline"), so a run can never report something slower than
what kgen already knew, and every other candidate is compared with it under
the same conditions; the budget never squeezes it out (``split_budget``). Then,
per target:

* offline (no model): variants of the best kernels so far, made by tuning their
  launch and tiling parameters (``mutation.py``); the two best passed kernels are
  both parents, so one lucky variant does not collapse the search;
* with models: the first generation asks for new kernels, spread over the
  models by weight; later ones improve the best kernel, cross the two best,
  and fix the most promising rejection, so a model sees the verifier's
  evidence instead of repeating a mistake.

Fitness is measured time on the target's own hardware; correctness is a
gate, never traded. A kernel verified here but not timed on its target (no
GPU, or another GPU) can be correct but cannot be called faster.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, Field

from kgen.knowledge_base.schema import Timing

Origin = Literal["knowledge_base", "mutation", "model"]
TaskKind = Literal["baseline", "mutate", "generate", "improve", "fix", "crossover"]


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
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"

    def time_on(self, target: str) -> float | None:
        """Measured time counts for a target only when measured on that target's hardware."""
        return self.time_ms if self.timed_target == target else None


def rank_key(record: CandidateRecord, target: str) -> tuple:
    """Passed first, then timed on the target and fastest, then earliest (the baseline first)."""
    time = record.time_on(target)
    return (not record.passed, time is None, time if time is not None else 0.0,
            record.generation, record.id)


def best_for(records: list[CandidateRecord], target: str, n: int = 1) -> list[CandidateRecord]:
    """The n best passed candidates for a target."""
    passed = [r for r in records if r.target == target and r.passed]
    return sorted(passed, key=lambda r: rank_key(r, target))[:n]


def split_budget(budget: int, generations: int, remeasures: int = 0) -> list[int]:
    """Candidates per generation: as even as possible, earlier generations taking the remainder.

    Generation 0 holds at least ``remeasures`` slots, one per target whose known kernel it
    re-measures. That re-measure is what lets a run never lose (or report something slower
    than) what kgen already knew, so the budget never squeezes it out: with ``--budget 1`` or
    one slot per generation it is generation 0's only candidate, and a budget smaller than the
    number of re-measures is raised to it (they cost no model call).
    """
    sizes = _even_split(budget, generations)
    if remeasures <= 0 or (sizes and sizes[0] >= remeasures):
        return sizes
    return [remeasures] + _even_split(max(budget - remeasures, 0), generations - 1)


def _even_split(budget: int, generations: int) -> list[int]:
    if generations <= 0:
        return []
    base, extra = divmod(budget, generations)
    return [base + (1 if g < extra else 0) for g in range(generations) if base or g < extra]


def per_target(n: int, targets: list[str]) -> dict[str, int]:
    """Spread n candidates over targets, the first targets getting the remainder."""
    base, extra = divmod(n, len(targets))
    return {t: base + (1 if i < extra else 0) for i, t in enumerate(targets)}


def candidate_id(generation: int, index: int) -> str:
    return f"g{generation}-c{index:02d}"


def remeasured_targets(generation: int, size: int, targets: list[str],
                       baselines: dict[str, tuple[str, str]]) -> list[str]:
    """The targets whose known kernel this generation re-measures: in generation 0 every
    target that has one, first, before any other candidate takes a slot (as many as ``size``
    allows; :func:`split_budget` makes room for all)."""
    if generation != 0:
        return []
    return [t for t in targets if t in baselines][:max(size, 0)]


def _shares(generation: int, size: int, targets: list[str],
            baselines: dict[str, tuple[str, str]]) -> tuple[list[str], dict[str, int]]:
    """(targets re-measured, other slots per target): re-measures come off the top, the rest
    is spread over the targets."""
    remeasured = remeasured_targets(generation, size, targets, baselines)
    return remeasured, per_target(max(size - len(remeasured), 0), targets)


def plan_offline(
    generation: int,
    size: int,
    targets: list[str],
    records: list[CandidateRecord],
    sources: dict[str, str],
    baselines: dict[str, tuple[str, str]],
    rng: random.Random,
) -> list[CandidateTask]:
    """Mutation tasks for one generation. ``sources`` maps candidate id -> source;
    ``baselines`` maps target -> (kb id, source) of the knowledge base's best kernel."""
    from kgen.agent.mutation import mutate, source_key
    from kgen.backends.targets import resolve_target

    tasks: list[CandidateTask] = []
    tried = {source_key(s) for s in sources.values()}
    remeasured, counts = _shares(generation, size, targets, baselines)
    for target in targets:
        n = counts[target]
        if target in remeasured:
            tasks.append(_baseline_task(target, baselines[target]))
            tried.add(source_key(baselines[target][1]))
        parents = [(r.id, sources[r.id]) for r in best_for(records, target, n=2) if r.id in sources]
        if not parents and target in baselines:
            parents = [(f"kb:{baselines[target][0]}", baselines[target][1])]
        if not parents or n <= 0:
            continue
        spec_target = resolve_target(target)
        for index in range(n):
            parent_id, parent_source = parents[index % len(parents)]
            variants = mutate(parent_source, spec_target, n=1, rng=rng, exclude=tried)
            if not variants:
                continue
            variant = variants[0]
            tried.add(variant.key)
            tasks.append(CandidateTask(
                id="", generation=generation, target=target, kind="mutate", origin="mutation",
                parent_ids=[parent_id], description=variant.description, source=variant.source,
            ))
    return _numbered(tasks, generation)


def plan_with_models(
    generation: int,
    size: int,
    targets: list[str],
    records: list[CandidateRecord],
    baselines: dict[str, tuple[str, str]],
    models: list[str],
) -> list[CandidateTask]:
    """Model tasks for one generation; ``models`` is the ensemble's allocation for it, in order."""
    tasks: list[CandidateTask] = []
    remeasured, counts = _shares(generation, size, targets, baselines)
    model_iter = iter(models)
    for target in targets:
        n = counts[target]
        if target in remeasured:
            tasks.append(_baseline_task(target, baselines[target]))
        best = best_for(records, target, n=2)
        rejected = [r for r in records if r.target == target and r.verdict == "rejected"
                    and r.origin == "model"]
        kinds: list[tuple[TaskKind, list[str]]] = []
        if generation == 0 or not best:
            kinds = [("generate", [])] * n
        else:
            if len(best) >= 2:
                kinds.append(("crossover", [best[0].id, best[1].id]))
            if rejected:
                kinds.append(("fix", [rejected[-1].id]))
            while len(kinds) < n:
                kinds.append(("improve", [best[len(kinds) % len(best)].id]))
            kinds = kinds[:n]
        for kind, parents in kinds:
            model = next(model_iter, models[0] if models else "")
            tasks.append(CandidateTask(
                id="", generation=generation, target=target, kind=kind, origin="model", model=model,
                parent_ids=parents, description=f"{kind} by {model}",
            ))
    return _numbered(tasks, generation)


def _baseline_task(target: str, baseline: tuple[str, str]) -> CandidateTask:
    """Re-measure the knowledge base's kernel under this run's conditions."""
    kb_id, source = baseline
    return CandidateTask(
        id="", generation=0, target=target, kind="baseline", origin="knowledge_base",
        description=f"the knowledge base's kernel {kb_id}", source=source, kb_id=kb_id,
    )


def _numbered(tasks: list[CandidateTask], generation: int) -> list[CandidateTask]:
    return [t.model_copy(update={"id": candidate_id(generation, i)}) for i, t in enumerate(tasks)]
