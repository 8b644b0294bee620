"""Poisoned memory: unwritten output elements are counted exactly, and nothing leaks out of the block."""

import pytest
import torch

from kgen.evals.checks.poison import fill_poison, poisoned_allocations, poisoned_count


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32])
def test_poison_is_recognised_until_overwritten(dtype):
    t = fill_poison(torch.empty(4, 6, dtype=dtype))
    assert poisoned_count(t) == 24
    t[1, :3] = 2
    assert poisoned_count(t) == 21


def test_real_values_and_ordinary_nans_are_not_poison():
    t = torch.tensor([0.0, 1.0, float("nan"), float("inf")])
    assert poisoned_count(t) == 0


def test_allocations_are_poisoned_only_inside_the_block():
    original = torch.empty
    with poisoned_allocations():
        inside = torch.empty_like(torch.ones(8))
        method = torch.ones(3).new_empty(5)
        strided = torch.empty_strided((2, 2), (2, 1))
    assert poisoned_count(inside) == 8 and poisoned_count(method) == 5 and poisoned_count(strided) == 4
    assert torch.empty is original


def test_poisoning_is_invisible_from_python_names():
    """The poison lives in the dispatcher: torch.empty is the very same builtin inside the block,
    so a candidate cannot tell a watched call by looking at what it calls."""
    names = (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty)
    with poisoned_allocations():
        assert (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty) == names
        assert type(torch.empty).__name__ == "builtin_function_or_method"


def test_guard_zones_catch_a_write_past_the_end_and_only_that():
    with poisoned_allocations() as log:
        exact = torch.empty(100)
        overrun = torch.empty(10, 10)
        intermediate = torch.empty(37, dtype=torch.bfloat16)
    exact.fill_(1.0)
    # what an unmasked tail store does: write through the storage past the last element
    flat = torch.empty(0).set_(overrun.untyped_storage(), 0, (103,), (1,))
    flat.fill_(2.0)
    intermediate.zero_()
    found = log.overruns()
    assert [(t.shape, n) for t, n in found] == [(torch.Size([10, 10]), 12)]
    assert exact.untyped_storage().nbytes() > 400  # the canary sits in the same storage, after the data
    assert torch.equal(exact, torch.ones(100))
