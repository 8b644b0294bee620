"""Input distributions: transforms of a problem's generated inputs that expose hidden bugs.

A problem's ``get_inputs()`` draws one kind of data (mostly ``randn``, uniform
token ids). Kernels that are wrong only on other data pass it: a softcap left
out is invisible on logits near zero, bf16 accumulation of an embedding
gradient is invisible when uniform ids give each row one or two
contributions. The verifier therefore runs every trial's inputs through
several distributions. Each is a function of the generated inputs (the list
``get_inputs()`` returned, CPU tensors, before they move to the device) and a
``torch.Generator``, so a seed reproduces it exactly. The reference is always
evaluated on the transformed inputs, so a transform never has to keep a
problem's inputs mutually consistent: the distribution changes the question,
and the reference answers the new question.

``normal``              the inputs as ``get_inputs()`` drew them (same objects): *the problem's
                        own inputs*, whatever law they follow (KernelBench's ReLU draws
                        ``torch.rand``, all positive), and so named wherever a person reads it
                        (:func:`inputs_phrase`); ``normal`` is the stable key the results keep.
``standard_normal``     only for a problem whose largest floating input is of one sign as drawn
                        (:func:`distributions_for`): that input redrawn from N(0, 1), so a kernel
                        that is right only for one sign (``abs`` for ReLU) meets both before any
                        stress distribution. Part of the baseline with ``normal``
                        (:data:`BASELINE`); self-checked, so a reference taken out of its domain
                        (the log of a negative number) skips the trial.
``uniform``             every floating tensor redrawn from ``U(-a, a)`` with the
                        original's standard deviation (``a = sqrt(3) * std``); a
                        tensor that was never negative (``rand() + 0.5``, saved
                        ``rstd``, norm weights) is drawn from ``U(0, sqrt(12) * std)``
                        instead, so it stays in its domain (``log``, ``sqrt``).
                        Norm weights near one become small and spread: a kernel
                        that ignores a weight fails.
``large``               floating tensors times 64 (a power of two: the scaling itself
                        is exact), clamped to the dtype's finite range. Saved
                        statistics (``mean``, ``rstd``) are scaled too; the
                        reference formula is simply evaluated on those inputs.
                        Catches softcaps and activations that were only ever
                        tested on their near-linear region, and overflowing fp16
                        intermediates.
``small``               floating tensors times 1e-3: epsilon handling, underflow.
``accumulation_probe``  floating tensors redrawn as ``m * (1 + |z|)``, ``z ~ N(0, 1)``,
                        ``m`` the original's RMS (negated for a tensor that was
                        never positive, such as log-probabilities): every
                        term of a sum has the same sign (condition number one: a
                        sequential fp32 sum of 4096 terms stays within ~1e-6), and
                        a running sum soon dwarfs each term. A bf16 accumulator
                        stops absorbing terms after a few hundred of them (error
                        0.85 over 4096 terms), an fp16 one after a few thousand
                        (0.10 over 4096).
``zipf_ids``            every integer tensor redrawn with ``p(rank k) ~ 1 / k^1.1``
                        over the range ``[min, max]`` observed in it, ranks mapped
                        through a random permutation of that range (the hot ids
                        are not just the smallest). A few rows collect most
                        contributions, as they do with real text.
``repeated_id``         every integer tensor filled with one value from its
                        observed range: every contribution lands in one
                        accumulator.
``mean_shift``          the largest floating tensor moved by ``c * std`` of itself (``c`` = 256
                        for fp32/fp64, 64 for fp16, 16 for bf16: as far as the
                        dtype keeps several bits of the spread after the shift),
                        the residual-stream case: a variance computed as
                        ``E[x^2] - E[x]^2`` cancels catastrophically, a softmax
                        without its max subtracted overflows; a two-pass or
                        Welford variance does not notice.
``wide_range``          the largest floating tensor scaled so its RMS is ``2^20`` for bf16,
                        ``2^11`` for fp16 and ``2^32`` for fp32/fp64 (powers of
                        two: exact), magnitudes an fp16 intermediate cannot hold
                        (bf16 data computed in fp16 overflows past 65504) while
                        the problem's own dtype can.

``far_negative``        the largest floating tensor moved so its largest finite value is
                        ``-FAR_TAIL_EDGE`` (20 for fp32/bf16/fp64, 5 for fp16), its spread
                        kept: an elementwise op meets its far left tail everywhere at once.
                        At -20, ``exp(x)`` (2e-9) is below half an fp32 ulp of one (6e-8),
                        so ``1 + exp(x)`` rounds to exactly one: a softplus written
                        ``log(1 + exp(x))`` (with or without a threshold for large ``x``,
                        or as ``max(x, 0) + log(1 + exp(-|x|))``), a sigmoid written
                        ``1 - 1/(1 + exp(x))`` and SiLU forms that cancel return 0 where the
                        answer is ``exp(x)``. Nearer, at -12, that rounding (6e-8 against
                        ``exp(-12)`` = 6e-6) is only about bf16's tolerance. And ``exp(x)`` stays a
                        normal fp32/bf16 number down to -87, far below anything the shift
                        reaches for a normal spread. fp16's smallest normal is only
                        ``exp(-9.7)``, and the answers' RMS sits about ``e^-4`` below the
                        edge's for a million normal values (their maximum is ~5 sigmas out),
                        hence its edge at -5, where fp16 arithmetic keeps 1 + exp(x) to
                        ~7% only. A tensor with no negative value (a variance, ``rstd``) is
                        left as it is.
``near_negative``       the same move to ``-NEAR_TAIL_EDGE`` (10, fp32 and fp64 only; other
                        dtypes are left as they are): the band a piecewise softplus leaves
                        to ``log(1 + exp(x))`` between its ``exp(x)`` branch (below about
                        -15) and zero. There one fp32 rounding of ``1 + exp(x)`` (up to 6e-8
                        against ``exp(-10)`` = 4.5e-5) is already ten times fp32's
                        tolerance, while at -20 such a kernel is in its exact branch.
                        Unlike ``far_negative`` it moves a never-negative tensor too (a
                        KernelBench file's ``torch.rand`` activations); a reference taken out
                        of its domain there (NaN) skips the trial. A bf16
                        or fp16 tolerance forgives that rounding, so those dtypes keep only
                        the far edge.
``far_positive``        the mirror: the smallest finite value moved to ``+FAR_TAIL_EDGE``. A
                        log-sigmoid written ``log(sigmoid(x))`` or ``-log(1 + exp(-x))``
                        returns 0 where the answer is ``-exp(-x)``. A tensor with no positive
                        value (log-probabilities) is left as it is.
``sparse_spikes``       the largest floating tensor with one element per row (the last axis)
                        replaced by ``±sqrt(n) * rms`` (:func:`~kgen.evals.problem.structured_inputs.spiked_rows`):
                        a statistic read from part of a row (every second element, a prefix,
                        a few blocks) or a reduction that drops a tail misses the spike.
                        Spikes are positive in a tensor with no negative value, negative in
                        one with no positive value.
``row_scales``          the largest floating tensor with each row times its own power of two
                        (:func:`~kgen.evals.problem.structured_inputs.scaled_rows`): a
                        statistic shared across rows (a global RMS or maximum, another row's)
                        is wrong for almost every row.

Every other distribution is an element-wise, i.i.d. transform; ``sparse_spikes`` and
``row_scales`` are the structured ones (:mod:`kgen.evals.problem.structured_inputs`), built
for cheats that only i.i.d. data hides: on i.i.d. rows part of a row estimates the
whole, and every row's statistic is about the same.

``mean_shift``, ``wide_range``, ``far_negative``, ``near_negative``, ``far_positive``, ``sparse_spikes`` and
``row_scales`` change a problem's conditioning, not only its data (a GELU of values
below -20 is smaller than fp32 can hold; a spike can dominate a sum), so they are judged
only where the problem's own reference, run in its own dtypes, still meets the verifier's
tolerance against the fp64 reference and one fp32 rounding of the inputs does not move
the answer by half of it (:data:`SELF_CHECKED`); elsewhere the trial is skipped and the
skip recorded. They move only the largest floating input (:data:`LARGEST_ONLY`).

Integer tensors are never changed by the floating transforms, and floating
tensors never by the id transforms. Non-tensor inputs, bool tensors and empty
tensors are returned as they are. Strides, dtype, shape and ``requires_grad``
are kept, and so are non-finite entries (an additive ``-inf`` mask keeps its
holes); every finite value stays within the dtype's finite range.

Distributions can make a reference badly conditioned, so each one here was
chosen to stay well posed: ``accumulation_probe`` has all terms of one sign;
``large`` turns a softmax into a near one-hot (still exact in fp32);
``uniform`` keeps non-negative tensors non-negative. The tests check, for
every catalog problem, that the fp64 reference is finite and non-zero under
every distribution and that the reference run in the problem's own dtypes
passes the verifier's tolerance against it (so a correct kernel can pass); for
the self-checked ones, wherever the verifier would judge them.
Where a distribution's reference does not fit an output dtype at all (an fp16
output under ``large`` past 65504), :func:`representable` says so and the
verifier should skip that distribution for that trial, not reject; so it does where a
self-checked distribution's reference is zero throughout (:func:`vanishes`).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kgen.evals.problem.format import ProblemInfo
from kgen.evals.problem.layout import copy_inputs
from kgen.evals.problem.structured_inputs import scaled_rows, spiked_rows

#: Scale of the ``large`` distribution (a power of two, so the scaling is exact).
LARGE_SCALE = 64.0
#: Scale of the ``small`` distribution.
SMALL_SCALE = 1e-3
#: Exponent of the ``zipf_ids`` law, as in the catalog's embedding problems.
ZIPF_EXPONENT = 1.1
#: Above this many distinct values, Zipf ranks come from the continuous law and an
#: affine permutation instead of ``torch.multinomial`` and ``torch.randperm``.
_EXACT_ZIPF_LIMIT = 1 << 22

#: ``mean_shift``: the shift in units of the tensor's own standard deviation, per dtype.
MEAN_SHIFT_SIGMAS: dict[torch.dtype, float] = {
    torch.float64: 256.0, torch.float32: 256.0, torch.float16: 64.0, torch.bfloat16: 16.0,
}
#: ``wide_range``: the RMS a floating tensor is scaled to, per dtype (powers of two).
WIDE_RANGE_RMS: dict[torch.dtype, float] = {
    torch.float64: 2.0**32, torch.float32: 2.0**32, torch.float16: 2.0**11, torch.bfloat16: 2.0**20,
}

#: ``far_negative`` / ``far_positive``: where the tensor's edge goes, per dtype (see the docstring).
FAR_TAIL_EDGE: dict[torch.dtype, float] = {
    torch.float64: 20.0, torch.float32: 20.0, torch.float16: 5.0, torch.bfloat16: 20.0,
}

#: ``near_negative``: where the tensor's largest value goes, for the dtypes whose tolerance
#: sees one rounding of ``1 + exp(x)`` there (see the docstring); other dtypes stay as drawn.
NEAR_TAIL_EDGE: dict[torch.dtype, float] = {torch.float64: 10.0, torch.float32: 10.0}

#: The structured distributions (:mod:`kgen.evals.problem.structured_inputs`).
STRUCTURED = ("sparse_spikes", "row_scales")
#: Run for every problem.
ALWAYS = (
    "normal", "uniform", "large", "small", "accumulation_probe", "mean_shift", "wide_range",
    "far_negative", "near_negative", "far_positive", *STRUCTURED,
)
#: Distributions judged only where the problem's reference in its own dtypes passes on them.
SELF_CHECKED = frozenset({
    "mean_shift", "wide_range", "far_negative", "near_negative", "far_positive", "standard_normal", *STRUCTURED,
})
#: Distributions applied to the largest floating input only (the activations): moving every
#: input at once compounds (a gradient times a scaled input times a scaled weight overflows
#: any dtype), while one moved tensor is what a residual stream or an outlier layer gives.
LARGEST_ONLY = frozenset({
    "mean_shift", "wide_range", "far_negative", "near_negative", "far_positive", "standard_normal", *STRUCTURED,
})
#: Run whenever some input is an integer tensor (ids, targets, indices).
FOR_INTEGER_INPUTS = ("zipf_ids", "repeated_id")
#: Run, right after ``normal``, when the largest floating input as drawn has one sign only.
FOR_ONE_SIGNED_INPUTS = ("standard_normal",)
KNOWN_DISTRIBUTIONS = ALWAYS + FOR_INTEGER_INPUTS + FOR_ONE_SIGNED_INPUTS
#: The baseline every other distribution is judged against: the problem's own inputs and, where
#: those are of one sign, standard-normal ones. A kernel wrong on them is wrong, not wrong "only
#: on some distribution" (``evals/verifier/failure_order.py``).
BASELINE = frozenset({"normal", *FOR_ONE_SIGNED_INPUTS})

#: What each distribution is called where a person reads it; the rest by their own names.
_PHRASES = {"normal": "the problem's own inputs", "standard_normal": "standard-normal N(0, 1) inputs"}


def inputs_phrase(name: str) -> str:
    """The inputs of a distribution in words: ``normal`` is the problem's own ``get_inputs()``
    (not N(0, 1): a KernelBench file may draw ``torch.rand``), the rest "<name> inputs"."""
    return _PHRASES.get(name, f"{name} inputs")


def is_integer_tensor(value: Any) -> bool:
    """An integer tensor (int8 .. int64, uint8 ..), not bool, not floating, not complex."""
    return (
        isinstance(value, torch.Tensor)
        and not value.is_floating_point()
        and not value.is_complex()
        and value.dtype != torch.bool
    )


def _is_float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def check_distribution_name(name: str) -> str:
    """The name itself, or ValueError naming the known distributions."""
    if name not in KNOWN_DISTRIBUTIONS:
        raise ValueError(
            f"unknown input distribution {name!r}; known: {', '.join(KNOWN_DISTRIBUTIONS)}"
        )
    return name


def distribution_generator(seed: int, name: str) -> torch.Generator:
    """A CPU generator for one (trial seed, distribution): reproducible, and different
    per distribution so two distributions never draw the same numbers."""
    return torch.Generator().manual_seed((int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**63))


def distributions_for(info: ProblemInfo, inputs: Sequence[Any]) -> list[str]:
    """The distributions a verifier should run for this problem, in a stable order.

    * ``normal``, ``uniform``, ``large``, ``small`` and ``accumulation_probe`` always.
      The probe is not limited to problems detected as reductions: reductions hide
      in matmuls (the K axis), attention (P @ V), softmax denominators and
      convolution windows, any detection would miss some, and on an elementwise
      problem the probe is just one more cheap, well-posed distribution.
    * ``zipf_ids`` and ``repeated_id`` whenever some input is an integer tensor,
      declared or not: a KernelBench file with uniform token ids must not hide a
      bf16 embedding-gradient accumulator.
    * ``standard_normal``, second, when the largest floating input is of one sign as
      drawn (``torch.rand``): the problem's own inputs then never show a kernel a
      negative (or a positive) value.
    * whatever the problem declares in ``KGEN_INPUT_DISTRIBUTIONS`` (an unknown
      name is a ValueError naming the known ones).
    """
    chosen = list(ALWAYS)
    largest = _largest_float_index(inputs)
    if largest is not None and _one_sign(inputs[largest]) is not None:
        chosen[1:1] = FOR_ONE_SIGNED_INPUTS
    if any(is_integer_tensor(x) for x in inputs):
        chosen += FOR_INTEGER_INPUTS
    for name in info.input_distributions:
        check_distribution_name(name)
        if name not in chosen:
            chosen.append(name)
    return chosen


def apply_distribution(name: str, inputs: Sequence[Any], generator: torch.Generator) -> list[Any]:
    """The inputs under one distribution (see the module docstring); a new list.

    ``normal`` returns the same objects; every other distribution returns copies of
    every tensor, laid out as the originals were (strides, offsets, shared storage),
    holding the new values where it changes them.
    """
    transform = _TRANSFORMS[check_distribution_name(name)]
    if name == "normal":
        return list(inputs)
    if name in LARGEST_ONLY:
        largest = _largest_float_index(inputs)
        values = [transform(x, generator) if i == largest else x for i, x in enumerate(inputs)]
    else:
        values = [transform(x, generator) for x in inputs]
    # Written into copies that keep each input's strides, offset and shared storage.
    out = copy_inputs(inputs)
    with torch.no_grad():
        for i, (original, new) in enumerate(zip(inputs, values, strict=True)):
            if new is not original and isinstance(new, torch.Tensor):
                out[i].copy_(new)
    return out


def _largest_float_index(inputs: Sequence[Any]) -> int | None:
    floats = [(x.numel(), -i) for i, x in enumerate(inputs) if _is_float_tensor(x)]
    return -max(floats)[1] if floats else None


def representable(ref64: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether an fp64 reference output can be stored in ``dtype`` to the verifier's
    tolerance at all: no finite value past the dtype's largest, and an RMS no smaller
    than its smallest normal number (below it, rounding to subnormals alone would
    exceed a relative tolerance). Integer and bool outputs are always representable;
    non-finite reference values are compared exactly and ignored here."""
    if not dtype.is_floating_point or not ref64.is_floating_point():
        return True
    info = torch.finfo(dtype)
    finite = ref64[torch.isfinite(ref64)].to(torch.float64)
    if finite.numel() == 0:
        return True
    if finite.abs().max().item() > info.max:
        return False
    rms = finite.pow(2).mean().sqrt().item()
    return rms == 0.0 or rms >= info.tiny


def vanishes(ref64: torch.Tensor) -> bool:
    """Whether a floating fp64 reference output is zero wherever it is finite: a
    self-checked distribution that takes an op where it vanishes (a GELU below -20) leaves
    nothing to judge, and a kernel's one subnormal there would be infinitely wrong relative
    to zero."""
    if not ref64.is_floating_point() or ref64.numel() == 0:
        return False
    finite = ref64[torch.isfinite(ref64)]
    return finite.numel() > 0 and not bool(finite.any())


def undefined(ref64: torch.Tensor) -> bool:
    """Whether a floating fp64 reference output holds a NaN: a self-checked distribution that
    moved a never-negative input below zero (``near_negative``) took an op out of its domain
    (a log, a square root of a variance), and there is nothing to judge."""
    return ref64.is_floating_point() and bool(torch.isnan(ref64).any())


# -- transforms ------------------------------------------------------------------------------


def _like(original: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` in the original's dtype and shape (``apply_distribution`` lays them out)."""
    out = torch.empty(original.shape, dtype=original.dtype, device=original.device)
    if values.is_floating_point() and original.is_floating_point():
        # Non-finite entries of the original (an additive -inf mask) stay as they were;
        # finite values stay finite in the original's dtype.
        info = torch.finfo(original.dtype)
        source = original.detach().to(values.dtype)
        values = torch.where(torch.isfinite(source), values.clamp(-info.max, info.max), source)
    with torch.no_grad():
        out.copy_(values)
    return out


def _work_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _finite_stats(t: torch.Tensor) -> tuple[float, float, float, float]:
    """(mean, std, rms, min) over the finite values, in fp64."""
    x = t.detach().to(torch.float64).flatten()
    x = x[torch.isfinite(x)]
    if x.numel() == 0:
        return 0.0, 0.0, 0.0, 0.0
    mean = x.mean().item()
    std = x.std(unbiased=False).item()
    rms = x.pow(2).mean().sqrt().item()
    return mean, std, rms, x.min().item()


def _normal(x: Any, generator: torch.Generator) -> Any:
    return x


def _uniform(x: Any, generator: torch.Generator) -> Any:
    if not _is_float_tensor(x):
        return x
    _, std, rms, low = _finite_stats(x)
    spread = std if std > 0 else (rms if rms > 0 else 1.0)
    u = torch.rand(x.shape, generator=generator, dtype=_work_dtype(x))
    if low >= 0:  # never negative: stay in the domain, U(0, b) with std b / sqrt(12)
        values = u * (math.sqrt(12.0) * spread)
    else:
        values = (2.0 * u - 1.0) * (math.sqrt(3.0) * spread)
    return _like(x, values)


def _scaled(factor: float) -> Callable[[Any, torch.Generator], Any]:
    def scale(x: Any, generator: torch.Generator) -> Any:
        if not _is_float_tensor(x):
            return x
        return _like(x, x.detach().to(_work_dtype(x)) * factor)

    return scale


def _accumulation_probe(x: Any, generator: torch.Generator) -> Any:
    if not _is_float_tensor(x):
        return x
    _, _, rms, _ = _finite_stats(x)
    finite = x.detach()[torch.isfinite(x.detach())]
    # negative only for a tensor that is never positive (log-probabilities): a random
    # sign for zero-mean tensors could push a GEMM + GELU into its all-zero region
    never_positive = finite.numel() > 0 and bool((finite <= 0).all()) and bool((finite < 0).any())
    magnitude = (rms if rms > 0 else 1.0) * (-1.0 if never_positive else 1.0)
    z = torch.randn(x.shape, generator=generator, dtype=_work_dtype(x))
    return _like(x, magnitude * (1.0 + z.abs()))


def _id_range(x: torch.Tensor) -> tuple[int, int]:
    return int(x.min().item()), int(x.max().item())


def _zipf_ranks(count: int, n_values: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` ranks in [0, n_values), rank k (0-based) with p ~ 1 / (k + 1)^ZIPF_EXPONENT."""
    if n_values <= _EXACT_ZIPF_LIMIT:
        probs = torch.arange(1, n_values + 1, dtype=torch.float64).pow(-ZIPF_EXPONENT)
        return torch.multinomial(probs, count, replacement=True, generator=generator)
    # Inverse CDF of the density ~ r^-s on [1, n + 1), floored: the same law up to
    # discretisation, without a table of n_values probabilities.
    s = ZIPF_EXPONENT
    u = torch.rand(count, generator=generator, dtype=torch.float64)
    tail = (n_values + 1.0) ** (1.0 - s)
    r = (1.0 - u * (1.0 - tail)) ** (1.0 / (1.0 - s))
    return (r.floor().to(torch.int64) - 1).clamp_(0, n_values - 1)


def _permute(ranks: torch.Tensor, n_values: int, generator: torch.Generator) -> torch.Tensor:
    """A random bijection of [0, n_values) applied to ranks, so hot ids are spread out."""
    if n_values <= _EXACT_ZIPF_LIMIT:
        return torch.randperm(n_values, generator=generator)[ranks]
    # affine map r -> (a r + b) mod n with gcd(a, n) = 1 is a bijection
    a = int(torch.randint(1, n_values, (1,), generator=generator).item())
    while math.gcd(a, n_values) != 1:
        a = a % (n_values - 1) + 1
    b = int(torch.randint(0, n_values, (1,), generator=generator).item())
    return (ranks * a + b) % n_values


def _zipf_ids(x: Any, generator: torch.Generator) -> Any:
    if not is_integer_tensor(x) or x.numel() == 0:
        return x
    low, high = _id_range(x)
    n_values = high - low + 1
    ranks = _zipf_ranks(x.numel(), n_values, generator)
    ids = _permute(ranks, n_values, generator) + low
    return _like(x, ids.reshape(x.shape))


def _repeated_id(x: Any, generator: torch.Generator) -> Any:
    if not is_integer_tensor(x) or x.numel() == 0:
        return x
    low, high = _id_range(x)
    offset = int(torch.randint(0, high - low + 1, (1,), generator=generator).item())
    return _like(x, torch.full(x.shape, low + offset, dtype=torch.int64))


def _mean_shift(x: Any, generator: torch.Generator) -> Any:
    if not _is_float_tensor(x):
        return x
    _, std, rms, _ = _finite_stats(x)
    spread = std if std > 0 else rms
    if spread == 0:
        return x
    sigmas = MEAN_SHIFT_SIGMAS.get(x.dtype, MEAN_SHIFT_SIGMAS[torch.bfloat16])
    sign = -1.0 if torch.rand((), generator=generator).item() < 0.5 else 1.0
    return _like(x, x.detach().to(torch.float64) + sign * sigmas * spread)


def _wide_range(x: Any, generator: torch.Generator) -> Any:
    if not _is_float_tensor(x):
        return x
    _, _, rms, _ = _finite_stats(x)
    if rms == 0:
        return x
    target = WIDE_RANGE_RMS.get(x.dtype, WIDE_RANGE_RMS[torch.bfloat16])
    factor = 2.0 ** round(math.log2(target / rms))  # a power of two: the scaling is exact
    return _like(x, x.detach().to(torch.float64) * factor)


def _far_tail(sign: float, edges: dict[torch.dtype, float] | None = None) -> Callable[[Any, torch.Generator], Any]:
    """``far_negative`` (``sign`` -1) or ``far_positive`` (+1): the tensor's edge on that side
    moved to ``sign * FAR_TAIL_EDGE``, every value by the same amount; with ``edges``, to those
    distances instead, a dtype they do not name left as it is, and a tensor never on that side
    moved too (``near_negative``: KernelBench's activations are ``torch.rand``, never negative;
    where that takes the reference out of its domain, its NaNs skip the trial, :func:`undefined`)."""

    def move(x: Any, generator: torch.Generator) -> Any:
        if not _is_float_tensor(x):
            return x
        values = x.detach().to(torch.float64)
        finite = values[torch.isfinite(values)]
        if finite.numel() == 0 or (edges is None and not bool((finite * sign > 0).any())):
            return x  # a tensor that is never on that side stays in its domain
        if edges is not None and x.dtype not in edges:
            return x
        edge = sign * (edges[x.dtype] if edges is not None else FAR_TAIL_EDGE.get(x.dtype, FAR_TAIL_EDGE[torch.bfloat16]))
        nearest = finite.max() if sign < 0 else finite.min()
        return _like(x, values + (edge - nearest.item()))

    return move


def _one_sign(x: torch.Tensor) -> float | None:
    """+1 for a tensor never negative, -1 for one never positive, None for a signed one."""
    _, _, _, low = _finite_stats(x)
    if low >= 0:
        return 1.0
    finite = x.detach()[torch.isfinite(x.detach())]
    return -1.0 if bool((finite <= 0).all()) else None


def _standard_normal(x: Any, generator: torch.Generator) -> Any:
    """A one-signed floating tensor redrawn from N(0, 1); a signed one is left as drawn."""
    if not _is_float_tensor(x) or _one_sign(x) is None:
        return x
    return _like(x, torch.randn(x.shape, generator=generator, dtype=_work_dtype(x)))


def _sparse_spikes(x: Any, generator: torch.Generator) -> Any:
    if not _is_float_tensor(x):
        return x
    _, _, rms, _ = _finite_stats(x)
    if rms == 0:
        return x
    return _like(x, spiked_rows(x.detach(), rms, _one_sign(x), generator))


def _row_scales(x: Any, generator: torch.Generator) -> Any:
    if not _is_float_tensor(x):
        return x
    return _like(x, scaled_rows(x.detach(), generator))


_TRANSFORMS: dict[str, Callable[[Any, torch.Generator], Any]] = {
    "normal": _normal,
    "uniform": _uniform,
    "large": _scaled(LARGE_SCALE),
    "small": _scaled(SMALL_SCALE),
    "accumulation_probe": _accumulation_probe,
    "zipf_ids": _zipf_ids,
    "repeated_id": _repeated_id,
    "mean_shift": _mean_shift,
    "wide_range": _wide_range,
    "far_negative": _far_tail(-1.0),
    "near_negative": _far_tail(-1.0, NEAR_TAIL_EDGE),
    "far_positive": _far_tail(1.0),
    "sparse_spikes": _sparse_spikes,
    "row_scales": _row_scales,
    "standard_normal": _standard_normal,
}
assert set(_TRANSFORMS) == set(KNOWN_DISTRIBUTIONS)
