"""Input distributions: each transform does what its name says, and none is unfair to a correct kernel."""

import copy
import math

import pytest
import torch

from kgen.evals.checks.compare import compare_output
from kgen.evals.problem.catalog import catalog
from kgen.evals.problem.format import ProblemInfo, flatten_outputs, load_problem
from kgen.evals.problem.input_distributions import (
    BASELINE,
    FAR_TAIL_EDGE,
    KNOWN_DISTRIBUTIONS,
    SELF_CHECKED,
    apply_distribution,
    distribution_generator,
    distributions_for,
    inputs_phrase,
    representable,
    undefined,
    vanishes,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small tensors: thread start-up and contention cost more than the work on a busy CI box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _info(**fields) -> ProblemInfo:
    return ProblemInfo(name="p", path="/nonexistent/p.py", **fields)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _float_inputs():
    g = _gen(1)
    x = torch.randn(64, 256, generator=g).to(torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(256, generator=g)).to(torch.bfloat16)
    ids = torch.randint(0, 1000, (512,), generator=g)
    return [x, weight, ids, 3, 0.5]


# -- which distributions run ------------------------------------------------------------------


def test_every_problem_gets_scale_and_shape_stress():
    floats_only = [torch.randn(4, 4)]
    assert distributions_for(_info(), floats_only) == [
        "normal", "uniform", "large", "small", "accumulation_probe", "mean_shift", "wide_range",
        "far_negative", "near_negative", "far_positive", "sparse_spikes", "row_scales",
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_mean_shift_moves_far_past_the_spread_and_keeps_some_of_it(dtype):
    x = torch.randn(64, 512, generator=_gen(5)).to(dtype)
    (shifted,) = apply_distribution("mean_shift", [x], _gen())
    values = shifted.double()
    assert values.mean().abs() > 10 * values.std()  # |mean| >> std: E[x^2] - E[x]^2 cancels
    assert values.std() > 0.5 * x.double().std()  # the spread survives the dtype's rounding


@pytest.mark.parametrize(("dtype", "beyond"), [(torch.bfloat16, 65504.0), (torch.float16, 1024.0), (torch.float32, 2.0**30)])
def test_wide_range_reaches_past_what_a_narrower_dtype_holds(dtype, beyond):
    x = torch.randn(64, 512, generator=_gen(6)).to(dtype)
    w = torch.randn(512, generator=_gen(7)).to(dtype)
    big, weight = apply_distribution("wide_range", [x, w], _gen())
    assert torch.isfinite(big).all() and big.abs().max() > beyond
    assert torch.equal(weight, w)  # only the largest input (the activations) moves


def test_integer_inputs_get_the_id_probes_even_when_the_problem_declares_none():
    # a plain KernelBench file with uniform token ids must not hide a bf16 embedding gradient
    names = distributions_for(_info(), [torch.randn(4, 8), torch.randint(0, 10, (4,))])
    assert "zipf_ids" in names and "repeated_id" in names
    # bool masks are not ids
    assert "zipf_ids" not in distributions_for(_info(), [torch.randn(4), torch.ones(4, dtype=torch.bool)])


def test_declared_distributions_are_added_and_unknown_ones_are_named():
    assert "zipf_ids" in distributions_for(_info(input_distributions=["zipf_ids"]), [torch.randn(3)])
    with pytest.raises(ValueError, match="unknown input distribution 'zipfian'.*known: normal, uniform"):
        distributions_for(_info(input_distributions=["zipfian"]), [torch.randn(3)])
    with pytest.raises(ValueError, match="repeated_id"):
        apply_distribution("lognormal", [torch.randn(3)], _gen())


# -- what each transform does ------------------------------------------------------------------


@pytest.mark.parametrize("name", KNOWN_DISTRIBUTIONS)
def test_transforms_keep_dtype_shape_strides_and_leave_other_kinds_alone(name):
    inputs = _float_inputs()
    inputs.append(torch.randn(8, 6).t())  # non-contiguous
    out = apply_distribution(name, inputs, _gen())
    assert len(out) == len(inputs)
    for before, after in zip(inputs, out, strict=True):
        if not isinstance(before, torch.Tensor):
            assert after is before
            continue
        assert after.dtype == before.dtype and after.shape == before.shape
        assert after.stride() == before.stride()
        assert after.storage_offset() == before.storage_offset()
        if before.is_floating_point() and name in ("zipf_ids", "repeated_id"):
            assert torch.equal(after, before)
        if not before.is_floating_point() and name not in ("zipf_ids", "repeated_id"):
            assert torch.equal(after, before)


@pytest.mark.parametrize("name", KNOWN_DISTRIBUTIONS[1:])
def test_same_seed_same_inputs_other_seed_other_inputs(name):
    inputs = _float_inputs()
    a = apply_distribution(name, inputs, distribution_generator(7, name))
    b = apply_distribution(name, inputs, distribution_generator(7, name))
    assert all(torch.equal(x, y) for x, y in zip(a[:3], b[:3], strict=True))
    if name == "standard_normal":  # a no-op on these signed inputs: one of one sign is redrawn
        inputs = [torch.rand(64, 256, generator=_gen(2)), *inputs[1:]]
        a = apply_distribution(name, inputs, distribution_generator(7, name))
    if name not in ("large", "small", "wide_range", "far_negative", "near_negative", "far_positive"):  # deterministic moves
        c = apply_distribution(name, inputs, distribution_generator(8, name))
        assert not all(torch.equal(x, y) for x, y in zip(a[:3], c[:3], strict=True))


def test_uniform_keeps_the_spread_and_the_domain():
    g = _gen(3)
    signed = torch.randn(200_000, generator=g) * 3.0
    positive = torch.rand(200_000, generator=g) + 0.5  # like cross-entropy's grad_loss
    out_signed, out_positive = apply_distribution("uniform", [signed, positive], _gen())
    a = 3.0 * 3.0**0.5
    assert out_signed.abs().max() <= a and out_signed.min() < -0.9 * a
    assert out_signed.std().item() == pytest.approx(3.0, rel=0.02)
    assert out_positive.min() >= 0  # log/sqrt of such an input stays defined
    assert out_positive.std().item() == pytest.approx(positive.std().item(), rel=0.02)
    # a constant tensor (norm weights of ones) becomes spread-out values, never all zeros
    (ones,) = apply_distribution("uniform", [torch.ones(1000)], _gen())
    assert ones.std() > 0.1


def test_large_and_small_scale_exactly_within_the_dtype_range_and_keep_masks():
    x = torch.tensor([1.5, -2.0, 60000.0, float("-inf")], dtype=torch.float16)
    (large,) = apply_distribution("large", [x], _gen())
    assert large[:2].tolist() == [96.0, -128.0]
    assert large[2].item() == torch.finfo(torch.float16).max  # clamped, not inf
    assert large[3].item() == float("-inf")  # an additive mask keeps its holes
    (small,) = apply_distribution("small", [torch.tensor([2.0, -4.0], dtype=torch.float64)], _gen())
    assert small.tolist() == [2e-3, -4e-3]


def test_accumulation_probe_defeats_a_bf16_running_sum_but_not_an_fp32_one():
    (x,) = apply_distribution("accumulation_probe", [torch.randn(16, 4096, generator=_gen(5))], _gen())
    assert (x > 0).all()  # one sign: the sum grows with every term
    x = x.to(torch.bfloat16)
    exact = x.double().sum(dim=-1)
    acc16 = torch.zeros(16, dtype=torch.bfloat16)
    acc32 = torch.zeros(16, dtype=torch.float32)
    for j in range(x.shape[1]):
        acc16 = acc16 + x[:, j]  # bf16 + bf16: one rounding to bf16 per add
        acc32 = acc32 + x[:, j].float()
    err16 = ((acc16.double() - exact).norm() / exact.norm()).item()
    err32 = ((acc32.double() - exact).norm() / exact.norm()).item()
    assert err16 > 0.5, err16  # the accumulator stopped absorbing terms
    assert err32 < 1e-6, err32


def test_accumulation_probe_keeps_never_positive_tensors_negative():
    logprobs = -torch.rand(100, generator=_gen()) - 0.1
    (out,) = apply_distribution("accumulation_probe", [logprobs], _gen())
    assert (out < 0).all()


def test_zipf_ids_stay_in_range_with_a_few_hot_ids_that_are_not_the_smallest():
    ids = torch.randint(100, 5100, (20_000,), generator=_gen(2), dtype=torch.int32)
    low, high = int(ids.min()), int(ids.max())
    hottest = set()
    for seed in range(4):
        (z,) = apply_distribution("zipf_ids", [ids], _gen(seed))
        assert z.dtype == torch.int32 and low <= int(z.min()) and int(z.max()) <= high
        counts = torch.bincount((z - low).long())
        top = counts.max().item() / z.numel()
        assert top > 0.08, top  # rank 1 of 1/k^1.1 over ~5000 values: ~12% of all draws
        assert counts.topk(10).values.sum().item() / z.numel() > 0.3
        hottest.add(int(counts.argmax()) + low)
    assert len(hottest) > 1 and hottest != {low}


def test_zipf_ids_over_a_huge_range_use_the_continuous_law():
    ids = torch.tensor([0, 2**40], dtype=torch.int64).repeat(5000)
    (z,) = apply_distribution("zipf_ids", [ids], _gen())
    assert int(z.min()) >= 0 and int(z.max()) <= 2**40
    _, counts = torch.unique(z, return_counts=True)
    assert counts.max().item() / z.numel() > 0.04  # rank 1 takes ~7% of the draws


def test_repeated_id_sends_everything_to_one_accumulator():
    ids = torch.randint(3, 40, (500,), generator=_gen())
    (r,) = apply_distribution("repeated_id", [ids], _gen(9))
    assert torch.unique(r).numel() == 1 and 3 <= int(r[0]) <= 39


def test_representable_flags_outputs_the_dtype_cannot_hold():
    assert representable(torch.tensor([1.0, 7e4], dtype=torch.float64), torch.bfloat16)
    assert not representable(torch.tensor([1.0, 7e4], dtype=torch.float64), torch.float16)
    assert not representable(torch.full((10,), 1e-7, dtype=torch.float64), torch.float16)
    assert representable(torch.tensor([float("inf"), 1.0], dtype=torch.float64), torch.float16)
    assert representable(torch.tensor([3, 4]), torch.int64)


def test_vanishes_means_zero_wherever_finite():
    assert vanishes(torch.zeros(4, dtype=torch.float64))
    assert vanishes(torch.tensor([0.0, float("-inf")], dtype=torch.float64))
    assert not vanishes(torch.tensor([0.0, 1e-300], dtype=torch.float64))
    assert not vanishes(torch.tensor([0, 0]))  # integer outputs are compared exactly


# -- fairness on the catalog ----------------------------------------------------------------


def _references(model, inputs):
    with torch.no_grad():
        native = flatten_outputs(model(*[x.clone() if torch.is_tensor(x) else x for x in inputs]))
        up = [x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs]
        ref64 = flatten_outputs(copy.deepcopy(model).double()(*up))
    return native, ref64


@pytest.mark.parametrize("info", catalog(), ids=lambda info: info.name)
def test_every_distribution_gives_a_well_posed_reference_on_every_catalog_problem(info):
    """Finite, not all zero, representable in the output dtype, and the reference run in the
    problem's own dtypes passes the verifier's tolerance: a correct kernel can pass."""
    problem = load_problem(info.path, info.cpu_sizes())
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    torch.manual_seed(0)
    model = problem.model_class(*problem.get_init_inputs())
    names = distributions_for(info, inputs)
    for name in names:
        transformed = apply_distribution(name, inputs, distribution_generator(0, name))
        native, ref64 = _references(model, transformed)
        if name in SELF_CHECKED and any(vanishes(ref) for ref in ref64):
            # The verifier skips such a trial (trials.py): the distribution took the op where it
            # vanishes (GELU below -20 is zero even in fp64), so there is nothing to judge.
            continue
        for i, (out, ref) in enumerate(zip(native, ref64, strict=True)):
            where = f"{info.name}, {name}, output {i}"
            assert torch.isfinite(ref).all(), where
            assert ref.abs().sum() > 0, f"{where}: all-zero reference hides bugs"
            assert representable(ref, out.dtype), where
            comparison = compare_output(i, out, ref)
            assert comparison.passed, f"{where}: the reference itself fails ({comparison})"


# -- far tails -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_far_tails_move_the_edge_and_keep_the_spread(dtype):
    x = torch.randn(32, 256, generator=_gen(11)).to(dtype)
    edge = FAR_TAIL_EDGE[dtype]
    (neg,) = apply_distribution("far_negative", [x], _gen())
    (pos,) = apply_distribution("far_positive", [x], _gen())
    assert neg.max().item() == pytest.approx(-edge, abs=0.13) and pos.min().item() == pytest.approx(edge, abs=0.13)
    spread = (x.double().max() - x.double().min()).item()
    assert (neg.double().max() - neg.double().min()).item() == pytest.approx(spread, rel=0.1)
    # the answers an elementwise op gives there stay normal numbers of the dtype
    assert representable(torch.nn.functional.softplus(neg.double()), dtype)
    assert representable(torch.nn.functional.logsigmoid(pos.double()), dtype)


def test_far_tails_leave_a_tensor_that_never_reaches_that_side_alone():
    variance = torch.rand(64, generator=_gen(12)) + 0.1
    logprobs = -torch.rand(64, generator=_gen(13)) - 0.1
    assert torch.equal(apply_distribution("far_negative", [variance], _gen())[0], variance)
    assert torch.equal(apply_distribution("far_positive", [logprobs], _gen())[0], logprobs)
    masked = torch.tensor([0.5, float("-inf"), -1.0])
    (moved,) = apply_distribution("far_negative", [masked], _gen())
    assert moved[0].item() == -20.0 and torch.isneginf(moved[1]) and moved[2].item() == -21.5


_NAIVE_SOFTPLUS = {
    "threshold, no log1p": lambda x: torch.where(x > 20, x, torch.log(1 + torch.exp(x))),
    "max(x, 0) + log(1 + exp(-|x|))": lambda x: x.clamp(min=0) + torch.log(1 + torch.exp(-x.abs())),
    "base 2": lambda x: torch.where(x > 20, x, math.log(2) * torch.log2(1 + torch.exp2(x * math.log2(math.e)))),
}


@pytest.mark.parametrize("how", sorted(_NAIVE_SOFTPLUS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_far_negative_exposes_softplus_without_log1p(how, dtype):
    naive = _NAIVE_SOFTPLUS[how]
    x = torch.randn(16, 1024, generator=_gen(14)).to(dtype)
    for name, passes in (("normal", True), ("large", True), ("far_negative", False)):
        (inputs,) = apply_distribution(name, [x], distribution_generator(1, name))
        ref = torch.nn.functional.softplus(inputs.double())
        out = naive(inputs.float()).to(dtype)
        assert compare_output(0, out, ref).passed is passes, name
        right = (inputs.float().clamp(min=0) + torch.log1p(torch.exp(-inputs.float().abs()))).to(dtype)
        assert compare_output(0, right, ref).passed, name


def test_far_positive_exposes_log_of_sigmoid():
    x = torch.randn(16, 1024, generator=_gen(15))
    (far,) = apply_distribution("far_positive", [x], _gen())
    ref = torch.nn.functional.logsigmoid(far.double())
    assert not compare_output(0, torch.log(torch.sigmoid(far)), ref).passed
    assert compare_output(0, torch.nn.functional.logsigmoid(far), ref).passed


def test_the_softcap_is_only_visible_on_large_inputs():
    """The exploit in REFERENCES.md: a softcap left out passes near-zero logits."""
    infos = {info.name: info for info in catalog()}
    if "softcap" not in infos:
        pytest.skip("no softcap problem in this catalog")
    problem = load_problem(infos["softcap"].path, infos["softcap"].cpu_sizes())
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    model = problem.model_class(*problem.get_init_inputs())
    verdicts = {}
    for name in ("normal", "large"):
        (logits,) = apply_distribution(name, inputs, distribution_generator(0, name))
        _, (ref,) = _references(model, [logits])
        verdicts[name] = compare_output(0, logits.clone(), ref).passed  # "kernel" = identity
    assert verdicts == {"normal": True, "large": False}


def test_near_negative_moves_fp32_activations_of_either_sign_and_leaves_other_dtypes():
    """KernelBench's activations are often ``torch.rand`` (never negative): near_negative moves
    them anyway, to just below -10, where a piecewise softplus's log(1 + exp(x)) band is wrong in
    fp32; a bf16 tensor, whose tolerance forgives that rounding, is left as drawn."""
    g = _gen(3)
    uniform = torch.rand(32, 64, generator=g)
    moved = apply_distribution("near_negative", [uniform], distribution_generator(1, "near_negative"))[0]
    assert moved.max().item() == pytest.approx(-10.0) and moved.min().item() > -11.0
    naive = torch.log(1.0 + torch.exp(moved))  # fp32 throughout, as a kernel without log1p computes it
    exact = torch.nn.functional.softplus(moved.double())
    assert ((naive.double() - exact).norm() / exact.norm()).item() > 1e-3  # ten times fp32's tolerance
    bf16 = torch.randn(8, 8, generator=g).to(torch.bfloat16)
    assert torch.equal(apply_distribution("near_negative", [bf16], distribution_generator(1, "near_negative"))[0], bf16)


def test_a_reference_taken_out_of_its_domain_is_undefined_not_wrong():
    assert undefined(torch.tensor([1.0, float("nan")], dtype=torch.float64))
    assert not undefined(torch.tensor([1.0, float("-inf")], dtype=torch.float64))
    assert not undefined(torch.tensor([1, 2]))


@pytest.mark.parametrize(("drawn", "expected"), [
    (lambda g: torch.rand(64, 32, generator=g), True),  # KernelBench's activations
    (lambda g: -torch.rand(64, 32, generator=g) - 0.1, True),  # never positive
    (lambda g: torch.rand(64, 32, generator=g, dtype=torch.float64) + 0.5, True),
    (lambda g: torch.randn(64, 32, generator=g), False),  # both signs already
])
def test_standard_normal_runs_second_exactly_when_the_problems_own_inputs_have_one_sign(drawn, expected):
    x = drawn(_gen(4))
    small_signed = torch.randn(3, generator=_gen(5))  # not the largest input: it decides nothing
    names = distributions_for(_info(), [x, small_signed])
    assert ("standard_normal" in names) is expected
    if expected:
        assert names[:2] == ["normal", "standard_normal"]
        moved, kept = apply_distribution("standard_normal", [x, small_signed], distribution_generator(1, "standard_normal"))
        assert (moved < 0).any() and (moved > 0).any() and moved.dtype == x.dtype
        assert abs(moved.double().std().item() - 1.0) < 0.1
        assert torch.equal(kept, small_signed)


def test_the_problems_own_inputs_are_named_for_what_they_are():
    assert inputs_phrase("normal") == "the problem's own inputs"
    assert inputs_phrase("standard_normal") == "standard-normal N(0, 1) inputs"
    assert inputs_phrase("large") == "large inputs"
    assert {"normal", "standard_normal"} == set(BASELINE)
