"""`kgen.train_check.in_model`: the rule that keeps a group only where it wins in the compiled step
(on measured times: faster than stock by more than the noise and at least 1%, and the better of two
groups replacing the same code), and the decision's report."""

import pytest

from kgen.train_check.in_model import MIN_GAIN, InModelDecision, judge
from kgen.train_check.model import SIZES


def _rows(first: float, second: float, seconds: dict[str, float]) -> dict[str, tuple[str, str]]:
    _, _, rows = judge(first, second, seconds)
    return {row.group: (row.serves, row.why) for row in rows}


def test_a_group_that_makes_the_step_faster_serves_and_one_that_slows_it_does_not():
    rows = _rows(0.100, 0.1002, {"swiglu": 0.095, "rmsnorm": 0.104})
    assert rows["swiglu"][0] == "kgen" and "5.0% faster" in rows["swiglu"][1]
    assert rows["rmsnorm"][0] == "inductor" and "4.0% slower" in rows["rmsnorm"][1]


@pytest.mark.parametrize(("first", "second", "with_group"), [
    (0.100, 0.100, 0.100 * (1 - MIN_GAIN / 2)),  # quiet stock: under the 1% a swap must win
    (0.100, 0.105, 0.097),  # 3% faster, but stock itself moved 5% between its two timings
])
def test_a_gain_within_the_noise_or_under_the_minimum_keeps_the_compilers_code(first, second, with_group):
    serves, why = _rows(first, second, {"embedding_backward": with_group})["embedding_backward"]
    assert serves == "inductor" and "less than the" in why


def test_of_two_groups_replacing_the_same_code_the_faster_serves():
    rows = _rows(0.100, 0.100, {"cross_entropy": 0.097, "fused_linear_cross_entropy": 0.090})
    assert rows["fused_linear_cross_entropy"][0] == "kgen"
    assert rows["cross_entropy"] == ("inductor", "fused_linear_cross_entropy replaces the same code and wins more "
                                                 "(-10.0%)")


def test_the_decision_reports_what_serves_each_group():
    stock, noise, rows = judge(0.100, 0.101, {"swiglu": 0.090, "rmsnorm": 0.110})
    decision = InModelDecision(size=SIZES["100m"], layers_timed=2, device="cuda", backend="inductor", steps=12,
                               stock_seconds=stock, noise=noise, rows=rows)
    assert decision.kept == ["swiglu"]
    assert "| swiglu |" in decision.markdown() and "| kgen |" in decision.markdown()
    assert "rmsnorm" in decision.text() and "inductor" in decision.text()
    assert InModelDecision.model_validate_json(decision.model_dump_json()).kept == ["swiglu"]
