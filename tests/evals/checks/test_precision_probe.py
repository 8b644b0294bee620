"""Naming low-precision accumulation, checked on plain-torch emulations of bf16 accumulators.

bf16 accumulation is emulated by sequential adds that round to bf16 after
every step (``bf16 + bf16`` in torch computes in fp32 and rounds once). Not
``index_add_`` on a bf16 tensor: on the CPU it accumulates in fp32 inside and
rounds once, which is the *correct* kernel.
"""

import functools

import pytest
import torch

from kgen.evals.checks.compare import compare_output
from kgen.evals.checks.precision_probe import (
    ACCUMULATION_PROBES,
    classify_precision_failure,
    diagnose_precision,
    fits_low_precision_accumulation,
    narrower_rounding,
)
from kgen.evals.problem.input_distributions import apply_distribution, distribution_generator

BASELINES = ("normal", "uniform", "large", "small")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small tensors: thread start-up and contention cost more than the work on a busy CI box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- the rule ------------------------------------------------------------------------------


def test_right_on_normal_wrong_on_a_probe_fits():
    passes = {"normal", "uniform", "large", "small", "accumulation_probe"}
    assert fits_low_precision_accumulation({"zipf_ids": 3.2}, passes)
    assert classify_precision_failure is fits_low_precision_accumulation
    diagnosis = diagnose_precision({"zipf_ids": 3.2, "repeated_id": 40.0}, passes)
    assert diagnosis.fits and "repeated_id 40x" in diagnosis.message and "fp32" in diagnosis.message


def test_wrong_on_normal_too_fits_only_when_the_probe_is_much_worse():
    assert not fits_low_precision_accumulation({"normal": 2.0, "accumulation_probe": 3.0}, set())
    assert fits_low_precision_accumulation({"normal": 2.0, "accumulation_probe": 80.0}, set())


@pytest.mark.parametrize(
    ("failures", "passes"),
    [
        ({"large": 5.0}, {"normal"}),  # no probe failed: a range or softcap problem
        ({"accumulation_probe": 5.0}, {"uniform"}),  # normal never checked
        ({"accumulation_probe": float("inf")}, {"normal"}),  # NaN/Inf is not rounding
        ({"accumulation_probe": 9.0, "small": 8.0}, {"normal"}),  # small inputs fail as badly
    ],
)
def test_other_patterns_do_not_fit(failures, passes):
    assert not fits_low_precision_accumulation(failures, passes)


def test_ratios_of_passing_distributions_are_not_failures():
    ratios = {"normal": 0.4, "uniform": 0.5, "repeated_id": 12.0}
    assert fits_low_precision_accumulation(ratios, {"normal", "uniform"})


def test_growth_evidence_must_grow():
    failures, passes = {"repeated_id": 6.0}, {"normal"}
    assert diagnose_precision(failures, passes, growth=[(37, 1.5), (1000, 6.0)]).fits
    shrinking = diagnose_precision(failures, passes, growth=[(37, 6.0), (1000, 1.5)])
    assert not shrinking.fits and "does not grow" in shrinking.message


# -- emulations ----------------------------------------------------------------------------


def _running_row_sum(x: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    acc = torch.zeros(x.shape[0], dtype=acc_dtype)
    for j in range(x.shape[1]):
        acc = acc + x[:, j].to(acc_dtype)  # one rounding to acc_dtype per add
    return acc


def _sequential_index_add(grad: torch.Tensor, ids: torch.Tensor, rows: int, acc_dtype: torch.dtype):
    """grad_weight[ids[t]] += grad[t] in token order, rounding every partial sum to acc_dtype.

    Vectorised over the k-th occurrence of every id (different rows), so a hot id
    costs one step per contribution and the order within each row is kept.
    """
    order = torch.sort(ids, stable=True).indices
    sorted_ids = ids[order]
    counts = torch.bincount(ids, minlength=rows)
    starts = torch.cumsum(counts, 0) - counts
    occurrence = torch.empty_like(ids)
    occurrence[order] = torch.arange(ids.numel()) - starts[sorted_ids]
    out = torch.zeros(rows, grad.shape[1], dtype=acc_dtype)
    for k in range(int(counts.max())):
        tokens = (occurrence == k).nonzero().squeeze(1)
        out[ids[tokens]] = out[ids[tokens]] + grad[tokens].to(acc_dtype)
    return out


def _ratio_and_pass(out, ref):
    c = compare_output(0, out, ref)
    return c.rel_l2_error / c.tolerance_rel_l2, c.passed, c.rel_l2_error


@functools.cache
def _row_sum_results(acc_dtype, cols=4096):
    """Per distribution: (error ratio, passed, rel-L2) of a running row sum with a bf16 output."""
    x = torch.randn(32, cols, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    results = {}
    for name in (*BASELINES, "accumulation_probe"):
        (xd,) = apply_distribution(name, [x], distribution_generator(0, name))
        ref = xd.double().sum(dim=-1)
        results[name] = _ratio_and_pass(_running_row_sum(xd, acc_dtype).to(torch.bfloat16), ref)
    return results


@functools.cache
def _index_add_results(acc_dtype, out_dtype, n_tokens=2048, vocab=32000, dim=32):
    g = torch.Generator().manual_seed(1)
    grad = torch.randn(n_tokens, dim, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, vocab, (n_tokens,), generator=g)  # uniform ids: the verifier's old default
    results = {}
    for name in (*BASELINES, *ACCUMULATION_PROBES):
        gd, idd = apply_distribution(name, [grad, ids], distribution_generator(0, name))
        ref = torch.zeros(vocab, dim, dtype=torch.float64).index_add_(0, idd, gd.double())
        out = _sequential_index_add(gd, idd, vocab, acc_dtype).to(out_dtype)
        results[name] = _ratio_and_pass(out, ref)
    return results


def _classify(results):
    failures = {name: ratio for name, (ratio, passed, _) in results.items() if not passed}
    passes = {name for name, (_, passed, _) in results.items() if passed}
    return failures, passes


def test_the_emulation_is_not_torch_index_add():
    """Why the emulation exists: bf16 index_add_ on the CPU accumulates in fp32 inside."""
    grad = torch.full((4096, 1), 1.0 + 2**-7, dtype=torch.bfloat16)
    ids = torch.zeros(4096, dtype=torch.int64)
    exact = 4096 * (1.0 + 2**-7)
    torch_bf16 = torch.zeros(1, 1, dtype=torch.bfloat16).index_add_(0, ids, grad)
    emulated = _sequential_index_add(grad, ids, 1, torch.bfloat16)
    assert abs(torch_bf16.item() - exact) / exact < 1e-2
    assert abs(emulated.item() - exact) / exact > 0.5


def test_bf16_scatter_accumulation_passes_uniform_ids_and_is_named_on_zipf_ids():
    bf16 = _index_add_results(torch.bfloat16, torch.bfloat16)
    for name in (*BASELINES, "accumulation_probe"):
        assert bf16[name][1], (name, bf16[name])  # few contributions per row: within tolerance
    assert not bf16["zipf_ids"][1] and not bf16["repeated_id"][1]
    assert bf16["repeated_id"][0] > 3 * bf16["normal"][0]
    failures, passes = _classify(bf16)
    assert fits_low_precision_accumulation(failures, passes)
    # the child's order: it stops at the first failure, with everything before it passed
    assert fits_low_precision_accumulation({"zipf_ids": failures["zipf_ids"]}, {*BASELINES, "accumulation_probe"})


def test_fp32_scatter_accumulation_passes_every_distribution():
    for out_dtype in (torch.bfloat16, torch.float32):
        results = _index_add_results(torch.float32, out_dtype)
        assert all(passed for _, passed, _ in results.values()), results


def test_bf16_scatter_into_an_fp32_output_already_fails_normal_inputs():
    results = _index_add_results(torch.bfloat16, torch.float32)
    assert not results["normal"][1]


def test_bf16_running_row_sum_is_far_worse_on_the_probe_and_fp32_passes_everything():
    bf16, fp32 = _row_sum_results(torch.bfloat16), _row_sum_results(torch.float32)
    assert all(passed for _, passed, _ in fp32.values()), fp32
    assert not bf16["accumulation_probe"][1] and bf16["accumulation_probe"][2] > 0.5
    # a sequential bf16 sum of 4096 zero-mean terms is already over the 1e-2 tolerance,
    # but the probe makes it > 4x worse: the pattern still names it
    assert bf16["accumulation_probe"][0] > 4 * max(bf16[name][0] for name in BASELINES)
    assert fits_low_precision_accumulation(*_classify(bf16))


def test_the_row_sum_error_grows_with_the_row_length():
    short, long = _row_sum_results(torch.bfloat16, cols=512), _row_sum_results(torch.bfloat16)
    growth = [(512, short["accumulation_probe"][0]), (4096, long["accumulation_probe"][0])]
    assert diagnose_precision(*_classify(long), growth=growth).fits


def test_bf16_lanes_into_an_fp32_output_look_like_bf16_rounding():
    """What the row_sum red-team kernel does at CPU sizes (16 bf16 lanes, 6 adds each): it
    fails on normal inputs already, and the error is the size of bf16 rounding."""
    x = (0.5 + torch.randn(37, 96, generator=torch.Generator().manual_seed(3))).to(torch.bfloat16)
    lanes = x.view(37, 6, 16)
    acc = torch.zeros(37, 16, dtype=torch.bfloat16)
    for j in range(6):
        acc = acc + lanes[:, j]
    comparison = compare_output(0, acc.float().sum(dim=-1), x.double().sum(dim=-1))
    assert not comparison.passed
    assert narrower_rounding(torch.float32, comparison.rel_l2_error) is torch.bfloat16
    exact32 = compare_output(0, x.float().sum(dim=-1), x.double().sum(dim=-1))
    assert exact32.passed


@pytest.mark.parametrize(
    ("out_dtype", "rel_l2", "expected"),
    [
        (torch.float32, 3e-3, torch.bfloat16),
        (torch.float32, 1e-4, torch.float16),
        (torch.float32, 0.4, None),  # a stalled accumulator or a wrong formula
        (torch.bfloat16, 3e-2, None),  # nothing common is narrower than bf16
        (torch.int64, 1.0, None),
    ],
)
def test_narrower_rounding(out_dtype, rel_l2, expected):
    assert narrower_rounding(out_dtype, rel_l2) is expected
