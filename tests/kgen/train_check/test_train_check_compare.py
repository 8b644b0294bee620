"""`kgen.train_check.compare`: the band and the drift rule on made-up curves and parameters."""

import math

import torch

from kgen.train_check.compare import LOSS_FLOOR, module_drift, noise_band, steps_outside


def test_band_is_the_running_maximum_widened_and_floored() -> None:
    band = noise_band([1.0, 1.0, 1.0], [1.0, 1.01, 1.002], factor=2.0)
    assert band.noise == [0.0, 0.010000000000000009, 0.010000000000000009]
    assert band.allowed[0] == LOSS_FLOOR and math.isclose(band.allowed[2], 0.02)


def test_steps_outside_counts_gaps_nans_and_missing_steps() -> None:
    band = noise_band([1.0, 1.0, 1.0, 1.0], [1.0, 1.01, 1.0, 1.0], factor=1.0)
    assert steps_outside(band, [1.0] * 4, [1.0, 1.005, 1.02]) == [2, 3]
    assert steps_outside(band, [1.0] * 4, [1.0, float("nan"), 1.0, 1.0]) == [1]


def test_drift_is_per_module_against_the_noise_run() -> None:
    ref = {"a.weight": torch.ones(4), "a.bias": torch.ones(2), "b.weight": torch.ones(4)}
    noise = {k: v * 1.01 for k, v in ref.items()}
    kernel = {"a.weight": torch.ones(4) * 1.02, "a.bias": torch.ones(2), "b.weight": torch.ones(4) * 1.5}
    rows = {r.module: r for r in module_drift(ref, noise, kernel, factor=3.0)}
    assert set(rows) == {"a", "b"}
    assert rows["a"].ok and not rows["b"].ok
    assert math.isclose(rows["b"].kernel, 0.5)
