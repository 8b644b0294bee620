"""The trials with an argument other than a size varied (evals/verifier/argument_trials.py):
what a rejection names, what the report records, and an argument the reference ignores."""

from __future__ import annotations

from pathlib import Path

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import RejectionClass

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CPU = EvalOptions(device="cpu", n_seeds=2, timeout_s=240, distributions=False)


def test_a_hardcoded_slope_is_named_with_its_default_and_the_value_that_exposed_it():
    result = evaluate(FIXTURES / "problems" / "rt4_leaky_relu.py",
                      FIXTURES / "candidates" / "rt4_args_leaky_literal.py", CPU)
    assert result.rejection is RejectionClass.HARDCODED_ARGUMENT
    assert "negative_slope=0.01" in result.reason and "negative_slope=0.1:" in result.reason
    failed = result.trials[-1]
    assert failed.arguments == {"negative_slope": 0.1} and not failed.passed
    assert all(t.arguments == {} for t in result.trials[:-1])


def test_an_argument_the_reference_ignores_is_skipped_and_recorded_not_held_against_the_kernel():
    result = evaluate(FIXTURES / "problems" / "rt4_unused_argument.py",
                      FIXTURES / "candidates" / "rt4_args_ctrl_unused_argument.py", CPU)
    assert result.passed, result.reason
    notes = [s for s in result.skipped if s.startswith("argument scale")]
    assert len(notes) == 2 and all("does not change beyond the tolerance" in n for n in notes)
    assert all(t.arguments == {} for t in result.trials)


def test_a_correct_kernel_records_every_varied_argument_it_was_judged_at():
    result = evaluate(FIXTURES / "problems" / "rt4_clamp_bounds.py",
                      FIXTURES / "candidates" / "rt4_args_ctrl_clamp_args.py", CPU)
    assert result.passed, result.reason
    varied = [t.arguments for t in result.trials if t.arguments]
    assert varied == [{"clamp_min": -5.0}, {"clamp_min": -0.05}, {"clamp_max": 15.0}, {"clamp_max": 0.15}]
    assert result.stage("correctness").evidence["arguments_varied"][0] == "clamp_min=-5.0 (default -0.5)"
