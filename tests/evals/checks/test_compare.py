"""Comparison with the fp64 reference: tolerances mean what the docstring says."""

import pytest
import torch

from kgen.evals.checks.compare import ComparisonFailure, check_structure, compare_output, failure_of
from kgen.evals.verdict import RejectionClass


def _ref(n=4096, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g, dtype=torch.float64)


def test_bf16_rounding_of_the_true_value_passes():
    ref = _ref()
    assert compare_output(0, ref.to(torch.bfloat16), ref).passed


def test_fp32_output_computed_in_bf16_fails():
    ref = _ref()
    out = ref.to(torch.bfloat16).to(torch.float32)
    result = compare_output(0, out, ref)
    assert not result.passed and result.rel_l2_error > result.tolerance_rel_l2


def test_one_wrong_element_fails_although_the_norm_barely_moves():
    ref = _ref(100_000)
    out = ref.to(torch.float32).clone()
    out[12345] += 0.02
    result = compare_output(0, out, ref)
    assert result.rel_l2_error < result.tolerance_rel_l2
    assert not result.passed and result.worst_index == [12345]


def test_nan_never_passes():
    ref = _ref()
    out = ref.to(torch.bfloat16)
    out[7] = float("nan")
    result = compare_output(0, out, ref)
    failure = failure_of([result])
    assert failure is not None and failure.rejection is RejectionClass.NAN_OR_INF


def test_structure_checks_count_shape_dtype_and_type():
    ref = [torch.zeros(2, 3, dtype=torch.bfloat16)]
    with pytest.raises(ComparisonFailure, match="returned 2 output"):
        check_structure([ref[0], ref[0]], ref)
    with pytest.raises(ComparisonFailure, match="dtype float32, expected bfloat16"):
        check_structure([torch.zeros(2, 3)], ref)
    with pytest.raises(ComparisonFailure, match="not a plain torch.Tensor"):
        check_structure([[1.0]], ref)


def test_a_reference_compared_twice_is_judged_the_same_and_a_changed_one_afresh():
    """The reference's RMS is kept per tensor (two calls are compared with one reference);
    an in-place change of that tensor, or another tensor at the same address, is measured again."""
    from kgen.evals.checks.compare import compare_output

    torch.manual_seed(0)
    ref = torch.randn(5000, dtype=torch.float64)
    out = (ref * (1 + 1e-6)).float()
    first, again = compare_output(0, out, ref), compare_output(0, out, ref)
    assert first == again and first.passed
    ref.mul_(1000.0)  # the same tensor, new values: the tolerance's absolute part must follow
    changed = compare_output(0, out, ref)
    fresh = compare_output(0, out, ref.clone())
    assert changed == fresh and not changed.passed
    del ref, changed
    other = torch.zeros(5000, dtype=torch.float64)  # may reuse the freed tensor's id
    assert compare_output(0, torch.zeros(5000), other).passed


def _structure_failure(out, ref):
    with pytest.raises(ComparisonFailure) as info:
        check_structure([out], [ref])
    assert info.value.rejection is RejectionClass.WRONG_OUTPUT_STRUCTURE
    return str(info.value)


def test_outputs_that_are_not_plain_dense_tensors_are_the_wrong_structure():
    ref = torch.randn(8, 6)
    assert "sparse" in _structure_failure(ref.to_sparse(), ref)
    assert "meta" in _structure_failure(torch.empty(8, 6, device="meta"), ref)
    assert "Parameter" in _structure_failure(torch.nn.Parameter(ref.clone(), requires_grad=False), ref)
    assert "overlapping" in _structure_failure(ref[:1].clone().expand(8, 6), ref)


def test_a_subclass_is_judged_without_running_its_methods():
    calls = []

    class Watching(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    ref = torch.randn(4, 4)
    out = ref.clone().as_subclass(Watching)
    calls.clear()
    _structure_failure(out, ref)
    assert calls == []


def test_plain_views_of_a_fresh_buffer_and_an_overlapping_reference_pass_the_structure_check():
    buf = torch.randn(48)
    ref = torch.randn(8, 6)
    check_structure([buf.view(8, 6)], [ref])
    check_structure([buf.as_strided((8, 6), (6, 1))], [ref])
    check_structure([buf.view(6, 8).t()], [ref])  # column-major is dense too
    row = torch.randn(1, 6)
    check_structure([row.expand(8, 6)], [row.expand(8, 6)])  # the reference broadcasts as well


@pytest.mark.parametrize("shape", [(8,), (4, 6), (2, 3, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_zero_reference_is_said_in_words_not_as_an_infinite_ratio(shape, dtype):
    """A reference that is zero everywhere (ReLU of all-negative inputs) has no relative error:
    the message says so, with the largest difference, never "inf" or "infx the tolerance"."""
    out = torch.full(shape, 0.75, dtype=dtype)
    failure = failure_of([compare_output(0, out, torch.zeros(shape, dtype=torch.float64))])
    assert failure is not None and failure.rejection is RejectionClass.MISMATCH
    text = str(failure)
    assert "inf" not in text, text
    assert "the reference is zero everywhere here" in text and "|diff| 0.75" in text
