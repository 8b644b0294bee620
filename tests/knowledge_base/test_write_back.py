"""Write-back policy, in both modes: verified only, once per code, best per slot, safe in parallel."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from kb_entries import make_entry, passed_result

from kgen.evals.verdict import RejectionClass, StageResult, StageStatus, Verdict
from kgen.knowledge_base.schema import Provenance
from kgen.knowledge_base.store import where_equal
from kgen.knowledge_base.write_back import (
    NotVerifiedError,
    entry_from_result,
    prune,
    record_kernel,
)

SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


def _roles(kb):
    return {e.id: e.role for e in kb.kernels()}


def test_rejected_kernels_never_become_entries():
    rejected = passed_result(verdict=Verdict.REJECTED, rejection=RejectionClass.LOW_PRECISION_ACCUMULATION,
                             reason="bf16 accumulator")
    with pytest.raises(NotVerifiedError, match="low_precision_accumulation"):
        entry_from_result(rejected, SOURCE, spec_text="x", target="h100", dtype="bfloat16",
                          provenance=Provenance(model="m"))
    failed_stage = passed_result(stages=[StageResult(name="correctness", status=StageStatus.FAILED)])
    with pytest.raises(NotVerifiedError, match="failed stages: correctness"):
        entry_from_result(failed_stage, SOURCE, spec_text="x", target="h100", dtype="bfloat16",
                          provenance=Provenance(model="m"))
    with pytest.raises(NotVerifiedError, match="no trials"):
        entry_from_result(passed_result(trials=[]), SOURCE, spec_text="x", target="h100",
                          dtype="bfloat16", provenance=Provenance(model="m"))


def test_entry_from_a_passed_result_carries_its_evidence():
    entry = entry_from_result(passed_result(), SOURCE, spec_text="rmsnorm bwd", target="h100",
                              dtype="bfloat16", provenance=Provenance(model="openai:gpt-5", run_id="r1"))
    assert entry.evidence.seeds == [7, 8]
    assert entry.evidence.distributions == ["normal", "x64"]
    assert entry.evidence.checks_passed == ["static", "load", "correctness"]
    assert entry.evidence.shapes == [{"ROWS": 37, "HIDDEN": 96}]
    assert entry.evidence.device == "cpu" and entry.evidence.compiled_for == ["h100"]
    assert not entry.timing.measured  # a CPU run measures no time
    assert entry.target_family == "hopper"


def test_first_kernel_of_a_slot_is_its_best_and_same_code_is_stored_once(kb):
    first = make_entry(1, time_ms=2.0)
    assert record_kernel(kb, first).action == "added_best"
    # the same code with other comments is the same kernel
    again = first.model_copy(update={"source": "# a comment\n" + first.source})
    assert record_kernel(kb, again).action == "duplicate"
    assert kb.kernel_count() == 1


def test_faster_kernel_takes_the_slot_and_the_old_best_becomes_a_stepping_stone(kb):
    slow, fast = make_entry(1, time_ms=2.0), make_entry(2, time_ms=1.0)
    record_kernel(kb, slow)
    assert record_kernel(kb, fast).action == "added_best"
    assert _roles(kb) == {slow.id: "stepping_stone", fast.id: "best"}


def test_slower_kernel_kept_only_as_best_of_its_generation(kb):
    record_kernel(kb, make_entry(1, time_ms=1.0))
    assert record_kernel(kb, make_entry(2, time_ms=3.0), generation_best=False).action == "skipped"
    assert record_kernel(kb, make_entry(3, time_ms=3.0), generation_best=True).action == "added_stepping_stone"
    assert sorted(_roles(kb).values()) == ["best", "stepping_stone"]


def test_a_kernel_verified_on_the_cpu_only_is_not_written_and_says_why(kb):
    """The knowledge base keeps only what was measured: a CPU-verified kernel is no slot's
    best (an empty slot included) and no stepping stone, and the outcome names the reason."""
    outcome = record_kernel(kb, make_entry(1, time_ms=None), generation_best=True)
    assert outcome.action == "not_measured" and kb.kernel_count() == 0
    assert outcome.reason == ("verified on cuda, never timed on a GPU: the knowledge base keeps a kernel "
                              "only with a timing on its target's GPU (h100)")
    record_kernel(kb, make_entry(2, time_ms=5.0))
    assert record_kernel(kb, make_entry(3, time_ms=None), generation_best=True).action == "not_measured"
    assert [e.timing.time_ms for e in kb.kernels()] == [5.0]


def test_an_untimed_starting_point_fills_only_an_empty_slot_of_a_search_s_own_store(kb):
    """A de-tuned seed a search must start from is placed on purpose, untimed; it never joins a
    slot that holds a kernel, and prune removes it as any unmeasured kernel."""
    placed = record_kernel(kb, make_entry(1, time_ms=None), starting_point=True)
    assert placed.action == "added_best" and kb.kernel_count() == 1
    assert record_kernel(kb, make_entry(2, time_ms=None), starting_point=True).action == "not_measured"
    assert kb.kernel_count() == 1
    assert prune(kb).unmeasured == [placed.id] and kb.kernel_count() == 0


def test_remeasured_duplicate_improves_timing_and_can_take_the_slot(kb):
    a, b = make_entry(1, time_ms=2.0), make_entry(2, time_ms=1.5)
    record_kernel(kb, a)
    record_kernel(kb, b)
    outcome = record_kernel(kb, a.model_copy(update={"timing": a.timing.model_copy(update={"time_ms": 1.0})}))
    assert outcome.action == "improved_timing"
    assert _roles(kb) == {a.id: "best", b.id: "stepping_stone"}


def _bundle_of(entry, seeds: list[int]):
    from kgen.evals.bundle import build_bundle
    from kgen.evals.harness import EvalOptions

    result = passed_result()
    return build_bundle(result, EvalOptions(device="cpu", seeds=seeds), entry.source, "class Model: ...\n",
                        "k.py", f"{result.problem}.py")


def test_the_same_code_seen_again_brings_its_bundle_where_the_stored_kernel_has_none(kb):
    """A kernel stored without a bundle (a seed) gets the first bundle a run brings for the
    same code; one that has a bundle keeps it unless the new sighting measured faster."""
    plain = make_entry(1, time_ms=2.0)
    record_kernel(kb, plain)
    first, second = _bundle_of(plain, [1]), _bundle_of(plain, [2])
    outcome = record_kernel(kb, plain.model_copy(update={"bundle": first}))
    assert (outcome.action, outcome.reason) == ("duplicate", "same code already stored; its evidence bundle added")
    assert kb.get_kernel(plain.id).bundle == first
    assert record_kernel(kb, plain.model_copy(update={"bundle": second})).reason == "same code already stored"
    assert kb.get_kernel(plain.id).bundle == first
    faster = plain.model_copy(update={"bundle": second, "timing": plain.timing.model_copy(update={"time_ms": 1.0})})
    assert record_kernel(kb, faster).action == "improved_timing"
    assert kb.get_kernel(plain.id).bundle == second


def test_a_time_from_another_gpu_never_ranks_a_kernel_for_the_slots_target(kb):
    """The one ranking rule (``Timing.time_on``), as in the search: a kernel timed on an A100 is
    not faster on H100 however small its number, and never demotes the H100-timed best."""
    on_h100 = make_entry(1, time_ms=2.0)
    on_a100 = make_entry(2, time_ms=0.5)
    on_a100 = on_a100.model_copy(update={"timing": on_a100.timing.model_copy(
        update={"device_name": "NVIDIA A100-SXM4-80GB"})})
    record_kernel(kb, on_h100)
    outcome = record_kernel(kb, on_a100, generation_best=True)
    assert outcome.action == "not_measured" and "timed on NVIDIA A100-SXM4-80GB, not on h100" in outcome.reason
    assert _roles(kb) == {on_h100.id: "best"}
    # nor does it take an empty slot of the H100
    empty = make_entry(4, problem="softmax", time_ms=0.5)
    empty = empty.model_copy(update={"timing": on_a100.timing})
    assert record_kernel(kb, empty).action == "not_measured" and kb.kernel_count() == 1
    # and re-settling the slot (prune, a later write) keeps the H100-timed kernel
    kb.put_kernels([on_a100.model_copy(update={"role": "stepping_stone"})])  # a store written before the rule
    prune(kb)
    assert _roles(kb)[on_h100.id] == "best"


def test_slots_are_per_target_and_dtype(kb):
    record_kernel(kb, make_entry(1, target="h100"))
    on_mi300x = make_entry(1, target="mi300x")
    record_kernel(kb, on_mi300x.model_copy(update={"timing": on_mi300x.timing.model_copy(
        update={"device_name": "AMD Instinct MI300X"})}))
    record_kernel(kb, make_entry(1, dtype="float32"))
    assert sorted(_roles(kb).values()) == ["best", "best", "best"]


def test_prune_keeps_best_and_newest_stepping_stones(kb):
    record_kernel(kb, make_entry(0, time_ms=10.0, created="2026-11-01T00:00:00+00:00"))
    for tag in range(1, 5):
        record_kernel(kb, make_entry(tag, time_ms=10.0 - tag, created=f"2026-11-0{tag + 1}T00:00:00+00:00"))
    assert kb.kernel_count() == 5
    dry = prune(kb, keep_stepping_stones=2, dry_run=True)
    assert len(dry.removed) == 2 and kb.kernel_count() == 5
    report = prune(kb, keep_stepping_stones=2)
    assert report.removed == dry.removed
    left = kb.kernels()
    assert len(left) == 3
    assert [e.provenance.created[:10] for e in sorted(left, key=lambda e: e.provenance.created)] == [
        "2026-11-03", "2026-11-04", "2026-11-05"]
    assert [e.timing.time_ms for e in left if e.role == "best"] == [6.0]


def test_prune_removes_what_a_store_kept_without_a_timing_on_its_target(kb):
    """A store written before the knowledge base kept only measured kernels (an offline run's
    CPU-verified "best" for h100) is cleaned by prune: those go, each with its reason."""
    timed, untimed = make_entry(1, time_ms=2.0), make_entry(2, problem="softmax", time_ms=None)
    kb.put_kernels([timed, untimed])
    dry = prune(kb, dry_run=True)
    assert dry.removed == [untimed.id] and dry.unmeasured == [untimed.id] and kb.kernel_count() == 2
    assert prune(kb).removed == [untimed.id]
    assert [e.id for e in kb.kernels()] == [timed.id]


def test_prune_repairs_a_slot_with_two_bests(kb):
    kb.put_kernels([make_entry(1, time_ms=2.0), make_entry(2, time_ms=1.0)])  # both "best"
    prune(kb)
    assert sorted((e.timing.time_ms, e.role) for e in kb.kernels()) == [(1.0, "best"), (2.0, "stepping_stone")]


WRITER = """
import sys
sys.path.insert(0, {tests!r})
from kb_entries import make_entry
from kgen.knowledge_base.store import KnowledgeBase
from kgen.knowledge_base.write_back import record_kernel
kb = KnowledgeBase.open({location!r})
worker = int(sys.argv[1])
for i in range(8):
    # every worker also writes kernel 0: they must converge on one record
    tag = 0 if i == 0 else worker * 100 + i
    record_kernel(kb, make_entry(tag, time_ms=1.0 + (tag % 7) / 10), generation_best=True)
"""


def test_several_processes_writing_at_once_converge(kb_location, tmp_path):
    from pathlib import Path

    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(Path(__file__).resolve().parents[1] / "support"), location=kb_location))
    workers = [subprocess.Popen([sys.executable, str(script), str(w)]) for w in range(1, 5)]
    assert [w.wait(timeout=240) for w in workers] == [0, 0, 0, 0]
    from kgen.knowledge_base.store import KnowledgeBase

    kb = KnowledgeBase.open(kb_location)
    prune(kb, keep_stepping_stones=100)  # a server has no cross-machine lock: prune settles the slot
    entries = kb.kernels(where_equal(problem="rmsnorm_backward"))
    assert len(entries) == 1 + 4 * 7
    assert len({e.id for e in entries}) == len(entries)
    assert [e.role for e in entries].count("best") == 1
    best = next(e for e in entries if e.role == "best")
    assert best.timing.time_ms == min(e.timing.time_ms for e in entries)
    # a server indexes writes for vector search a moment after they are stored: the search
    # must come to see every record, within seconds
    deadline = time.monotonic() + 30
    while len(kb.query_kernels("rmsnorm backward", n=100)) != len(entries) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(kb.query_kernels("rmsnorm backward", n=100)) == len(entries)


def _bench(candidate: tuple[float, float, float], **baselines: tuple[float, float, float]):
    """A typed bench: each timing as (p10, median, p90) in ms."""
    from kgen.evals.timing.bench_result import BenchResult

    def measured(p10, median, p90):
        return {"median_ms": median, "p10_ms": p10, "p90_ms": p90, "trials": 50}

    return BenchResult(device_name="NVIDIA H100 80GB HBM3", sizes={"ROWS": 4096},
                       measurements={"candidate": measured(*candidate),
                                     **{name.replace("_", "."): measured(*t) for name, t in baselines.items()}})


@pytest.mark.parametrize(
    ("candidate", "eager", "compiled", "same"),
    [((0.098, 0.100, 0.104), (0.19, 0.20, 0.21), (0.099, 0.102, 0.106), ["torch.compile"]),  # 1.02x: noise
     ((0.098, 0.100, 0.104), (0.19, 0.20, 0.21), (0.12, 0.13, 0.14), []),                   # both claimed
     ((0.098, 0.130, 0.150), (0.10, 0.12, 0.14), (0.09, 0.10, 0.11), ["eager", "torch.compile"]),  # spread
     ((0.20, 0.21, 0.22), (0.19, 0.20, 0.205), (0.10, 0.10, 0.11), ["eager"])],            # slower, claimed
    ids=["compile_within_noise", "both_disjoint", "wide_candidate", "slower_than_compile"],
)
def test_the_knowledge_base_and_the_run_log_keep_the_claim_rule(candidate, eager, compiled, same):
    from kgen.agent.runs.summary import speedup_cell
    from kgen.agent.search.policy import CandidateRecord, describe
    from kgen.knowledge_base.write_back import timing_from_result

    bench = _bench(candidate, eager=eager, torch_compile=compiled)
    timing = timing_from_result(passed_result(device="cuda", bench=bench))
    assert timing.same_speed_as == same
    assert timing.time_ms == candidate[1] and timing.speedup_vs_compile == pytest.approx(compiled[1] / candidate[1])
    for name, ratio in (("eager", timing.speedup_vs_eager), ("torch.compile", timing.speedup_vs_compile)):
        text, cell = timing.speedup_text(name), speedup_cell(timing, name, ratio)
        assert text == bench.speedup(name).text  # one wording, wherever it is printed
        assert text.startswith("≈ same speed") == (name in same) == cell.startswith("≈")
    record = CandidateRecord(id="c1", generation=1, target="h100", kind="mutate", origin="mutation",
                             status="evaluated", verdict="passed", **timing.model_dump())
    assert timing.speedup_text("torch.compile") in describe(record)
    assert ("≈ same speed as torch.compile" in make_entry(1).model_copy(update={"timing": timing}).summary_line()) == (
        "torch.compile" in same)


def test_timing_is_read_from_the_result_even_when_its_problem_file_is_gone():
    from kgen.knowledge_base.write_back import timing_from_result

    result = passed_result(device="cuda", bench=_bench((0.1, 0.1, 0.1), eager=(0.3, 0.3, 0.3)))
    assert result.problem_path == "rmsnorm_backward.py"  # not a file anywhere
    timing = timing_from_result(result)
    assert timing.speedup_vs_eager == pytest.approx(3.0) and timing.same_speed_as == []
    assert timing_from_result(passed_result()).measured is False  # verified on a CPU: no figures
