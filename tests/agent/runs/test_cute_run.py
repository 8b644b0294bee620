"""The agent on a CuTe DSL request, offline on a CPU: the request picks the CuTe backend, the
knowledge base's CuTe kernel for the problem is the starting point, the offline search retunes
its module-level knobs, and every candidate ends "compiled, not run" (CuTe kernels need a GPU),
so the run names no verified kernel and says why.

Two starting points: a fixture entry (a softcap kernel with three knobs) and the shipped,
GPU-verified CuTe seeds that seed a fresh knowledge base (the issue's own request)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kgen
from kgen.evals.result import EvalResult
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.schema import (
    KernelEntry,
    Provenance,
    VerificationSummary,
    kernel_id,
    target_family,
)
from kgen.knowledge_base.seeding import open_knowledge_base
from kgen.knowledge_base.write_back import record_kernel

SOFTCAP = Path(__file__).resolve().parents[2] / "fixtures" / "candidates" / "cute" / "softcap_direct_jit.py"


def _kb_with_a_cute_softcap(location: Path) -> None:
    kb = open_knowledge_base(str(location))
    source = SOFTCAP.read_text()
    code_hash = normalised_code_hash(source)
    record_kernel(kb, KernelEntry(
        id=kernel_id(code_hash, "softcap", "cute", "h100", "bfloat16"), source=source,
        spec_text="softcap; logit softcap cap * tanh(x / cap)", problem="softcap", operation="softcap",
        backend="cute", target="h100", target_family=target_family("h100"), dtype="bfloat16",
        evidence=VerificationSummary(device="cuda", checks_passed=["static", "load", "correctness", "compile"],
                                     compiled_for=["h100"]),
        provenance=Provenance(model="test-fixture"), code_hash=code_hash,
    ), starting_point=True)  # compiled, never timed: the search's only starting point


@pytest.mark.slow
def test_a_cute_request_offline_on_a_cpu_retunes_the_known_cute_kernel_and_runs_nothing(tmp_path):
    _kb_with_a_cute_softcap(tmp_path / "kb")
    lines: list[str] = []
    summary = kgen.generate("CuTe softcap for H100", models=[], budget=3, device="cpu", out=tmp_path / "run",
                            kb=str(tmp_path / "kb"), progress=lines.append)
    spec = json.loads((tmp_path / "run" / "spec.json").read_text())
    assert (spec["backend"], spec["problem"], spec["targets"]) == ("cute", "softcap", ["h100"])
    assert summary.best == {}  # nothing ran, so nothing is verified
    folders = sorted((tmp_path / "run" / "candidates").iterdir())
    assert len(folders) == 3
    results = [EvalResult.model_validate_json((f / "eval.json").read_text()) for f in folders]
    assert all(r.outcome == "compiled, not run" and r.compiles_for("h100") for r in results), \
        [r.reason for r in results]
    sources = [(f / f"{f.name}.py").read_text() for f in folders]
    assert sources[0] == SOFTCAP.read_text()  # generation 0: the known kernel, re-measured
    assert any("THREADS = " in s and s != sources[0] for s in sources[1:])  # its knob retuned
    assert any("compiled, not run" in line and "need a GPU" in line for line in lines), lines[-5:]


@pytest.mark.slow
def test_the_shipped_cute_rmsnorm_backward_seed_is_the_offline_starting_point(tmp_path):
    from kgen.knowledge_base import SEED_KERNELS_DIR

    lines: list[str] = []
    summary = kgen.generate("CuTe RMSNorm backward for H100", models=[], budget=2, device="cpu",
                            out=tmp_path / "run", kb=str(tmp_path / "kb"), progress=lines.append)
    spec = json.loads((tmp_path / "run" / "spec.json").read_text())
    assert (spec["backend"], spec["problem"]) == ("cute", "rmsnorm_backward")
    assert summary.best == {}
    folders = sorted((tmp_path / "run" / "candidates").iterdir())
    assert len(folders) == 2
    sources = [(f / f"{f.name}.py").read_text() for f in folders]
    seed = (SEED_KERNELS_DIR / "cute" / "rmsnorm_backward.py").read_text()
    assert sources[0] == seed and sources[1] != seed  # the shipped seed, then one retuned knob
    results = [EvalResult.model_validate_json((f / "eval.json").read_text()) for f in folders]
    assert all(r.outcome == "compiled, not run" and r.compiles_for("h100") for r in results), \
        [r.reason for r in results]


def test_offline_without_a_verified_cute_kernel_points_at_a_seed_waiting_for_its_gpu_run(tmp_path, monkeypatch):
    import kgen.knowledge_base
    from kgen.api import KgenUsageError

    waiting = tmp_path / "unverified"
    (waiting / "cute").mkdir(parents=True)
    (waiting / "cute" / "gelu.py").write_text(SOFTCAP.read_text())
    monkeypatch.setattr(kgen.knowledge_base, "UNVERIFIED_SEEDS_DIR", waiting)
    with pytest.raises(KgenUsageError) as caught:
        kgen.generate("CuTe GELU for H100", models=[], device="cpu", out=tmp_path / "run",
                      kb=str(tmp_path / "kb"))
    text = str(caught.value)
    assert "no cute kernel for gelu" in text
    assert f"kgen eval gelu {waiting / 'cute' / 'gelu.py'}" in text
    assert "--backend cute --device cuda" in text


def test_offline_without_any_cute_kernel_for_the_problem_says_how_to_get_one(tmp_path):
    from kgen.api import KgenUsageError

    with pytest.raises(KgenUsageError) as caught:
        kgen.generate("CuTe GELU for H100", models=[], device="cpu", out=tmp_path / "run",
                      kb=str(tmp_path / "kb"))
    text = str(caught.value)
    assert "no cute kernel for gelu" in text and "configure a model" in text
    assert "waits for its GPU verification" not in text
