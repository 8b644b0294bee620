"""Scans for KernelBench level 1 judged on the CPU within the time limit, and still judged right.

A scan walks each row in sequence, which the Triton interpreter runs one step at a time; at
the CPU size plan (``evals/problem/size_sets.py``: batch-like constants give way first, the
sets past each default keep the long rows and the many rows) a correct one must get a verdict
in well under the limit, and the planted-bad ones (tests/fixtures/scans) must still be rejected.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCANS = sorted((FIXTURES / "scans").glob("*.py"))
#: well under kgen's default 300 s: a scan the plan sizes right ends long before it
TIME_LIMIT_S = 150


def _declared(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text())
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.startswith("KGEN_SCAN_") and isinstance(node.value, ast.Constant)
    }


def test_the_scans_hold_correct_and_planted_bad_ones_in_several_styles():
    expects = [_declared(p)["KGEN_SCAN_EXPECT"] for p in SCANS]
    assert expects.count("passed") >= 3 and expects.count("rejected") >= 5
    assert {_declared(p)["KGEN_SCAN_PROBLEM"] for p in SCANS} == {"89_cumsum", "90_cumprod"}


@pytest.mark.parametrize("candidate", SCANS, ids=lambda p: p.stem)
def test_scan_is_judged_within_the_cpu_time_limit(candidate):
    declared = _declared(candidate)
    problem = FIXTURES / "kernelbench" / "level1" / f"{declared['KGEN_SCAN_PROBLEM']}.py"
    result = evaluate(problem, candidate, EvalOptions(device="cpu", n_seeds=2, timeout_s=TIME_LIMIT_S))
    assert result.verdict is Verdict(declared["KGEN_SCAN_EXPECT"]), f"{result.outcome}: {result.reason}"
