"""The low-signal reading and the miss measure of ``evals/verifier/input_sensitivity.py``."""

import torch

from kgen.evals.verifier.input_sensitivity import MAX_CANDIDATE_MISS, miss, signal_readings


def test_near_constant_ratio_is_low_signal_and_a_varying_output_is_not():
    a, b = torch.full((1,), 0.99994, dtype=torch.float64), torch.full((1,), 0.99995, dtype=torch.float64)
    low = signal_readings([a], [b], [a.float()])[0]
    assert low.low_signal and low.change < 1e-4
    x, y = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    assert not signal_readings([x], [y], [x.float()])[0].low_signal


def test_integer_outputs_and_mismatched_shapes_are_not_read():
    ids = torch.arange(4)
    assert signal_readings([ids.double()], [ids.double()], [ids]) == []
    assert signal_readings([torch.zeros(2)], [torch.zeros(3)], [torch.zeros(2)]) == []


def test_a_constant_misses_the_whole_change_and_a_follower_misses_little():
    d_ref = torch.tensor([1e-5], dtype=torch.float64)
    assert miss(torch.zeros(1), d_ref) == 1.0 > MAX_CANDIDATE_MISS
    assert miss(torch.tensor([1.1e-5]), d_ref) < MAX_CANDIDATE_MISS
