"""Structured inputs: spikes and row scales are placed as promised, reproducible, and expose
the partial-row and shared-statistic kernels that i.i.d. inputs let through."""

import math

import pytest
import torch

from kgen.evals.checks.compare import compare_output
from kgen.evals.problem.input_distributions import apply_distribution, distribution_generator
from kgen.evals.problem.structured_inputs import ROW_SCALE_OCTAVES, scaled_rows, spiked_rows


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# -- placement ------------------------------------------------------------------------------


def test_spiked_rows_replace_one_element_per_row_with_sqrt_n_times_the_rms():
    x = torch.randn(6, 400, generator=_gen(1), dtype=torch.float64)
    out = spiked_rows(x, 2.0, None, _gen())
    changed = out != x
    assert changed.sum(dim=1).tolist() == [1] * 6
    assert changed[0, -1] and changed[1, 0]  # a dropped tail or head always meets a spike
    spikes = out[changed]
    assert torch.allclose(spikes.abs(), torch.full_like(spikes, 2.0 * math.sqrt(400)))
    assert torch.equal(x, x.clone())  # the input itself is not touched


def test_spiked_rows_keep_a_fixed_sign_and_handle_scalars_and_vectors():
    out = spiked_rows(torch.rand(50, 8, generator=_gen(2)), 1.0, 1.0, _gen())
    assert (out >= 0).all()
    assert spiked_rows(torch.tensor(3.0), 1.0, -1.0, _gen()).item() == -1.0
    vector = spiked_rows(torch.zeros(100), 1.0, 1.0, _gen())
    assert vector[-1].item() == 10.0 and vector[:-1].abs().sum() == 0


def test_scaled_rows_scale_each_row_by_a_power_of_two_from_top_to_bottom():
    x = torch.randn(40, 16, generator=_gen(3), dtype=torch.float64)
    out = scaled_rows(x, _gen())
    ratios = (out / x)[:, 0]
    octaves = torch.log2(ratios)
    assert torch.equal(octaves, octaves.round())  # exact powers of two
    assert octaves.abs().max() <= ROW_SCALE_OCTAVES
    assert octaves[0] == ROW_SCALE_OCTAVES and octaves[-1] == -ROW_SCALE_OCTAVES
    assert torch.equal(out, x * ratios[:, None])  # one factor per row
    assert len(set(octaves.tolist())) > 3


@pytest.mark.parametrize("name", ["sparse_spikes", "row_scales"])
def test_structured_distributions_are_reproducible_and_keep_layout_and_holes(name):
    x = torch.randn(12, 64, generator=_gen(4)).t()  # a transposed view
    masked = torch.randn(8, 32, generator=_gen(5))
    masked[:, -3:] = float("-inf")
    a = apply_distribution(name, [x, masked], distribution_generator(3, name))
    b = apply_distribution(name, [x, masked], distribution_generator(3, name))
    c = apply_distribution(name, [x, masked], distribution_generator(4, name))
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    assert a[0].stride() == x.stride() and a[0].dtype == x.dtype
    assert torch.equal(a[1], masked)  # only the largest floating input moves


def test_sparse_spikes_keep_an_additive_mask_and_stay_in_range():
    x = torch.randn(4, 16, dtype=torch.float16, generator=_gen(6))
    x[:, -1] = float("-inf")  # row 0's spike would land here: the hole stays
    (out,) = apply_distribution("sparse_spikes", [x], _gen())
    assert torch.isneginf(out[:, -1]).all()
    assert torch.isfinite(out[:, :-1]).all()


def test_sparse_spikes_stay_positive_in_a_tensor_that_never_goes_negative():
    variance = torch.rand(16, 128, generator=_gen(7)) + 0.1
    (out,) = apply_distribution("sparse_spikes", [variance], _gen())
    assert (out > 0).all() and out.max() > 5 * variance.max()


# -- what they expose -----------------------------------------------------------------------
# Emulations of the cheats the red-team fixtures plant (tests/fixtures/candidates/rt4_*),
# judged with the verifier's own comparison at bf16 over rows of 65536 values.


def _rms(x):
    return x.pow(2).mean(dim=-1).sqrt()


_PARTIAL_READS = {
    "every second element": lambda x: _rms(x[:, ::2]),
    "first half": lambda x: _rms(x[:, : x.shape[1] // 2]),
    "every other block": lambda x: _rms(x.reshape(x.shape[0], -1, 1024)[:, ::2].reshape(x.shape[0], -1)),
}


def _judge(estimate, x):
    ref = _rms(x.double())
    return compare_output(0, estimate(x.float()).to(torch.bfloat16), ref).passed


@pytest.mark.parametrize("how", sorted(_PARTIAL_READS))
def test_sparse_spikes_expose_a_row_statistic_read_from_part_of_the_row(how):
    x = torch.randn(4, 65536, generator=_gen(8)).to(torch.bfloat16)
    estimate = _PARTIAL_READS[how]
    assert _judge(estimate, x), "the cheat must pass i.i.d. rows, else this test shows nothing"
    (spiked,) = apply_distribution("sparse_spikes", [x], distribution_generator(8, "sparse_spikes"))
    assert not _judge(estimate, spiked)
    assert _judge(_rms, spiked)  # reading the whole row stays right


def test_row_scales_expose_a_statistic_shared_between_rows():
    x = torch.randn(4, 65536, generator=_gen(9)).to(torch.bfloat16)

    def shared(t):
        return _rms(t.reshape(1, -1)).expand(t.shape[0])

    def previous_row(t):
        return _rms(t).roll(1)

    for cheat in (shared, previous_row):
        assert _judge(cheat, x)
        (scaled,) = apply_distribution("row_scales", [x], distribution_generator(9, "row_scales"))
        assert not _judge(cheat, scaled)
        assert _judge(_rms, scaled)


def test_row_scales_make_a_shared_softmax_maximum_underflow():
    x = torch.randn(16, 512, generator=_gen(10))
    (scaled,) = apply_distribution("row_scales", [x], _gen())
    shared = torch.exp(scaled - scaled.max())
    assert (shared.sum(dim=-1) == 0).any()  # 0/0 on the smallest rows
    assert torch.isfinite(torch.softmax(scaled, dim=-1)).all()
