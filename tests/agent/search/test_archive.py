"""The search archive: per target, islands of MAP-Elites cells, migration and plateaus.

What a person relies on: a faster kernel of a strategy replaces the slower one; a
different strategy survives beside the leader; a time from another GPU never ranks a
kernel for this target; a kernel that does not compile for a target never enters its
archive; a resumed run continues the same archive.
"""

from __future__ import annotations

import random

from kgen.agent.candidates import CandidateRecord
from kgen.agent.search.archive import MIGRATION_INTERVAL, SearchArchive, cell_key

GPU = {"h100": "NVIDIA H100 80GB HBM3", "mi300x": "AMD Instinct MI300X", "": ""}
ROWS = {"kernels": "1", "tensor_cores": "no", "persistent": "no", "tma": "no", "block": "medium"}
PERSISTENT = {**ROWS, "persistent": "yes"}


def rec(cid: str, time_ms: float | None = None, *, on: str = "h100", target: str = "h100",
        verdict: str = "passed", island: int = 0, kind: str = "mutate",
        compiles_for: dict[str, bool] | None = None, pct: float | None = None) -> CandidateRecord:
    return CandidateRecord(
        id=cid, generation=int(cid[1]), target=target, kind=kind, origin="mutation", island=island,
        status="evaluated", verdict=verdict, time_ms=time_ms, device_name=GPU[on] if time_ms else "",
        compiles_for=compiles_for or {}, pct_of_sol=pct,
    )


def features(strategies: dict[str, dict[str, str]]):
    return lambda record: strategies.get(record.id, ROWS)


def test_a_faster_kernel_of_the_same_strategy_replaces_the_slower_one():
    archive = SearchArchive.new(["h100"], islands=1)
    archive.update([rec("g0-a", 2.0), rec("g0-b", 1.0), rec("g0-c", 3.0)], features({}), 0)
    island = archive.targets["h100"].islands[0]
    assert [e.candidate for e in island.cells.values()] == ["g0-b"]
    assert archive.targets["h100"].best().candidate == "g0-b"


def test_a_different_strategy_survives_beside_the_leader():
    archive = SearchArchive.new(["h100"], islands=1)
    archive.update([rec("g0-a", 1.0), rec("g0-b", 5.0)], features({"g0-b": PERSISTENT}), 0)
    target = archive.targets["h100"]
    assert target.cell_count() == 2
    assert {e.candidate for e in target.islands[0].cells.values()} == {"g0-a", "g0-b"}
    assert archive.cells_of["g0-b"] == cell_key(PERSISTENT)
    # parents: the best first, then the other strategy's elite (diversity), never a rejection
    assert target.parents(0, random.Random(0))[:2] == ["g0-a", "g0-b"]


def test_rejected_candidates_never_enter():
    archive = SearchArchive.new(["h100"], islands=1)
    archive.update([rec("g0-a", 0.1, verdict="rejected"), rec("g0-b", verdict="inconclusive")],
                   features({}), 0)
    assert archive.targets["h100"].best() is None


def test_a_time_from_another_gpu_never_ranks_a_kernel_for_this_target():
    archive = SearchArchive.new(["h100", "mi300x"], islands=1)
    fast_on_mi300x = rec("g0-a", 0.1, on="mi300x", target="h100", compiles_for={"mi300x": True})
    slow_on_h100 = rec("g0-b", 2.0, on="h100", target="h100", compiles_for={"mi300x": True})
    archive.update([fast_on_mi300x, slow_on_h100], features({}), 0)
    h100, mi300x = archive.targets["h100"], archive.targets["mi300x"]
    assert h100.best().candidate == "g0-b" and h100.best().time_ms == 2.0
    assert mi300x.best().candidate == "g0-a" and mi300x.best().time_ms == 0.1


def test_a_kernel_that_does_not_compile_for_a_target_stays_out_of_its_archive():
    archive = SearchArchive.new(["h100", "mi300x"], islands=1)
    archive.update([rec("g0-a", 1.0, compiles_for={"h100": True, "mi300x": False}),
                    rec("g0-b", 2.0, compiles_for={"h100": True})], features({}), 0)
    assert archive.targets["h100"].best().candidate == "g0-a"
    assert archive.targets["mi300x"].best() is None  # g0-b was never compiled for mi300x


def test_compiled_not_timed_kernels_rank_after_timed_ones_and_the_latest_leads_its_strategy():
    archive = SearchArchive.new(["mi300x"], islands=1)
    archive.update([rec("g0-a", target="mi300x"), rec("g0-b", target="mi300x")], features({}), 0)
    best = archive.targets["mi300x"].best()
    assert (best.candidate, best.time_ms) == ("g0-a", None)  # same generation: the first stays
    archive.update([rec("g1-c", target="mi300x")], features({}), 1)
    assert archive.targets["mi300x"].best().candidate == "g1-c"  # made from the earlier ones
    archive.update([rec("g2-d", 0.5, on="mi300x", target="mi300x")], features({}), 2)
    archive.update([rec("g3-e", target="mi300x")], features({}), 3)
    assert archive.targets["mi300x"].best().candidate == "g2-d"  # timed beats any untimed


def test_islands_evolve_apart_and_migrate_their_best_in_a_ring():
    archive = SearchArchive.new(["h100"], islands=2)
    archive.update([rec("g0-a", 2.0, island=0), rec("g0-b", 1.0, island=1, kind="generate")],
                   features({"g0-b": PERSISTENT}), 0)
    target = archive.targets["h100"]
    assert target.islands[0].best().candidate == "g0-a" and target.islands[1].best().candidate == "g0-b"
    archive.update([], features({}), MIGRATION_INTERVAL - 1)
    assert not target.migrations
    lines = archive.update([], features({}), MIGRATION_INTERVAL)
    target = archive.targets["h100"]
    assert {(m.candidate, m.from_island, m.to_island) for m in target.migrations} == {("g0-a", 0, 1), ("g0-b", 1, 0)}
    assert target.islands[0].best().candidate == "g0-b"  # the faster migrant leads island 0 now
    assert any("migrates" in line for line in lines)


def test_a_known_kernel_seeds_every_island():
    archive = SearchArchive.new(["h100"], islands=3)
    archive.update([rec("g0-k", 1.0, kind="baseline")], features({}), 0)
    assert all(i.best().candidate == "g0-k" for i in archive.targets["h100"].islands)


def test_plateau_counts_generations_without_a_faster_kernel():
    archive = SearchArchive.new(["h100"], islands=1)
    archive.update([rec("g0-a", 1.0)], features({}), 0)
    assert archive.targets["h100"].plateau == 0
    archive.update([rec("g1-b", 0.999)], features({}), 1)  # within the noise margin
    assert archive.targets["h100"].plateau == 1
    archive.update([rec("g2-c", 1.5)], features({}), 2)
    assert archive.targets["h100"].plateau == 2
    archive.update([rec("g3-d", 0.5)], features({}), 3)
    assert archive.targets["h100"].plateau == 0


def test_untimed_searches_never_plateau():
    """On a CPU nothing is timed: 'no faster kernel' would be meaningless, so no early stop."""
    archive = SearchArchive.new(["h100"], islands=1)
    for generation in range(4):
        archive.update([rec(f"g{generation}-a")], features({}), generation)
    assert archive.targets["h100"].plateau == 0


def test_the_archive_survives_a_checkpoint_round_trip_and_counts_each_candidate_once():
    archive = SearchArchive.new(["h100"], islands=2)
    records = [rec("g0-a", 2.0), rec("g0-b", 1.0, island=1)]
    archive.update(records, features({}), 0)
    restored = SearchArchive.model_validate(archive.model_dump(mode="json"))
    assert restored == archive
    restored.update(records, features({}), 0)  # a resumed select sees the same records again
    assert restored.targets["h100"].seen == ["g0-a", "g0-b"]
    assert [p.candidate for p in restored.targets["h100"].progress] == ["g0-a", "g0-b"]
    assert [p.evaluated for p in restored.targets["h100"].progress] == [1, 2]
