"""Seeding, in both modes: the shipped library with its GPU evidence, idempotent, found by search."""

from __future__ import annotations

import json

import pytest

from kgen.knowledge_base import SEED_KERNELS_DIR
from kgen.knowledge_base.guidance import shipped_notes
from kgen.knowledge_base.retrieval import search_kernels
from kgen.knowledge_base.seeding import (
    SeedError,
    open_knowledge_base,
    seed_entries,
    seed_knowledge_base,
)


def test_every_seed_has_gpu_evidence_for_its_current_code():
    entries = seed_entries()
    assert {e.problem for e in entries} == {p.stem for p in (SEED_KERNELS_DIR / "triton").glob("*.py")}
    for entry in entries:
        assert entry.evidence.device == "cuda" and entry.evidence.trials >= 3, entry.problem
        assert entry.timing.measured and entry.timing.device_name.startswith("NVIDIA H100"), entry.problem
        assert entry.provenance.model == "seed"


def test_every_seed_ships_with_the_evidence_bundle_of_its_gpu_verification():
    """`kgen kb show ID --bundle` works for a seed: its bundle is the GPU run its evidence was
    distilled from (the same verdict, seeds and sizes), for its current code, intact."""
    from kgen.backends.device import Device
    from kgen.evals.bundle import tampered_parts
    from kgen.knowledge_base.code_hash import normalised_code_hash
    from kgen.knowledge_base.write_back import summarise_verification

    entries = seed_entries()
    assert {e.backend for e in entries} == {"triton", "cute"}
    for entry in entries:
        bundle = entry.bundle
        assert bundle is not None, f"{entry.backend}/{entry.problem}"
        assert tampered_parts(json.loads(bundle.model_dump_json())) == [], entry.problem
        assert normalised_code_hash(bundle.kernel_source) == entry.code_hash, entry.problem
        assert bundle.settings.device is Device.CUDA and bundle.result.passed, entry.problem
        assert summarise_verification(bundle.result) == entry.evidence, entry.problem
        # what the GPU run did not record is not filled in from this machine
        assert bundle.libraries == {} and bundle.kgen_version == entry.evidence.kgen_version, entry.problem


def test_a_seed_whose_bundle_is_for_other_code_is_refused(tmp_path):
    (tmp_path / "triton" / "bundles").mkdir(parents=True)
    for name in ("softmax.py", "evidence.json"):
        (tmp_path / "triton" / name).write_text((SEED_KERNELS_DIR / "triton" / name).read_text())
    (tmp_path / "triton" / "bundles" / "softmax.json").write_text(
        (SEED_KERNELS_DIR / "triton" / "bundles" / "gelu.json").read_text())
    with pytest.raises(SeedError, match="bundles/softmax.json is the evidence of other code"):
        seed_entries(tmp_path)


def test_a_seed_edited_without_a_new_gpu_run_is_refused(tmp_path):
    (tmp_path / "triton").mkdir()
    source = (SEED_KERNELS_DIR / "triton" / "softmax.py").read_text()
    (tmp_path / "triton" / "softmax.py").write_text(source.replace("tl.float32", "tl.bfloat16"))
    evidence = json.loads((SEED_KERNELS_DIR / "triton" / "evidence.json").read_text())
    (tmp_path / "triton" / "evidence.json").write_text(json.dumps({"softmax": evidence["softmax"]}))
    with pytest.raises(SeedError, match="changed since it was verified on a GPU"):
        seed_entries(tmp_path)


def test_seeding_is_idempotent_and_automatic_on_first_use(kb_location):
    kb = open_knowledge_base(kb_location)
    n_seeds = len(seed_entries())
    assert kb.kernel_count() == n_seeds
    assert len(kb.guidance()) == len(shipped_notes())
    again = seed_knowledge_base(kb)
    assert again.added == [] and len(again.unchanged) == n_seeds
    assert kb.kernel_count() == n_seeds


def test_rms_norm_backward_request_finds_the_rmsnorm_backward_seed_first(kb_location):
    kb = open_knowledge_base(kb_location)
    top = search_kernels(kb, "rms norm backward triton h100", n=3)
    assert top[0].entry.problem == "rmsnorm_backward"
    for text, problem in [("layer norm forward", "layernorm_forward"), ("softmax rows", "softmax"),
                          ("embedding gradient", "embedding_backward"), ("gemm bias gelu", "gemm_bias_gelu"),
                          ("cross entropy forward", "cross_entropy_forward"),
                          ("mean cross entropy loss", "cross_entropy_mean"), ("cumulative sum", "cumsum"),
                          ("row sum", "row_sum"), ("rotary position embedding", "rope_forward")]:
        assert search_kernels(kb, text, n=1)[0].entry.problem == problem, text
