"""The pattern of a numerical mismatch (evals/checks/error_shape.py) and the mismatch text (evals/checks/compare.py)."""

from __future__ import annotations

import pytest
import torch

from kgen.evals.checks.compare import compare_output, failure_of, outside_tolerance
from kgen.evals.checks.error_shape import (
    error_pattern,
    passed_before,
    precision_advice,
    product_operands,
    reference_from_rounded,
    round_to,
)
from kgen.evals.verdict import Trial


@pytest.fixture
def ref() -> torch.Tensor:
    return torch.randn(64, 96, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def _pattern(out: torch.Tensor, ref: torch.Tensor, **rounded: torch.Tensor) -> str:
    return " | ".join(error_pattern(out, ref, outside_tolerance(out, ref), rounded))


def test_a_masked_tail_is_named_by_its_columns(ref):
    out = ref.float().clone()
    out[:, 90:] = 0.0
    text = _pattern(out, ref)
    assert "last 6 of 96 columns" in text and "masked tail" in text


def test_a_missing_per_channel_term_is_named_by_its_axis(ref):
    bias = torch.randn(96, dtype=torch.float64)
    text = _pattern((ref - bias).float(), ref)
    assert "varies only along dim 1" in text and "bias" in text


def test_a_scale_and_a_constant_offset_are_named(ref):
    assert "scaled by 0.5" in _pattern((ref * 0.5).float(), ref)
    assert "off by a constant 0.25" in _pattern((ref + 0.25).float(), ref)
    assert "all zeros" in _pattern(torch.zeros(64, 96), ref)


def test_some_rows_wrong_are_counted(ref):
    out = ref.float().clone()
    out[10:13] += 1.0 + torch.rand(3, 96)  # not a pure per-row constant over the whole tensor
    text = _pattern(out, ref)
    assert "3 of 64 rows" in text and "rows 10..12" in text


def test_an_error_everywhere_without_structure_names_no_pattern(ref):
    noise = torch.randn(64, 96, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    assert _pattern((ref + 0.3 * noise).float(), ref) == ""


def test_tf32_rounding_is_recognised_by_its_shape_not_its_size():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 256, generator=g, dtype=torch.float64)
    b = torch.randn(256, 48, generator=g, dtype=torch.float64)
    exact = a @ b
    tf32 = round_to(a, "tf32") @ round_to(b, "tf32")
    bf16 = round_to(a, "bf16") @ round_to(b, "bf16")
    text = _pattern(tf32.float(), exact, tf32=tf32, bf16=bf16)
    assert "shape of TF32 rounding" in text
    assert "shape of BF16 rounding" in _pattern(bf16.float(), exact, tf32=tf32, bf16=bf16)
    # Same size of error, other shape: an honest fp32 kernel with a different bug is not called TF32.
    noise = torch.randn(exact.shape, generator=g, dtype=torch.float64)
    same_size = exact + noise * (tf32 - exact).norm() / noise.norm()
    assert "TF32" not in _pattern(same_size.float(), exact, tf32=tf32)


def test_round_to_tf32_keeps_ten_mantissa_bits_by_dropping_the_rest():
    x = torch.tensor([1.0 + 2**-10, 1.0 + 2**-11, 1.0 + 3 * 2**-11, -(1.0 + 2**-12), float("inf")], dtype=torch.float32)
    got = round_to(x, "tf32")
    assert got.tolist()[:4] == [1.0 + 2**-10, 1.0, 1.0 + 2**-10, -1.0]
    assert got[4] == float("inf")


class _ConvPlusBias(torch.nn.Module):
    def __init__(self, channels: int, out: int, k: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, out, k, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(out, 1, 1))

    def forward(self, x):
        return self.conv(x) + self.bias


def test_the_operands_a_product_reads_are_judged_at_the_problems_own_sizes():
    """At a size set of all ones a convolution's weight is (1, 1, 1, 1) and its input a single
    value: by shape they look like biases, yet a TF32 kernel still rounds them."""
    torch.manual_seed(0)
    assert product_operands(_ConvPlusBias(4, 8, 3), [torch.randn(2, 4, 8, 8), 3]).inputs == (True, False)
    roles = product_operands(_ConvPlusBias(4, 8, 3), [torch.randn(2, 4, 8, 8)])
    assert roles.inputs == (True,) and roles.weights == {"conv.weight"}
    tiny = _ConvPlusBias(1, 1, 1)
    x = torch.tensor([[[[1.0 + 2**-12]]]])
    with torch.no_grad():
        tiny.conv.weight.fill_(1.0 + 3 * 2**-12)
        tiny.bias.fill_(2**-13 + 2**-20)
    exact = float(x) * float(tiny.conv.weight) + float(tiny.bias)
    # by shape alone nothing is rounded here; with the roles the weight and the input are, the bias is not
    assert reference_from_rounded(tiny, [x], "tf32", torch.device("cpu"))[0].item() == pytest.approx(exact, abs=0)
    rounded = reference_from_rounded(tiny, [x], "tf32", torch.device("cpu"), roles)[0].item()
    assert rounded == 1.0 * 1.0 + float(tiny.bias)  # TF32 keeps 10 mantissa bits of each operand


def test_precision_advice_names_the_policy_and_the_flag():
    tf32 = ["the error has the shape of TF32 rounding: ..."]
    advice = precision_advice(tf32, "ieee")
    assert "input_precision" in advice and "--precision tf32" in advice
    assert "beyond even the tf32" in precision_advice(tf32, "tf32")
    assert "narrower format" in precision_advice(["the error has the shape of BF16 rounding"], "ieee")
    assert precision_advice(["the output is off by a constant 1"], "ieee") is None


def test_passed_before_summarises_the_trials_that_passed():
    trials = [
        Trial(seed=1, sizes={"n": 4}, distribution="normal", passed=True),
        Trial(seed=1, sizes={"n": 4}, distribution="large", passed=True),
        Trial(seed=1, sizes={"n": 5}, distribution="normal", passed=False),
    ]
    text = passed_before(trials)
    assert "2 trial(s)" in text and "(the problem's own inputs, large)" in text and "1 size set(s)" in text
    assert "first trial" in passed_before([])


def test_mismatch_text_agrees_with_itself(ref):
    # A systematic error under the rel-L2 bound per element, over it in norm: no "0.00% outside".
    systematic = failure_of([compare_output(0, (ref * (1 + 3e-4)).float(), ref)])
    assert "3x the tolerance" in str(systematic)
    assert "every one of the 6144 elements within the elementwise bound" in str(systematic)
    assert "0.00%" not in str(systematic)
    # A handful of bad elements: counted, not rounded away.
    out = ref.float().clone()
    out[0, 0] += 100.0
    few = str(failure_of([compare_output(0, out, ref)]))
    assert "1 of 6144 elements" in few and "(0.016%)" in few
