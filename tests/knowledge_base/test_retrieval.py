"""Retrieval for a spec, in both modes: the right kernels first, the right guidance along."""

from __future__ import annotations

from kb_entries import make_entry

from kgen.knowledge_base.guidance import shipped_notes
from kgen.knowledge_base.retrieval import retrieve, search_kernels


def _fill(kb):
    kb.put_kernels([
        make_entry(1, problem="rmsnorm_backward", target="h100", time_ms=1.0),
        make_entry(2, problem="rmsnorm_backward", target="mi300x", time_ms=1.0),
        make_entry(3, problem="rmsnorm_forward", target="h100"),
        make_entry(4, problem="softmax", target="h100"),
        make_entry(5, problem="rmsnorm_backward", target="h100", backend="cute"),
        make_entry(6, problem="layernorm_backward", target="a100"),
    ])
    kb.put_guidance(shipped_notes())


def test_the_asked_for_problem_comes_first_for_its_target(kb):
    _fill(kb)
    found = search_kernels(kb, "rms norm backward", backend="triton", target="h100",
                           problem="rmsnorm_backward", n=4)
    assert (found[0].entry.problem, found[0].entry.target) == ("rmsnorm_backward", "h100")
    assert all(r.entry.backend == "triton" for r in found)
    assert "same problem" in found[0].why and "same target h100" in found[0].why


def test_target_family_ranks_before_other_families(kb):
    _fill(kb)
    found = search_kernels(kb, "rmsnorm backward", backend="triton", target="h200", n=5)
    families = [r.entry.target_family for r in found]
    assert families[: families.count("hopper")] == ["hopper"] * families.count("hopper")
    assert "cdna-3" in families  # other families still fill the list


def test_backend_filter(kb):
    _fill(kb)
    found = search_kernels(kb, "rmsnorm backward", backend="cute", n=5)
    assert [r.entry.backend for r in found] == ["cute"]


def test_faster_kernel_wins_between_equally_close_ones(kb):
    kb.put_kernels([make_entry(1, time_ms=2.0), make_entry(2, time_ms=0.5)])
    found = search_kernels(kb, "rmsnorm backward", backend="triton", target="h100",
                           problem="rmsnorm_backward", n=2)
    assert [r.entry.timing.time_ms for r in found] == [0.5, 2.0]


def test_retrieve_brings_applicable_guidance_with_the_rules_first(kb):
    _fill(kb)
    hopper = retrieve(kb, "rmsnorm backward", backend="triton", target="h100", problem="rmsnorm_backward")
    assert hopper.best is not None and hopper.best.problem == "rmsnorm_backward"
    assert "verification" in hopper.guidance[0].topics
    assert all(n.applies_to("triton", "h100") for n in hopper.guidance)
    ids = {n.id for n in hopper.guidance}
    assert not any("mi300x" in n.targets and "all" not in n.targets for n in hopper.guidance)
    amd = retrieve(kb, "rmsnorm backward wavefront", backend="triton", target="mi300x")
    assert any("mi300x" in n.targets for n in amd.guidance)
    assert ids != {n.id for n in amd.guidance}


def test_empty_store_retrieves_nothing_without_error(kb):
    assert search_kernels(kb, "anything", backend="triton", n=3) == []
    assert retrieve(kb, "anything", backend="triton", target="h100").best is None


def test_a_rare_backend_is_found_even_when_the_nearest_records_are_all_of_another(kb):
    kb.put_kernels([make_entry(i, problem="softmax") for i in range(110)]
                   + [make_entry(999, problem="rmsnorm_backward", backend="cute")])
    found = search_kernels(kb, "softmax", backend="cute", n=3)
    assert [(r.entry.backend, r.entry.problem) for r in found] == [("cute", "rmsnorm_backward")]
