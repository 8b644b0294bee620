"""Every CuTe DSL seed kernel kgen ships, verified or waiting for its GPU run, gets through
`kgen eval` on the CPU: the static rules accept it, its forward's calls are watched, and every
kernel compiles for Hopper (and, recorded, Blackwell and Ampere). "Compiled, not run" is all a
CPU can say of CuTe code; a seed enters the knowledge base only with GPU evidence
(tests/knowledge_base/test_seeding.py)."""

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.verdict import InconclusiveCause
from kgen.knowledge_base import SEED_KERNELS_DIR, UNVERIFIED_SEEDS_DIR

SEEDS = sorted([*(SEED_KERNELS_DIR / "cute").glob("*.py"), *(UNVERIFIED_SEEDS_DIR / "cute").glob("*.py")])


def test_the_cute_seeds_cover_the_issue_list():
    assert {p.stem for p in SEEDS} >= {
        "swiglu", "softmax", "rmsnorm_forward", "rmsnorm_backward", "cross_entropy_forward", "gemm_bias_gelu"}


@pytest.mark.slow
@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_cute_seed_compiles_for_every_nvidia_generation_on_cpu(path):
    info = resolve_problem(path.stem)
    options = EvalOptions(device="cpu", backend="cute", targets=["h100"], also_compile_for=["b200", "a100"],
                          n_seeds=1, distributions=False, timeout_s=600)
    result = evaluate(info.name, path, options)
    assert result.inconclusive is InconclusiveCause.COMPILED_NOT_RUN, f"{path.name}: {result.outcome} {result.reason}"
    assert result.compiles_for("h100") is True, result.kernels
    # Hopper-only instructions (wgmma) have no sm_80 or sm_100 form: a failure there is recorded,
    # not fatal, and says why
    for other in ("b200", "a100"):
        assert result.compiles_for(other) is not None
        assert all(k.ok or k.error for k in result.kernels if k.target == other)
