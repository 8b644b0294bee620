"""A time under the speed-of-light floor is measured again before it rejects: the decision,
on fake measurements (the re-measurement is a callable the timing stage supplies)."""

import pytest
import torch

from kgen.backends.targets import resolve_target
from kgen.evals.timing.floor_recheck import floor_limit_ms, recheck_floor
from kgen.evals.timing.sol import speed_of_light

#: 1 GB on an H100's vendor bandwidth: a floor of about 0.3 ms
SOL = speed_of_light(10**9, None, resolve_target("H100"), torch.float32)


def _never():
    raise AssertionError("a possible time is not measured again")


def test_a_possible_time_is_not_measured_again():
    assert recheck_floor(SOL, 2 * SOL.floor_ms, _never) is None
    assert recheck_floor(SOL, floor_limit_ms(SOL) * 1.01, _never) is None


def test_a_time_under_the_floor_that_was_the_l2s_doing_is_kept_with_both_measurements():
    calls = []

    def remeasure():
        calls.append(1)
        return 1.2 * SOL.floor_ms, "persisting lines reset; persisting limit set to 0"

    first = 0.1 * SOL.floor_ms
    recheck = recheck_floor(SOL, first, remeasure)
    assert calls == [1] and not recheck.impossible
    assert recheck.first_ms == first and recheck.remeasured_ms == pytest.approx(1.2 * SOL.floor_ms)
    text = recheck.describe()
    assert "first measured" in text and "re-measured" in text and "persisting lines reset" in text
    assert "discarded" in text


def test_a_time_still_under_the_floor_after_the_reset_is_impossible():
    recheck = recheck_floor(SOL, 0.1 * SOL.floor_ms, lambda: (0.2 * SOL.floor_ms, "persisting L2 not reset; no CUDA runtime"))
    assert recheck.impossible and "impossible" in recheck.describe()
    assert recheck.limit_ms == pytest.approx(0.9 * min(SOL.floor_ms, SOL.vendor_floor_ms))
