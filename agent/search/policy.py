"""The search policy: which candidates each generation asks for.

Generation 0 always re-measures the knowledge base's best kernel for the
problem (the "baseline"), so a run can never report something slower than
what kgen already knew, and every other candidate is compared with it under
the same conditions; the budget never squeezes it out (``split_budget``).

Then, per target and per island of the target's archive (``archive.py``), the
generation's slots go to operators (``operators.py``) in proportion to their
recent success in this run:

* without a model: ``sweep`` (every untried point of the parent's tunable space
  when it fits in the slots, else one knob's whole line at a time: coordinate
  search, which finds a good configuration in a fraction of an exhaustive
  sweep) and ``mutate`` (random one- or two-knob moves from the island's
  elites, so the search does not only walk one ridge);
* with models, also ``generate``, ``improve`` (the island's best with its
  measurements), ``crossover`` (the island's best and another strategy's
  elite) and ``fix`` (the latest unfixed rejection, with the verifier's
  evidence), so a model sees evidence instead of repeating a mistake.

Fitness is measured time on the target's own hardware; correctness is a
gate, never traded. Records and the ranking rule live in ``candidates.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from kgen.agent.candidates import (
    CandidateIdentity,
    CandidateRecord,
    CandidateTask,
    TaskKind,
    apply_result,
    best_for,
    describe,
    rank_key,
)
from kgen.agent.run_options import RunOptions
from kgen.agent.search.archive import SearchArchive
from kgen.agent.search.mutation import find_tunables, mutate, source_key
from kgen.agent.search.operators import MODEL_OPERATORS, allocate, operator_stats, operator_weights
from kgen.agent.search.sweep import sweep_points
from kgen.backends.registry import DEFAULT_BACKEND
from kgen.backends.targets import resolve_target
from kgen.core.text import counted

__all__ = ["CandidateIdentity", "CandidateRecord", "CandidateTask", "apply_result", "best_for",
           "describe", "rank_key", "split_budget", "plan_generation"]

#: an operator's weight before it has any outcome in this run: once kernels are verified, a
#: targeted improvement first, then recombination and repair, then fresh kernels; tuning is
#: cheap (no model call) but rarely beats what a model rewrites, so it starts lower
MODEL_PRIORS = {"improve": 1.0, "crossover": 0.8, "fix": 0.8, "generate": 0.6, "mutate": 0.4, "sweep": 0.4}
OFFLINE_PRIORS = {"sweep": 1.0, "mutate": 0.5}


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


def _island_shares(n: int, islands: int) -> list[int]:
    base, extra = divmod(n, islands)
    return [base + (1 if i < extra else 0) for i in range(islands)]


class _Planner:
    """One generation's tasks for one target; ``tried`` is shared across targets and islands."""

    def __init__(self, generation: int, target: str, records: Sequence[CandidateRecord],
                 sources: dict[str, str], baseline: tuple[str, str] | None, archive: SearchArchive,
                 rng: random.Random, tried: set[str], backend: str = DEFAULT_BACKEND) -> None:

        #: the backend the run's kernels are written in: the one that finds their knobs
        self.backend = backend
        self.generation, self.target, self.records = generation, target, records
        self.sources, self.baseline, self.archive, self.rng, self.tried = sources, baseline, archive, rng, tried
        self.hardware = resolve_target(target)
        self.tasks: list[CandidateTask] = []

    def parent_ids(self, island: int) -> list[str]:
        """The island's verified kernels, best first: its archive's elites (best, a tournament
        pick of another strategy, the rest), then the island's other passed kernels by rank, so
        two good kernels of one strategy can still be crossed."""
        target_archive = self.archive.targets.get(self.target)
        ids = target_archive.parents(island, self.rng) if target_archive else []
        islands = self.archive.island_count()
        others = [r.id for r in best_for(list(self.records), self.target, n=len(self.records))
                  if r.id not in ids and (r.island % islands == island or r.kind == "baseline")]
        return ids + others

    def parents(self, island: int) -> list[tuple[str, str]]:
        """(id, source) of the island's parents for tuning, best first; the known kernel when
        the island has none yet."""
        found = [(i, self.sources[i]) for i in self.parent_ids(island) if i in self.sources]
        if not found and self.baseline is not None:
            found = [(f"kb:{self.baseline[0]}", self.baseline[1])]
        return found

    def add(self, kind: TaskKind, island: int, parent_ids: list[str], description: str,
            source: str | None = None, model: str = "") -> None:
        self.tasks.append(CandidateTask(
            id="", generation=self.generation, target=self.target, kind=kind,
            origin="model" if kind in MODEL_OPERATORS else "mutation", model=model,
            parent_ids=parent_ids, description=description, source=source, island=island,
        ))

    def tune(self, kind: TaskKind, island: int, parents: list[tuple[str, str]], n: int) -> int:
        """Up to ``n`` tuned variants by ``sweep`` or ``mutate``; how many were made."""

        made = 0
        for index, (parent_id, parent_source) in enumerate(parents):
            want = n - made if kind == "sweep" else -(-(n - made) // (len(parents) - index))
            if want <= 0:
                break
            if kind == "sweep":
                variants = sweep_points(parent_source, self.hardware, n=want, exclude=self.tried,
                                        measured=self.measured(), backend=self.backend)
            else:
                variants = mutate(parent_source, self.hardware, n=want, rng=self.rng, exclude=self.tried,
                                  backend=self.backend)
            for variant in variants:
                self.tried.add(variant.key)
                self.add(kind, island, [parent_id], variant.description, source=variant.source)
                made += 1
        return made

    def measured(self) -> dict[str, float]:
        """Source -> time on this target of every verified kernel timed here (the sweep's model)."""
        return {self.sources[r.id]: t for r in self.records
                if r.passed and r.id in self.sources and (t := r.time_on(self.target)) is not None}

    def unfixed_rejection(self) -> CandidateRecord | None:
        fixed = {p for r in self.records if r.kind == "fix" for p in r.parent_ids}
        fixed |= {p for t in self.tasks if t.kind == "fix" for p in t.parent_ids}
        rejected = [r for r in self.records if r.target == self.target and r.verdict == "rejected"
                    and r.origin == "model" and r.id not in fixed]
        return rejected[-1] if rejected else None


def plan_generation(
    generation: int,
    size: int,
    targets: list[str],
    records: Sequence[CandidateRecord],
    sources: dict[str, str],
    baselines: dict[str, tuple[str, str]],
    archive: SearchArchive,
    rng: random.Random,
    models: Callable[[int], list[str]] | None = None,
    backend: str = DEFAULT_BACKEND,
    library: dict[str, list[tuple[str, str, str]]] | None = None,
) -> list[CandidateTask]:
    """The tasks of one generation. ``sources`` maps candidate id -> source; ``baselines``
    maps target -> (kb id, source) of the knowledge base's best kernel; ``models(n)`` gives
    the ensemble's labels for n model calls (None: offline); ``backend``: the run's, whose
    knob finder tunes the parents; ``library``: target -> (kb id, source, description) of
    other problems' kernels that may serve this one (the first is the target's baseline),
    all verified in generation 0 beside it."""

    tasks: list[CandidateTask] = []
    tried = {source_key(s) for s in sources.values()}
    stats = operator_stats(records)
    remeasured, counts = _shares(generation, size, targets, baselines)
    library = library or {}
    extra = {t: library.get(t, [])[1:] for t in remeasured}
    counts = per_target(max(sum(counts.values()) - sum(map(len, extra.values())), 0), targets)
    islands = archive.island_count()
    for target in targets:
        if target in remeasured:
            known = library.get(target)
            tasks.append(_baseline_task(target, baselines[target], known[0][2] if known else None))
            tried.add(source_key(baselines[target][1]))
            for kb_id, source, description in extra[target]:
                if source_key(source) not in tried:
                    tasks.append(_baseline_task(target, (kb_id, source), description))
                    tried.add(source_key(source))
        planner = _Planner(generation, target, records, sources, baselines.get(target), archive, rng, tried,
                           backend)
        for island, n in enumerate(_island_shares(counts[target], islands)):
            if n > 0:
                _plan_island(planner, island, n, stats, models is not None)
        tasks.extend(planner.tasks)
    numbered = _numbered(tasks, generation)
    if models is not None:
        labels = iter(models(sum(1 for t in numbered if t.kind in MODEL_OPERATORS)))
        numbered = [t.model_copy(update={"model": model, "description": f"{t.kind} by {model}"})
                    if t.kind in MODEL_OPERATORS and (model := next(labels, "")) else t for t in numbered]
    return numbered


def _plan_island(planner: _Planner, island: int, n: int, stats, with_models: bool) -> None:
    """``n`` tasks for one island: operators by recent success, tuning filling any gap."""

    parents = planner.parents(island)
    elites = planner.parent_ids(island)
    # a crossover's second parent may come from another island: the island's best meets
    # another population's idea (islands exist to grow different ones)
    partners = elites + [i for other in range(planner.archive.island_count()) if other != island
                         for i in planner.parent_ids(other)[:1] if i not in elites]
    tunable = bool(parents) and bool(find_tunables(parents[0][1], planner.hardware, planner.backend))
    available = [k for k, ok in (("sweep", tunable), ("mutate", tunable)) if ok]
    if with_models:
        unfixed = planner.unfixed_rejection()
        available += [k for k, ok in (("generate", True), ("improve", bool(elites)),
                                      ("crossover", bool(elites) and len(partners) >= 2),
                                      ("fix", unfixed is not None)) if ok]
        if not elites:  # nothing verified on this island yet: new kernels, and repairs
            available = [k for k in available if k in ("generate", "fix")]
    priors = MODEL_PRIORS if with_models else OFFLINE_PRIORS
    slots = allocate(operator_weights(stats, available, priors), n, planner.rng)
    made = 0
    for kind in dict.fromkeys(slots):
        count = slots.count(kind)
        if kind in ("sweep", "mutate"):
            made += planner.tune(kind, island, parents, count)
            continue
        for index in range(count):
            if kind == "generate":
                planner.add("generate", island, [], "generate")
            elif kind == "improve":
                planner.add("improve", island, [elites[index % len(elites)]], "improve")
            elif kind == "crossover":
                planner.add("crossover", island, [partners[0], partners[1 + index % (len(partners) - 1)]], "crossover")
            elif kind == "fix" and (bad := planner.unfixed_rejection()) is not None:
                planner.add("fix", island, [bad.id], "fix")
            else:
                planner.add("generate", island, [], "generate")
            made += 1
    if made < n and tunable:  # a sweep line ran out: fill with moves from the other elites
        made += planner.tune("mutate", island, parents, n - made)
    if made < n and with_models:
        for _ in range(n - made):
            planner.add("generate", island, [], "generate")


def _baseline_task(target: str, baseline: tuple[str, str], description: str | None = None) -> CandidateTask:
    """Re-measure the knowledge base's kernel under this run's conditions (or verify another
    problem's kernel, described by ``description``, for this one)."""
    kb_id, source = baseline
    return CandidateTask(
        id="", generation=0, target=target, kind="baseline", origin="knowledge_base",
        description=description or f"the knowledge base's kernel {kb_id}", source=source, kb_id=kb_id,
    )


def _numbered(tasks: list[CandidateTask], generation: int) -> list[CandidateTask]:
    return [t.model_copy(update={"id": candidate_id(generation, i)}) for i, t in enumerate(tasks)]


def stop_reason(archive: SearchArchive, options: RunOptions, *, generation: int, planned_generations: int,
                evaluated: int, out_of_time: bool, cost_usd: float, cpu_offline: bool) -> str:
    """Why the search stops after ``generation`` ("" to go on): every target plateaued or at
    the asked share of speed-of-light, the generations planned are done, or the run's time or
    cost limit is reached."""
    bests = [a.best() for a in archive.targets.values()]
    if options.target_pct_of_sol is not None and bests and all(
            b is not None and b.pct_of_sol is not None and b.pct_of_sol >= options.target_pct_of_sol for b in bests):
        return f"{options.target_pct_of_sol:g}% of speed-of-light reached"
    if options.plateau_generations > 0 and archive.targets and all(
            a.plateau >= options.plateau_generations for a in archive.targets.values()):
        return f"no faster kernel in {counted(options.plateau_generations, 'generation')} (plateau)"
    if generation + 1 >= planned_generations:
        if cpu_offline and evaluated < options.budget:
            return (f"no GPU: tuned variants cannot be ranked without timings, so {counted(evaluated, 'candidate')} "
                    f"(known kernels and tuned variants of them) were verified instead of the budget's {options.budget}")
        return "budget spent" if evaluated >= options.budget else "all generations run"
    if out_of_time:
        return f"time limit ({options.time_s:.0f} s) reached"
    if options.max_cost_usd is not None and cost_usd >= options.max_cost_usd:
        return f"cost limit (${options.max_cost_usd:.2f}) reached"
    return ""
