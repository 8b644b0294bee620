"""Every shipped seed kernel, and every one waiting for its GPU run, passes `kgen eval` on the CPU,
through the Triton interpreter."""

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.problem.catalog import resolve_problem
from kgen.knowledge_base import SEED_KERNELS_DIR, UNVERIFIED_SEEDS_DIR

SEEDS = sorted((SEED_KERNELS_DIR / "triton").glob("*.py"))
WAITING = sorted((UNVERIFIED_SEEDS_DIR / "triton").glob("*.py"))


def test_at_least_eight_seed_kernels_ship():
    assert len(SEEDS) >= 8


@pytest.mark.parametrize("path", [*SEEDS, *WAITING], ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_seed_kernel_passes_eval_on_cpu(path):
    info = resolve_problem(path.stem)
    result = evaluate(info.name, path, EvalOptions(device="cpu", n_seeds=2, timeout_s=240))
    assert result.passed, f"{path.name}: {result.rejection} {result.reason}"
    assert all(t.launches >= 1 for t in result.trials)
