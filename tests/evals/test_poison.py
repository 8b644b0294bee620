"""Poisoned memory: unwritten output elements are counted exactly, and nothing leaks out of the block."""

import pytest
import torch

from kgen.evals.poison import fill_poison, poisoned_allocations, poisoned_count


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
