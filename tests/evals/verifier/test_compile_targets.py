"""Per-target compilation: a kernel that does not fit one GPU is rejected for that GPU only.

A search for H100 and L40S makes each candidate for one target and learns which
others it fits (``EvalOptions.also_compile_for``). A GEMM whose pipelined tiles
need 144 KB of shared memory per block launches on H100 (227 KB) and A100 (163 KB)
but not on L40S (99 KB): compiling without the GPU does not notice, so kgen checks
the compiled kernel's shared memory against the target's limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kgen
from kgen.agent.search.mutation import apply_values
from kgen.backends.targets import resolve_target
from kgen.backends.triton.cross_compile import shared_limit_bytes, shared_overflow
from kgen.knowledge_base import SEED_KERNELS_DIR

# one test process runs the module: one deep-pipeline GEMM for the module
pytestmark = pytest.mark.xdist_group("compile_targets")

QUICK = {"device": "cpu", "distributions": False, "n_seeds": 1}


@pytest.fixture(scope="module")
def deep_pipeline_gemm(tmp_path_factory) -> Path:
    seed = (SEED_KERNELS_DIR / "triton" / "gemm_bias_gelu.py").read_text()
    path = tmp_path_factory.mktemp("gemm") / "gemm_stages4.py"
    path.write_text(apply_values(seed, {"num_stages@_gemm_bias_gelu": 4}, resolve_target("h100")))
    return path


def test_shared_memory_limits_per_block():
    assert shared_limit_bytes(resolve_target("h100")) == 227 * 1024
    assert shared_limit_bytes(resolve_target("a100")) == 163 * 1024
    assert shared_limit_bytes(resolve_target("mi300x")) == 64 * 1024
    assert shared_overflow(227 * 1024, resolve_target("h100")) is None
    assert "needs 228 KB" in shared_overflow(228 * 1024, resolve_target("h100"))
    assert shared_overflow(None, resolve_target("h100")) is None


def test_an_overflow_on_another_target_is_recorded_not_a_rejection(deep_pipeline_gemm):
    result = kgen.evaluate("gemm_bias_gelu", deep_pipeline_gemm, targets=["h100"],
                           also_compile_for=["a100", "l40s"], **QUICK)
    assert result.passed, result.reason
    assert (result.compiles_for("h100"), result.compiles_for("a100"), result.compiles_for("l40s")) == (
        True, True, False)
    assert result.compiles_for("mi300x") is None  # never compiled for it
    compile_stage = next(s for s in result.stages if s.name == "compile")
    assert "does not compile for l40s" in compile_stage.message and "shared memory" in compile_stage.message

    for_l40s = kgen.evaluate("gemm_bias_gelu", deep_pipeline_gemm, targets=["l40s"], **QUICK)
    assert for_l40s.rejection.value == "compile_error"
    assert "out of resources" in for_l40s.reason and "l40s" in for_l40s.reason
