"""One rejection name per failure (``evals/verifier/failure_order.py``), end to end on the CPU.

Each planted-wrong kernel, in its own style, is verified at several seeds, and must be named
the same at every one: the name follows the stated order of checks, not the seed or which trial
happened to fail first. A kernel wrong on the baseline (the problem's own inputs, and N(0, 1)
inputs where those are of one sign) is ``numerical_mismatch``; a class that claims a cause is
given only where its premise holds. Correct kernels still pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import RejectionClass, Verdict

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"
MESSAGES = FIXTURES / "messages"
KB_RELU = FIXTURES / "kernelbench" / "level1" / "19_ReLU.py"  # torch.rand: all positive
RANDN_RELU = FIXTURES / "problems" / "relu_kernelbench.py"  # torch.randn
SEEDS = (3, 101, 20261127)

#: (id, problem, candidate, options): wrong kernels in different styles
WRONG = [
    # right on every positive input: KernelBench's own inputs never show it a negative one
    ("abs_for_relu_on_rand", KB_RELU, CANDIDATES / "relu_computes_abs.py", {}),
    # the same, with the distributions off: the call sequence's changed-input call finds it
    ("abs_for_relu_no_distributions", KB_RELU, CANDIDATES / "relu_computes_abs.py", {"distributions": False}),
    # a wrong constant: leaky slope 0.01 instead of 0
    ("leaky_for_relu", RANDN_RELU, CANDIDATES / "relu_wrong_math.py", {}),
    # a missing bias
    ("linear_without_bias", MESSAGES / "linear_kb.py", MESSAGES / "linear_bias_dropped.py", {}),
    # a kernel for another operation: ReLU against softmax (nothing passes before it)
    ("relu_for_softmax", "softmax", CANDIDATES / "relu_kernelbench_solution.py", {}),
]


def _verify(problem, candidate: Path, seed: int, **options):
    return evaluate(problem, candidate, EvalOptions(device="cpu", seeds=[seed], timeout_s=240, **options))


@pytest.mark.parametrize(("problem", "candidate", "options"), [w[1:] for w in WRONG], ids=[w[0] for w in WRONG])
def test_a_wrong_kernel_gets_one_name_at_every_seed(problem, candidate, options):
    results = {seed: _verify(problem, candidate, seed, **options) for seed in SEEDS}
    names = {seed: r.rejection for seed, r in results.items()}
    assert set(names.values()) == {RejectionClass.MISMATCH}, {s: (r.rejection, r.reason) for s, r in results.items()}
    for result in results.values():  # a diagnosis is a hint in the words, never a number that is no number
        assert "inf" not in result.reason.replace("info", ""), result.reason


def test_abs_for_relu_is_caught_on_standard_normal_inputs_right_after_the_problems_own():
    result = _verify(KB_RELU, CANDIDATES / "relu_computes_abs.py", SEEDS[0])
    first_failed = next(i for i, t in enumerate(result.trials) if not t.passed)
    assert result.trials[first_failed].distribution == "standard_normal"
    assert {t.distribution for t in result.trials[:first_failed]} == {"normal"}  # nothing else ran before it
    assert "the problem's own inputs" in result.reason and "standard-normal N(0, 1) inputs" in result.reason


@pytest.mark.parametrize(("problem", "candidate"), [
    (KB_RELU, CANDIDATES / "relu_kernelbench_solution.py"),
    (RANDN_RELU, CANDIDATES / "relu_kernelbench_solution.py"),
], ids=["relu_on_rand", "relu_on_randn"])
def test_a_correct_kernel_still_passes(problem, candidate):
    result = _verify(problem, candidate, SEEDS[1])
    assert result.verdict is Verdict.PASSED, result.reason
