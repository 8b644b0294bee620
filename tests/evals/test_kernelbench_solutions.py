"""kgen's own Triton solutions for unmodified KernelBench level-1 files pass on the CPU.

The same files are verified and timed at full size on a GPU by
``scripts/kernelbench_full_size.py`` (figures in docs/benchmarks.md); here they run at
the CPU's small sizes, which still cover odd row lengths and the size perturbations.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOLUTIONS = sorted((FIXTURES / "kernelbench_solutions").glob("level*_*.py"))


def _problem(solution: Path) -> Path:
    level, name = solution.stem.split("_", 1)
    return FIXTURES / "kernelbench" / level / f"{name}.py"


def test_ten_solutions_each_for_a_real_problem():
    assert len(SOLUTIONS) >= 10
    assert all(_problem(s).is_file() for s in SOLUTIONS)


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_solution_passes_on_the_cpu(solution):
    result = evaluate(_problem(solution), solution, EvalOptions(device="cpu", n_seeds=2, timeout_s=240))
    assert result.verdict is Verdict.PASSED, result.reason
