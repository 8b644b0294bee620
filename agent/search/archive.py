"""The search's memory: per target, islands of MAP-Elites grids of verified kernels.

One archive per (problem, backend, target). Each island keeps, for every cell of
a grid over strategy features (number of kernels, tensor cores, persistent
programs, TMA, block class; the backend reads them: ``Backend.strategy_features``),
the fastest verified kernel of that strategy on the target (its elite). Islands
evolve apart, so one early leader does not pull every lineage into the same
corner, and every ``MIGRATION_INTERVAL`` generations each island's best moves to
the next island (a ring): good ideas spread, slowly. The global best is always
kept (elitism) and every island's parents start from its own best.

Fitness is time measured on the target itself (``Timing.time_on``: an H100
time never ranks a kernel for MI300X); correctness is the gate: only passed
candidates enter, and for another target only one that also compiled for it.
A kernel compiled but not timed on a target (no such GPU here) is kept as
"compiled, not timed" and ranks after every timed one; among untimed kernels of a
strategy the latest generation is the elite, so a search without timings still
walks forward along its lineages.

The archive is a model in the graph's checkpointed state (``state.py``), so ``kgen resume``
continues it exactly; the run directory's ``search.json`` mirrors it for the report.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, Field

from kgen.agent.candidates import CandidateRecord
from kgen.agent.search.operators import IMPROVEMENT_MARGIN

#: the strategy features that make a cell; tunables (warps, stages) are left out on purpose,
#: so a retuned kernel competes with its parent instead of taking a new cell
CELL_FEATURES = ("kernels", "tensor_cores", "persistent", "tma", "block")
MIGRATION_INTERVAL = 2


class Elite(BaseModel):
    candidate: str
    #: time on the archive's target; None = compiled (and verified), not timed there
    time_ms: float | None = None
    speedup_vs_compile: float | None = None
    pct_of_sol: float | None = None
    generation: int = 0

    def beats(self, other: Elite) -> bool:
        """Timed beats untimed; between timed, faster; between untimed (no such GPU here), the
        later generation: it was made from the earlier ones, so the search walks on from it
        instead of rewriting the same root again (which kernel *wins* is decided by
        ``candidates.best_for``, never by this)."""
        if self.time_ms is None:
            return other.time_ms is None and self.generation > other.generation
        return other.time_ms is None or self.time_ms < other.time_ms


class Island(BaseModel):
    index: int
    #: cell key -> the cell's elite
    cells: dict[str, Elite] = Field(default_factory=dict)

    def best(self) -> Elite | None:
        best = None
        for elite in self.cells.values():
            if best is None or elite.beats(best):
                best = elite
        return best

    def ranked(self) -> list[Elite]:
        return sorted(self.cells.values(), key=lambda e: (e.time_ms is None, e.time_ms or 0.0, e.generation))


class Migration(BaseModel):
    generation: int
    candidate: str
    from_island: int
    to_island: int


class ProgressPoint(BaseModel):
    """The target's best after ``evaluated`` candidates: what the report plots."""

    evaluated: int
    candidate: str
    time_ms: float | None = None
    speedup_vs_compile: float | None = None


class TargetArchive(BaseModel):
    target: str
    islands: list[Island]
    migrations: list[Migration] = Field(default_factory=list)
    progress: list[ProgressPoint] = Field(default_factory=list)
    #: candidates considered (entered or not), so a resumed select never counts one twice
    seen: list[str] = Field(default_factory=list)
    #: generations in a row without a faster kernel on this target
    plateau: int = 0

    @classmethod
    def empty(cls, target: str, islands: int) -> TargetArchive:
        return cls(target=target, islands=[Island(index=i) for i in range(max(islands, 1))])

    def best(self) -> Elite | None:
        best = None
        for island in self.islands:
            elite = island.best()
            if elite is not None and (best is None or elite.beats(best)):
                best = elite
        return best

    def cell_count(self) -> int:
        return len({key for island in self.islands for key in island.cells})

    def offer(self, island: int, cell: str, elite: Elite) -> bool:
        """Put ``elite`` in the island's cell if the cell is empty or it is faster there."""
        home = self.islands[island % len(self.islands)]
        current = home.cells.get(cell)
        if current is not None and (current.candidate == elite.candidate or not elite.beats(current)):
            return False
        home.cells[cell] = elite
        return True

    def cell_of(self, candidate: str) -> str | None:
        for island in self.islands:
            for key, elite in island.cells.items():
                if elite.candidate == candidate:
                    return key
        return None

    def migrate(self, generation: int) -> list[Migration]:
        """Every island's best into the next island, every ``MIGRATION_INTERVAL`` generations."""
        if len(self.islands) < 2 or generation == 0 or generation % MIGRATION_INTERVAL:
            return []
        moves = []
        # every island's best as it was before any move: a migrant is not passed on twice
        bests = [(island.index, key, elite) for island in self.islands if (elite := island.best()) is not None
                 for key, held in island.cells.items() if held is elite]
        for index, cell, elite in bests:
            to = (index + 1) % len(self.islands)
            if self.offer(to, cell, elite):
                moves.append(Migration(generation=generation, candidate=elite.candidate,
                                       from_island=index, to_island=to))
        self.migrations.extend(moves)
        return moves

    def parents(self, island: int, rng: random.Random) -> list[str]:
        """The island's parents, best first: its best (elitism), then another cell's elite
        chosen by a size-2 tournament (diversity), then the rest by time."""
        ranked = self.islands[island % len(self.islands)].ranked()
        if len(ranked) <= 2:
            return [e.candidate for e in ranked]
        a, b = rng.sample(ranked[1:], 2)
        second = a if a.beats(b) or (not b.beats(a) and a.generation <= b.generation) else b
        rest = [e for e in ranked[1:] if e.candidate != second.candidate]
        return [ranked[0].candidate, second.candidate, *[e.candidate for e in rest]]


def cell_key(features: dict[str, str]) -> str:
    return "|".join(f"{name}={features.get(name, '?')}" for name in CELL_FEATURES)


def elite_of(record: CandidateRecord, target: str) -> Elite:
    return Elite(candidate=record.id, time_ms=record.time_on(target),
                 speedup_vs_compile=record.speedup_vs_compile if record.time_on(target) is not None else None,
                 pct_of_sol=record.pct_of_sol if record.time_on(target) is not None else None,
                 generation=record.generation)


class SearchArchive(BaseModel):
    """Every target's archive (a candidate's island is on its record: ``CandidateRecord.island``)."""

    targets: dict[str, TargetArchive] = Field(default_factory=dict)
    #: candidate id -> its cell key (strategy features), for the report
    cells_of: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def new(cls, targets: Sequence[str], islands: int) -> SearchArchive:
        return cls(targets={t: TargetArchive.empty(t, islands) for t in targets})

    def island_count(self) -> int:
        return max((len(a.islands) for a in self.targets.values()), default=1)

    def update(self, records: Sequence[CandidateRecord], features_of, generation: int) -> list[str]:
        """Take in newly evaluated candidates, count plateaus, migrate; lines for the log.

        ``features_of(record)`` gives a candidate's strategy features (the backend reads its
        source). A candidate enters a target's archive when it passed and was made for that
        target or compiled for it too.
        """
        lines = []
        ordered = sorted((r for r in records if r.status != "pending"), key=lambda r: (r.generation, r.id))
        for target, archive in self.targets.items():
            before = archive.best()
            seen = set(archive.seen)
            evaluated = len(seen)
            for record in ordered:
                if record.id in seen:
                    continue
                seen.add(record.id)
                archive.seen.append(record.id)
                evaluated += 1
                if not record.passed or not (record.target == target or record.compiles_for.get(target)):
                    continue
                key = self.cells_of.get(record.id) or cell_key(features_of(record))
                self.cells_of[record.id] = key
                island = record.island % len(archive.islands)
                islands = range(len(archive.islands)) if record.kind == "baseline" else [island]
                for index in islands:  # a known kernel seeds every island
                    archive.offer(index, key, elite_of(record, target))
                best = archive.best()
                if best is not None and (not archive.progress or archive.progress[-1].candidate != best.candidate):
                    archive.progress.append(ProgressPoint(evaluated=evaluated, candidate=best.candidate,
                                                          time_ms=best.time_ms,
                                                          speedup_vs_compile=best.speedup_vs_compile))
            after = archive.best()
            if after is None or after.time_ms is None:
                archive.plateau = 0  # nothing timed here (no such GPU): no plateau to judge
            else:
                archive.plateau = 0 if _improved(before, after) else archive.plateau + 1
            for move in archive.migrate(generation):
                lines.append(f"{target}: {move.candidate} migrates from island {move.from_island} "
                             f"to island {move.to_island}")
        return lines


def _improved(before: Elite | None, after: Elite | None) -> bool:
    if after is None:
        return False
    if before is None:
        return True
    if after.time_ms is None or before.time_ms is None:
        return after.time_ms is not None and before.time_ms is None
    return after.time_ms < before.time_ms * (1 - IMPROVEMENT_MARGIN)
