"""The search policy: which candidates a generation asks for, and which candidate wins.

A person sees this as "the run picked the fastest kernel measured on my GPU",
"offline, it tuned the kernel kgen already knew" and "a model saw my rejected
kernel's evidence and was asked to fix it"; these tests pin those choices.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from kgen.agent.search.archive import SearchArchive
from kgen.agent.search.mutation import apply_values, source_key
from kgen.agent.search.policy import (
    CandidateRecord,
    best_for,
    per_target,
    plan_generation,
    rank_key,
    split_budget,
)
from kgen.backends.targets import resolve_target
from kgen.backends.triton.features import strategy_features

# a kernel whose tunable space the tests know (tests/fixtures/search_kernels/README.md)
SEED = (Path(__file__).resolve().parents[2] / "fixtures" / "search_kernels" / "rmsnorm_backward.py").read_text()
KB_ID = "k-seed-rmsnorm"
BASELINES = {"h100": (KB_ID, SEED)}
OPENAI = "openai:gpt-5"
GPU_NAMES = {"h100": "NVIDIA H100 80GB HBM3", "a100": "NVIDIA A100-SXM4-80GB", "mi300x": "AMD Instinct MI300X"}
ANTHROPIC = "anthropic:claude-sonnet-4-5"


def record(
    cid: str,
    *,
    target: str = "h100",
    verdict: str | None = "passed",
    time_ms: float | None = None,
    timed_target: str | None = None,
    origin: str = "mutation",
    kind: str = "mutate",
) -> CandidateRecord:
    generation = int(cid.split("-")[0].removeprefix("g"))
    return CandidateRecord(
        id=cid, generation=generation, target=target, kind=kind, origin=origin,
        status="evaluated", verdict=verdict, time_ms=time_ms, timed_target=timed_target,
        device_name=GPU_NAMES.get(timed_target or "", ""),
    )


def archive_of(records: list[CandidateRecord], sources: dict[str, str], targets: list[str],
               islands: int = 1) -> SearchArchive:
    """The archive a run would hold after evaluating ``records`` (the select node's update)."""
    archive = SearchArchive.new(targets, islands)
    archive.update(records, lambda r: strategy_features(sources.get(r.id, "")), 0)
    return archive


def plan_offline(generation, size, targets, records, sources, baselines, rng, islands=1):
    return plan_generation(generation, size, targets, records, sources, baselines,
                           archive_of(records, sources, targets, islands), rng)


def plan_with_models(generation, size, targets, records, baselines, models, sources=None, islands=1):
    sources = sources or {}
    return plan_generation(generation, size, targets, records, sources, baselines,
                           archive_of(records, sources, targets, islands), random.Random(0),
                           models=lambda n: (models * n)[:n])


def variant(**values: int) -> str:
    """A real retuned variant of the seed kernel (as a previous generation would have made)."""
    return apply_values(SEED, values, resolve_target("h100"))


# -- ranking -------------------------------------------------------------------------------


def test_best_for_ranks_timed_on_target_fastest_first_then_untimed_by_generation():
    records = [
        record("g0-c00"),  # the baseline: passed, not timed
        record("g1-c00", time_ms=2.0, timed_target="h100"),
        record("g1-c01", time_ms=1.0, timed_target="h100"),
        record("g1-c02", time_ms=0.5, timed_target="a100"),  # fast, but on another GPU
        record("g2-c00", verdict="rejected", time_ms=0.1, timed_target="h100"),
        record("g2-c01", target="h200", time_ms=0.2, timed_target="h200"),
        record("g1-c03"),  # passed, untimed, later than the baseline
    ]
    ranked = [r.id for r in best_for(records, "h100", n=10)]
    assert ranked == ["g1-c01", "g1-c00", "g0-c00", "g1-c02", "g1-c03"]
    assert [r.id for r in best_for(records, "h100")] == ["g1-c01"]
    assert [r.id for r in best_for(records, "h200")] == ["g2-c01"]
    assert best_for(records, "mi300x") == []


def test_a_time_measured_on_another_gpu_is_not_the_targets_time():
    on_a100 = record("g1-c00", time_ms=0.5, timed_target="a100")
    assert on_a100.time_on("h100") is None
    assert on_a100.time_on("a100") == 0.5
    on_h100 = record("g1-c01", time_ms=3.0, timed_target="h100")
    # a slower time measured on the H100 itself beats a faster one measured elsewhere
    assert [r.id for r in best_for([on_a100, on_h100], "h100", n=2)] == ["g1-c01", "g1-c00"]


def test_untimed_candidates_rank_earliest_generation_first():
    records = [record("g2-c00"), record("g1-c01"), record("g1-c00"), record("g0-c03")]
    assert [r.id for r in best_for(records, "h100", n=4)] == ["g0-c03", "g1-c00", "g1-c01", "g2-c00"]


def test_rank_key_puts_every_passed_candidate_before_any_rejected_one():
    records = [
        record("g0-c00", verdict="rejected", time_ms=0.01, timed_target="h100"),
        record("g1-c00", time_ms=9.0, timed_target="h100"),
        record("g2-c00"),
    ]
    ordered = sorted(records, key=lambda r: rank_key(r, "h100"))
    assert [r.id for r in ordered] == ["g1-c00", "g2-c00", "g0-c00"]


# -- budget ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "generations", "sizes"),
    [(7, 3, [3, 2, 2]), (2, 3, [1, 1]), (12, 3, [4, 4, 4]), (1, 1, [1]), (5, 1, [5])],
)
def test_split_budget(budget, generations, sizes):
    assert split_budget(budget, generations) == sizes


@pytest.mark.parametrize("generations", [1, 2, 3, 5])
@pytest.mark.parametrize("budget", [1, 2, 3, 4, 7, 12, 13])
def test_split_budget_spends_exactly_the_budget_in_non_empty_generations(budget, generations):
    sizes = split_budget(budget, generations)
    assert sum(sizes) == budget
    assert len(sizes) <= generations and all(size > 0 for size in sizes)
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize(
    ("budget", "generations", "remeasures", "sizes"),
    [
        (1, 1, 1, [1]),          # --budget 1: the re-measure is the run
        (1, 3, 1, [1]),          # budget < generations
        (3, 3, 1, [1, 1, 1]),    # budget == generations: already room in generation 0
        (7, 3, 1, [3, 2, 2]),    # room already: unchanged
        (1, 1, 2, [2]),          # two targets with known kernels: both re-measured
        (3, 3, 2, [2, 1]),       # the rest of the budget after generation 0's re-measures
        (4, 2, 3, [3, 1]),
        (5, 2, 0, [3, 2]),
    ],
)
def test_split_budget_keeps_a_slot_for_each_remeasure(budget, generations, remeasures, sizes):
    assert split_budget(budget, generations, remeasures=remeasures) == sizes


@pytest.mark.parametrize("remeasures", [0, 1, 2, 3])
@pytest.mark.parametrize("generations", [1, 2, 3, 5])
@pytest.mark.parametrize("budget", [1, 2, 3, 4, 7, 12])
def test_split_budget_spends_the_budget_or_just_the_remeasures(budget, generations, remeasures):
    sizes = split_budget(budget, generations, remeasures=remeasures)
    assert sizes[0] >= remeasures and sum(sizes) == max(budget, remeasures)
    assert len(sizes) <= generations and all(size > 0 for size in sizes)


def test_per_target_spreads_the_remainder_over_the_first_targets():
    assert per_target(5, ["h100", "mi300x"]) == {"h100": 3, "mi300x": 2}
    assert per_target(1, ["h100", "mi300x"]) == {"h100": 1, "mi300x": 0}
    assert per_target(6, ["h100", "a100", "mi300x"]) == {"h100": 2, "a100": 2, "mi300x": 2}


# -- offline plans ---------------------------------------------------------------------------


def test_offline_generation_0_remeasures_the_known_kernel_then_tunes_it():
    tasks = plan_offline(0, 3, ["h100"], [], {}, BASELINES, random.Random(0))
    assert [t.id for t in tasks] == ["g0-c00", "g0-c01", "g0-c02"]
    baseline, *mutations = tasks
    assert (baseline.kind, baseline.origin, baseline.kb_id) == ("baseline", "knowledge_base", KB_ID)
    assert baseline.source == SEED and KB_ID in baseline.description
    assert len(mutations) == 2
    keys = {source_key(t.source) for t in mutations}
    assert len(keys) == 2 and source_key(SEED) not in keys
    for task in mutations:
        assert task.kind in ("sweep", "mutate") and (task.origin, task.target) == ("mutation", "h100")
        assert task.parent_ids == [f"kb:{KB_ID}"]
        assert task.description  # says which knob moved
        ast.parse(task.source)
        assert "class ModelNew" in task.source


def test_offline_plans_are_reproducible_from_the_seed():
    first = plan_offline(0, 4, ["h100"], [], {}, BASELINES, random.Random("7-0"))
    again = plan_offline(0, 4, ["h100"], [], {}, BASELINES, random.Random("7-0"))
    assert [t.source for t in first] == [t.source for t in again]


def test_offline_budget_is_spread_over_two_targets():
    baselines = {"h100": (KB_ID, SEED), "mi300x": ("k-seed-mi300x", SEED)}
    tasks = plan_offline(0, 4, ["h100", "mi300x"], [], {}, baselines, random.Random(0))
    assert [t.id for t in tasks] == ["g0-c00", "g0-c01", "g0-c02", "g0-c03"]
    assert [(t.target, t.kind if t.kind == "baseline" else "tuned") for t in tasks] == [
        ("h100", "baseline"), ("h100", "tuned"), ("mi300x", "baseline"), ("mi300x", "tuned"),
    ]
    assert tasks[2].kb_id == "k-seed-mi300x"
    odd = plan_offline(0, 3, ["h100", "mi300x"], [], {}, baselines, random.Random(0))
    assert [(t.target, t.kind if t.kind == "baseline" else "tuned") for t in odd] == [
        ("h100", "baseline"), ("h100", "tuned"), ("mi300x", "baseline"),
    ]


def test_offline_later_generations_tune_the_best_passed_candidates():
    sources = {
        "g0-c00": SEED,
        "g0-c01": variant(sum_block=128),
        "g0-c02": variant(sum_block=512),
        "g0-c03": variant(sum_block=64),
    }
    records = [
        record("g0-c00", kind="baseline", origin="knowledge_base"),
        record("g0-c01", time_ms=1.0, timed_target="h100"),
        record("g0-c02", time_ms=2.0, timed_target="h100"),
        record("g0-c03", verdict="rejected", time_ms=0.5, timed_target="h100"),
    ]
    tasks = plan_offline(1, 4, ["h100"], records, sources, BASELINES, random.Random(1))
    assert [t.id for t in tasks] == ["g1-c00", "g1-c01", "g1-c02", "g1-c03"]
    assert all(t.kind in ("sweep", "mutate") and t.generation == 1 for t in tasks)
    # the sweep walks the best kernel's knob lines; random moves spread over the passed ones
    parents = [t.parent_ids[0] for t in tasks]
    assert parents[0] == "g0-c01" and set(parents) <= {"g0-c00", "g0-c01", "g0-c02"}
    assert all(t.parent_ids == ["g0-c01"] for t in tasks if t.kind == "sweep")
    earlier = {source_key(s) for s in sources.values()}
    keys = [source_key(t.source) for t in tasks]
    assert len(set(keys)) == 4 and not set(keys) & earlier  # nothing is evaluated twice


def test_offline_falls_back_to_the_known_kernel_when_nothing_passed():
    sources = {"g0-c00": SEED, "g0-c01": variant(sum_block=128)}
    records = [record("g0-c00", verdict="rejected", kind="baseline", origin="knowledge_base"),
               record("g0-c01", verdict="rejected")]
    tasks = plan_offline(1, 2, ["h100"], records, sources, BASELINES, random.Random(0))
    assert len(tasks) == 2 and all(t.parent_ids == [f"kb:{KB_ID}"] for t in tasks)


def test_offline_without_a_known_kernel_plans_nothing():
    assert plan_offline(0, 3, ["h100"], [], {}, {}, random.Random(0)) == []
    assert plan_offline(0, 0, ["h100"], [], {}, BASELINES, random.Random(0)) == []


# -- plans with models ---------------------------------------------------------------------


def test_models_generation_0_generates_in_the_allocated_order_after_the_baseline():
    models = [OPENAI, ANTHROPIC, OPENAI]
    tasks = plan_with_models(0, 4, ["h100"], [], BASELINES, models)
    assert [t.id for t in tasks] == ["g0-c00", "g0-c01", "g0-c02", "g0-c03"]
    assert (tasks[0].kind, tasks[0].origin, tasks[0].source) == ("baseline", "knowledge_base", SEED)
    assert [t.kind for t in tasks[1:]] == ["generate"] * 3
    assert [t.model for t in tasks[1:]] == models
    assert all(t.origin == "model" and t.parent_ids == [] for t in tasks[1:])


def test_models_generation_0_with_one_slot_remeasures_the_known_kernel():
    """With --budget 1 (or one slot per generation) the known kernel is re-measured, not
    dropped for a model's untested attempt: a run that knew a good kernel ends with one."""
    tasks = plan_with_models(0, 1, ["h100"], [], BASELINES, [ANTHROPIC])
    assert [(t.kind, t.origin, t.kb_id) for t in tasks] == [("baseline", "knowledge_base", KB_ID)]
    assert [(t.kind, t.model) for t in plan_with_models(0, 2, ["h100"], [], BASELINES, [ANTHROPIC])] == [
        ("baseline", ""), ("generate", ANTHROPIC)]


def test_generation_0_remeasures_every_target_before_spreading_the_rest():
    baselines = {"h100": (KB_ID, SEED), "mi300x": ("k-seed-mi300x", SEED)}
    tasks = plan_with_models(0, 2, ["h100", "mi300x"], [], baselines, [OPENAI, ANTHROPIC])
    assert [(t.target, t.kind) for t in tasks] == [("h100", "baseline"), ("mi300x", "baseline")]
    only_second = {"mi300x": ("k-seed-mi300x", SEED)}
    tasks = plan_offline(0, 1, ["h100", "mi300x"], [], {}, only_second, random.Random(0))
    assert [(t.target, t.kind) for t in tasks] == [("mi300x", "baseline")]
    tasks = plan_with_models(0, 2, ["h100", "mi300x"], [], only_second, [OPENAI, ANTHROPIC])
    assert [(t.target, t.kind, t.model) for t in tasks] == [("h100", "generate", OPENAI),
                                                            ("mi300x", "baseline", "")]


def test_models_generation_0_without_a_known_kernel_only_generates():
    tasks = plan_with_models(0, 3, ["h100"], [], {}, [OPENAI, ANTHROPIC, OPENAI])
    assert [(t.kind, t.model) for t in tasks] == [
        ("generate", OPENAI), ("generate", ANTHROPIC), ("generate", OPENAI),
    ]


def test_models_are_assigned_in_order_across_targets():
    models = [OPENAI, ANTHROPIC, "openai:gpt-5-mini", "anthropic:claude-haiku-4-5"]
    tasks = plan_with_models(0, 4, ["h100", "mi300x"], [], {}, models)
    assert [(t.target, t.model) for t in tasks] == [
        ("h100", OPENAI), ("h100", ANTHROPIC),
        ("mi300x", "openai:gpt-5-mini"), ("mi300x", "anthropic:claude-haiku-4-5"),
    ]


def test_models_later_generation_crosses_fixes_and_improves():
    """Before this run has outcomes, the priors decide: improve the best, cross the two best and
    fix the model's rejection (with its evidence) before asking for fresh kernels."""
    records = [
        record("g0-c00", time_ms=2.0, timed_target="h100", origin="model", kind="generate"),
        record("g0-c01", time_ms=1.0, timed_target="h100", origin="model", kind="generate"),
        record("g0-c02", verdict="rejected", origin="model", kind="generate"),
    ]
    tasks = plan_with_models(1, 3, ["h100"], records, BASELINES, [OPENAI, ANTHROPIC, OPENAI])
    assert [t.id for t in tasks] == ["g1-c00", "g1-c01", "g1-c02"]
    assert sorted((t.kind, tuple(t.parent_ids)) for t in tasks) == [
        ("crossover", ("g0-c01", "g0-c00")), ("fix", ("g0-c02",)), ("improve", ("g0-c01",)),
    ]
    assert [t.model for t in tasks] == [OPENAI, ANTHROPIC, OPENAI]
    assert all(t.generation == 1 and t.origin == "model" for t in tasks)


def test_models_later_generation_with_one_passed_kernel_improves_it():
    records = [record("g0-c00", origin="model", kind="generate"),
               record("g0-c01", verdict="rejected", kind="baseline", origin="knowledge_base")]
    tasks = plan_with_models(1, 2, ["h100"], records, BASELINES, [OPENAI, ANTHROPIC])
    # the rejected candidate is not a model's, so there is nothing to ask a model to fix; one
    # kernel cannot be crossed: improve it, and ask for a fresh one
    assert sorted((t.kind, tuple(t.parent_ids)) for t in tasks) == [("generate", ()), ("improve", ("g0-c00",))]


def test_models_later_generation_with_nothing_passed_fixes_and_generates():
    records = [record("g0-c00", verdict="rejected", origin="model", kind="generate")]
    tasks = plan_with_models(1, 2, ["h100"], records, {}, [OPENAI, ANTHROPIC])
    assert sorted((t.kind, tuple(t.parent_ids)) for t in tasks) == [("fix", ("g0-c00",)), ("generate", ())]


def test_models_plan_nothing_for_an_empty_generation():
    records = [record("g0-c00", origin="model", kind="generate"),
               record("g0-c01", origin="model", kind="generate")]
    assert plan_with_models(0, 0, ["h100"], [], BASELINES, []) == []
    assert plan_with_models(1, 0, ["h100"], records, BASELINES, []) == []


# -- library kernels of another problem (offline, a problem with no kernel of its own) -------


@pytest.mark.parametrize("size", [2, 3, 5])
def test_generation_0_verifies_every_library_kernel_before_any_tuned_variant(size):
    other = SEED + "\nLIBRARY_TWIN = True\n"  # another problem's kernel: other code
    library = {"h100": [(KB_ID, SEED, "the library's rmsnorm_backward kernel k-seed-rmsnorm (h100, bfloat16)"),
                        ("k-other", other, "the library's other kernel k-other (a100, bfloat16)")]}
    tasks = plan_generation(0, size, ["h100"], [], {}, BASELINES, archive_of([], {}, ["h100"]),
                            random.Random(0), library=library)
    assert len(tasks) == size
    first, second, *tuned = tasks
    assert [(t.kind, t.kb_id) for t in (first, second)] == [("baseline", KB_ID), ("baseline", "k-other")]
    assert first.description == library["h100"][0][2] and second.source == other
    assert all(t.kind in ("sweep", "mutate") for t in tuned)


def test_a_library_kernel_with_the_baselines_code_is_not_verified_twice():
    library = {"h100": [(KB_ID, SEED, "first"), ("k-copy", SEED, "same code")]}
    tasks = plan_generation(0, 2, ["h100"], [], {}, BASELINES, archive_of([], {}, ["h100"]),
                            random.Random(0), library=library)
    assert [t.kb_id for t in tasks if t.kind == "baseline"] == [KB_ID]
