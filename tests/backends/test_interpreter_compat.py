"""GPU-style Triton code in the CPU interpreter: autotune turns, torch.cuda idioms, bf16/TF32 dots,
Triton-integer loop indices, and the "needs a GPU" reasons (backends/triton/interpreter_*.py).

tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported; ``prepare_process("cpu")``
installs the compatibility layer in this process as the verifier's child does. The end-to-end
checks run ``kgen eval --device cpu --json`` on the gpuidiom_* fixtures.
"""

import json
import subprocess
import sys
import timeit
from pathlib import Path

import pytest
import torch

from kgen.backends.device import Device
from kgen.backends.registry import get_backend

get_backend("triton").prepare_process(Device.CPU)

import triton  # noqa: E402 - after prepare_process
import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402

from kgen.backends.targets import resolve_target  # noqa: E402
from kgen.backends.triton.interpreter_compat import (  # noqa: E402
    autotune_coverage,
    gpu_idioms_on_cpu,
    needs_gpu_reason,
    reset_autotune_coverage,
)
from kgen.evals.sandbox.guard import CandidateGuard  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def _grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


# -- autotune ------------------------------------------------------------------------------------
@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((32, 1), (64, 2), (128, 4), (256, 8))],
                 key=["n"])
@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def test_each_launch_takes_the_next_config_and_coverage_says_so():
    reset_autotune_coverage()
    x = torch.randn(1000)
    for _ in range(4):
        y = torch.empty_like(x)
        _scale_kernel[_grid(1000)](x, y, 1000)
        assert torch.equal(y, x * 2)
    record = autotune_coverage()["_scale_kernel"]
    assert record.configs_total == 4 and record.launches == 4
    assert [c.split(",")[0] for c in record.configs_run] == ["BLOCK: 32", "BLOCK: 64", "BLOCK: 128", "BLOCK: 256"]
    assert record.summary == "4 of 4 autotune configs exercised"


@triton.autotune(configs=[triton.Config({"BLOCK_M": 64}), triton.Config({"BLOCK_M": 128}),
                          triton.Config({"BLOCK_M": 32})], key=["N"])
@triton.jit
def _copy_bad_at_128(src, dst, N, BLOCK_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    values = tl.load(src + offsets, mask=offsets < N)
    if BLOCK_M == 128:  # the planted bug: this config negates
        values = -values
    tl.store(dst + offsets, values, mask=offsets < N)


def test_a_wrong_config_shows_on_the_call_that_runs_it():
    src = torch.randn(500)
    wrong = []
    for call in range(3):
        dst = torch.empty_like(src)
        _copy_bad_at_128[lambda meta: (triton.cdiv(500, meta["BLOCK_M"]),)](src, dst, 500)
        if not torch.equal(dst, src):
            wrong.append(call)
    assert wrong == [1]


def _atomic_sum(reset: bool):
    kwargs = {"reset_to_zero": ["out_ptr"]} if reset else {}

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"], **kwargs)
    @triton.jit
    def atomic_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))

    return atomic_sum


def test_reset_to_zero_is_honoured_and_its_absence_shows_as_on_a_gpu():
    x = torch.ones(1000)
    good, bad = _atomic_sum(reset=True), _atomic_sum(reset=False)
    for _ in range(3):
        out = torch.zeros(1)
        good[_grid(1000)](x, out, 1000)
        assert out.item() == 1000.0
    first = torch.zeros(1)
    bad[_grid(1000)](x, first, 1000)
    assert first.item() == 3000.0  # the two configs' benchmark launches accumulated into it too
    later = torch.zeros(1)
    bad[_grid(1000)](x, later, 1000)  # a tuned key is not benchmarked again
    assert later.item() == 1000.0


def _add_in_place(restore: bool):
    kwargs = {"restore_value": ["x_ptr"]} if restore else {}

    @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"], **kwargs)
    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)

    return add_one


def test_restore_value_keeps_an_in_place_kernel_right():
    for restore, expected in ((True, 1.0), (False, 3.0)):  # without: both benchmark launches added 1
        x = torch.zeros(100)
        _add_in_place(restore)[_grid(100)](x, 100)
        assert torch.all(x == expected), (restore, x[:4])


def test_prune_configs_by_and_the_key_are_honoured():
    seen = []

    def keep_fitting(configs, named_args, **kwargs):
        return [c for c in configs if c.kwargs["BLOCK"] <= named_args["n"]]

    @triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 64, 1024)], key=["n"],
                     prune_configs_by={"early_config_prune": keep_fitting})
    @triton.jit
    def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    for n in (100, 100, 100, 2000):
        x = torch.randn(n)
        y = torch.empty_like(x)
        double[lambda meta, n=n: (seen.append(meta["BLOCK"]) or triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        assert torch.equal(y, x * 2)
    assert 1024 not in seen[:3] and set(seen) <= {16, 64, 1024}


def test_heuristics_stacked_either_way_and_config_pre_hooks_run():
    hooks = []

    @triton.autotune(configs=[triton.Config({"BLOCK": 32}, pre_hook=lambda a: hooks.append(a["BLOCK"])),
                              triton.Config({"BLOCK": 128}, pre_hook=lambda a: hooks.append(a["BLOCK"]))],
                     key=["n"], restore_value=["x_ptr"],
                     do_bench=lambda *a, **k: pytest.fail("do_bench must not be called on CPU"))
    @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @triton.jit
    def inner(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if EVEN:
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
        else:
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    @triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
    @triton.autotune(configs=[triton.Config({}, num_warps=2), triton.Config({}, num_warps=4)], key=["n"],
                     restore_value=["x_ptr"])
    @triton.jit
    def outer(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)

    for _ in range(2):
        x = torch.zeros(256)
        inner[_grid(256)](x, 256)
        assert torch.all(x == 1)
        y = torch.ones(100)
        outer[(1,)](y, 100)
        assert torch.all(y == 3)
    assert 32 in hooks and 128 in hooks


# -- torch.cuda idioms ---------------------------------------------------------------------------
def test_gpu_idioms_are_mapped_only_inside_and_nest():
    assert not torch.cuda.is_available()
    with gpu_idioms_on_cpu():
        x = torch.randn(8, device="cuda")
        assert x.is_cuda and x.device.type == "cpu"
        assert x.cuda() is x and x.to("cuda").device.type == "cpu" and x.to(torch.device("cuda:0"), torch.float16).dtype == torch.float16
        assert torch.zeros_like(x, device=torch.device("cuda")).is_cuda
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        assert props.multi_processor_count == 132 and props.name == "NVIDIA H100 SXM"
        assert props.shared_memory_per_block_optin == 227 * 1024
        assert torch.cuda.get_device_capability() == (9, 0) and torch.cuda.device_count() == 1
        with gpu_idioms_on_cpu(), torch.cuda.device(x.device):
            torch.cuda.synchronize()
        assert torch.cuda.is_available()  # the inner exit did not switch the outer off
        module = torch.nn.Linear(2, 2).cuda().to("cuda")
        assert module.weight.is_cuda
    assert not torch.cuda.is_available() and not torch.randn(1).is_cuda
    with pytest.raises((AssertionError, RuntimeError)):
        torch.empty(1, device="cuda")
    with gpu_idioms_on_cpu(resolve_target("a100")):
        assert torch.cuda.get_device_properties(0).multi_processor_count == 108
        assert torch.cuda.get_device_capability(0) == (8, 0)


def test_the_candidate_guard_switches_the_idioms_with_it(tmp_path):
    from kgen.backends.triton.backend import TritonBackend

    guard = CandidateGuard(tmp_path / "candidate.py", [tmp_path], TritonBackend().device_emulation(Device.CPU, None))
    assert TritonBackend().device_emulation(Device.CUDA, None) is None
    with guard:
        assert torch.cuda.is_available()
        with guard:  # the child enters the guard re-entrantly
            assert torch.empty(2, device="cuda").is_cuda
        assert torch.cuda.is_available()
    assert not torch.cuda.is_available()


def test_entering_and_leaving_is_cheap():
    idioms = gpu_idioms_on_cpu()

    def cycle():
        with idioms:
            pass

    seconds = min(timeit.repeat(cycle, number=200, repeat=3)) / 200
    print(f"gpu_idioms_on_cpu enter+exit: {seconds * 1e6:.1f} us")
    assert seconds < 500e-6


@triton.jit
def _persistent_relu(x_ptr, y_ptr, n_tiles, NUM_SMS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for tile in range(pid, n_tiles, NUM_SMS):
        offs = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs), 0.0))


@triton.jit
def _persistent_rows(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    start = tl.program_id(0)
    for row in tl.range(start, rows, NUM_PROGRAMS, num_stages=2):
        base = row.to(tl.int64) * cols
        offs = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + base + offs, mask=offs < cols, other=0.0)
        tl.store(y_ptr + base + offs, v / tl.sum(v, axis=0), mask=offs < cols)
    for k in tl.static_range(2):  # a static loop keeps a Python int (a constexpr on a GPU)
        tl.static_assert(k < 2)


def test_persistent_kernels_sized_by_the_sm_count_index_with_triton_integers():
    with gpu_idioms_on_cpu():
        num_sms = torch.cuda.get_device_properties("cuda").multi_processor_count
        x = torch.randn(300 * 64, device="cuda")
        y = torch.empty_like(x)
        _persistent_relu[(min(num_sms, 300),)](x, y, 300, NUM_SMS=min(num_sms, 300), BLOCK=64)
        assert torch.equal(y, x.relu())
        rows = torch.rand(200, 50) + 0.1
        out = torch.empty_like(rows)
        _persistent_rows[(num_sms,)](rows, out, 200, 50, BLOCK=64, NUM_PROGRAMS=num_sms)
        torch.testing.assert_close(out, rows / rows.sum(1, keepdim=True))


# -- int32 overflow checks -------------------------------------------------------------------------
@triton.jit
def _walk_row(x_ptr, y_ptr, n):
    acc = 0.0
    for i in range(0, n):  # an int32 index: ``i + 1`` and ``j * 1`` are int32 arithmetic
        j = i + 1
        acc += tl.load(x_ptr + j * 1 - 1)
        tl.store(y_ptr + i, acc)


@triton.jit
def _int32_sum(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(a_ptr + offs) + tl.load(b_ptr + offs) - tl.load(b_ptr + offs) * 2)


def test_int32_arithmetic_skips_the_overflow_check_whose_assertion_the_interpreter_drops():
    """The check redoes each int32 operation in int64 (an int cast per operand) for an assertion
    that only a ``debug`` build keeps: none of those casts may run, in loops or in block code."""
    from triton.runtime.interpreter import interpreter_builder

    casts = []
    original = interpreter_builder.create_int_cast

    def counted(*args, **kwargs):
        casts.append(args)
        return original(*args, **kwargs)

    x = torch.randn(64)
    y = torch.empty_like(x)
    a = torch.tensor([2**31 - 1, -(2**31), 7, -5] * 4, dtype=torch.int32)
    b = torch.tensor([1, -1, 2**30, 3] * 4, dtype=torch.int32)
    out = torch.empty_like(a)
    interpreter_builder.create_int_cast = counted
    try:
        _walk_row[(1,)](x, y, 64)
        _int32_sum[(1,)](a, b, out, BLOCK=16)
    finally:
        interpreter_builder.create_int_cast = original
    assert casts == []
    torch.testing.assert_close(y, x.cumsum(0))
    assert torch.equal(out, a + b - b * 2)  # wraps as int32 arithmetic does on a GPU


# -- numerics ------------------------------------------------------------------------------------
@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, MODE: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if MODE == 0:
        acc = tl.dot(a, b)
    elif MODE == 1:
        acc = tl.dot(a, b, input_precision="ieee")
    elif MODE == 2:
        acc = tl.dot(a, b, allow_tf32=False)
    else:
        acc = tl.dot(a, b, input_precision="tf32x3")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def _dot(a, b, mode):
    c = torch.empty(a.shape[0], b.shape[1])
    _dot_kernel[(1,)](a, b, c, a.shape[0], b.shape[1], a.shape[1], mode)
    return c


def _rel(c, ref):
    return ((c.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_dot_is_exact_products_with_fp32_accumulation(dtype):
    torch.manual_seed(0)
    a, b = torch.randn(32, 256, dtype=dtype), torch.randn(256, 16, dtype=dtype)
    assert _rel(_dot(a, b, 0), a.double() @ b.double()) < 1e-6


def test_fp32_dot_defaults_to_tf32_and_ieee_matches_fp32():
    torch.manual_seed(0)
    a, b = torch.randn(32, 256), torch.randn(256, 16)
    ref = a.double() @ b.double()
    tf32 = _rel(_dot(a, b, 0), ref)
    assert 6e-4 < tf32 < 1e-3  # TF32 operands; an H100 gives 7.95e-4 on these same operands
    assert _rel(_dot(a, b, 1), ref) < 1e-6
    assert _rel(_dot(a, b, 2), ref) < 1e-6  # allow_tf32=False is ieee
    assert _rel(_dot(a, b, 3), ref) < 1e-6  # tf32x3 is near-fp32


@triton.jit
def _bf16_elementwise(x_ptr, y_ptr, z_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(z_ptr + offs, tl.where(x > y, x * y + x, tl.maximum(x - y, y)))


def test_bf16_elementwise_arithmetic_rounds_like_bf16():
    torch.manual_seed(0)
    x, y = torch.randn(256, dtype=torch.bfloat16), torch.randn(256, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    _bf16_elementwise[(1,)](x, y, z, 256)
    torch.testing.assert_close(z, torch.where(x > y, x * y + x, torch.maximum(x - y, y)), atol=1e-2, rtol=1e-2)


@triton.jit
def _to_bf16(x_ptr, cast_ptr, stored_ptr, rtz_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(cast_ptr + offs, x.to(tl.bfloat16))
    tl.store(stored_ptr + offs, x)  # the store's own cast
    tl.store(rtz_ptr + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtz"))


def test_fp32_to_bf16_rounds_to_nearest_even_as_a_gpu_does():
    """The interpreter cut the low bits off: a correct kernel's bf16 outputs came out up to one
    bf16 step low. Halfway cases round to even, a carry moves into the exponent, NaN and Inf
    survive; ``rtz`` still truncates."""
    values = [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-8 + 2.0**-20, 2.0 - 2.0**-9, -(1.0 + 2.0**-8 + 2.0**-20),
              float("inf"), float("-inf"), 3.4e38, 1e-40]
    x = torch.tensor(values * 2 + [0.0] * (32 - 2 * len(values)), dtype=torch.float32)
    x[-1] = float("nan")
    cast, stored, rtz = (torch.empty(32, dtype=torch.bfloat16) for _ in range(3))
    _to_bf16[(1,)](x, cast, stored, rtz, 32)
    expected = x.to(torch.bfloat16)  # torch rounds to nearest even, as the GPU's cvt.rn.bf16.f32
    for got in (cast, stored):
        assert torch.equal(got[:-1], expected[:-1]) and got[-1].isnan()
    truncated = (x.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
    assert torch.equal(rtz[:-1], truncated[:-1])
    assert not torch.equal(expected[:-1], truncated[:-1])  # the cases tell the two apart


@triton.jit
def _f64_to_bf16(x_ptr, cast_ptr, stored_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs).to(tl.float64)
    tl.store(cast_ptr + offs, x.to(tl.bfloat16))
    tl.store(stored_ptr + offs, x)  # the store's own cast


def test_fp64_to_bf16_is_a_value_cast_not_a_bit_reinterpretation():
    """The interpreter's own fp64 -> bf16 cast kept the fp64 bits' top half (1.73 came out as
    9.2e-41, negative numbers as NaN patterns): a correct kernel summing in fp64 was rejected as
    nan_or_inf. It rounds through fp32, as Triton lowers the cast."""
    x = torch.tensor([1.73, -2.5, 1e-3, -7.0e4, 0.0, 3.0e38, 1.0 + 2.0**-8, -(1.0 + 3 * 2.0**-8)], dtype=torch.float32)
    cast, stored = torch.empty(8, dtype=torch.bfloat16), torch.empty(8, dtype=torch.bfloat16)
    _f64_to_bf16[(1,)](x, cast, stored, 8)
    expected = x.double().float().to(torch.bfloat16)
    assert torch.equal(cast, expected) and torch.equal(stored, expected)


@triton.jit
def _bf16_reductions(x_ptr, sum_ptr, max_ptr, min_ptr, argmax_ptr, argmin_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(sum_ptr, tl.sum(x, axis=0))
    tl.store(max_ptr, tl.max(x, axis=0))
    tl.store(min_ptr, tl.min(x, axis=0))
    tl.store(argmax_ptr, tl.argmax(x, axis=0))
    tl.store(argmin_ptr, tl.argmin(x, axis=0))


def test_bf16_reductions_reduce_values_not_bit_patterns():
    """bf16 values are kept as their 16-bit patterns here; NumPy summed those as integers
    ([-1, -2, 0.5, -0.25] gave 1e37) and took the largest pattern as the max (a negative number's
    pattern is a large unsigned integer). A right kernel reducing bf16 in registers was rejected."""
    x = torch.tensor([-1.0, -2.0, 0.5, -0.25, 3.0, -7.5, 0.125, 2.0], dtype=torch.bfloat16)
    total, high, low = (torch.empty(1, dtype=torch.bfloat16) for _ in range(3))
    where_high, where_low = torch.empty(1, dtype=torch.int32), torch.empty(1, dtype=torch.int32)
    _bf16_reductions[(1,)](x, total, high, low, where_high, where_low, 8)
    assert total.item() == pytest.approx(x.float().sum().item())
    assert (high.item(), low.item(), where_high.item(), where_low.item()) == (3.0, -7.5, 4, 5)


@triton.jit
def _gelu_tanh(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + libdevice.tanh(inner)))


@triton.jit
def _gelu_erf(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.extra.cuda.libdevice.erf(x * 0.7071067811865476)))


def test_libdevice_functions_run():
    x = torch.randn(128)
    y = torch.empty_like(x)
    _gelu_tanh[(1,)](x, y, 128)
    torch.testing.assert_close(y, torch.nn.functional.gelu(x, approximate="tanh"))
    _gelu_erf[(1,)](x, y, 128)
    torch.testing.assert_close(y, torch.nn.functional.gelu(x))


# -- needs_gpu_reason ----------------------------------------------------------------------------
@triton.jit
def _inline_asm(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y)


@triton.jit
def _smid(x_ptr, N: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, N), tl.extra.cuda.smid() + tl.zeros((N,), tl.int32))


@triton.jit
def _shape_bug(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + tl.zeros((2 * N,), tl.float32))


@triton.jit
def _asserting(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.static_assert(N > 1000, "block too small")
    tl.store(x_ptr + offs, tl.load(x_ptr + offs))


def _raised(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001
        return exc
    pytest.fail("expected an exception")


def test_needs_gpu_reason_names_what_the_interpreter_lacks():
    x = torch.randn(16)
    asm = _raised(lambda: _inline_asm[(1,)](x, torch.empty_like(x), 16))
    assert needs_gpu_reason(asm) == "tl.inline_asm_elementwise does not run in Triton's CPU interpreter"
    smid = _raised(lambda: _smid[(1,)](torch.empty(16, dtype=torch.int32), 16))
    assert "smid does not run in Triton's CPU interpreter" in needs_gpu_reason(smid)

    def driver():
        from triton.runtime import driver as d

        return d.active.get_current_device()

    assert "driver" in needs_gpu_reason(_raised(driver))
    assert "torch.cuda" in needs_gpu_reason(_raised(lambda: torch.cuda.Stream()))


def test_needs_gpu_reason_is_none_for_the_candidates_own_bugs():
    x = torch.randn(16)
    assert needs_gpu_reason(_raised(lambda: _shape_bug[(1,)](x, 16))) is None
    assert needs_gpu_reason(_raised(lambda: _asserting[(1,)](x, 16))) is None
    assert needs_gpu_reason(_raised(lambda: [1, 2][5])) is None
    assert needs_gpu_reason(_raised(lambda: torch.ones(3) @ torch.ones(4))) is None
    assert needs_gpu_reason(_raised(lambda: tl.arange(0, 16))) is None  # a tl builtin outside a kernel


# -- end to end ----------------------------------------------------------------------------------
def _declared(path: Path) -> tuple[str, str]:
    names = {}
    for line in path.read_text().splitlines():
        if line.startswith(("KGEN_REDTEAM_PROBLEM", "KGEN_REDTEAM_EXPECT")):
            key, value = line.split("=", 1)
            names[key.strip()] = value.strip().strip("\"'")
    problem = FIXTURES / "problems" / f"{names['KGEN_REDTEAM_PROBLEM']}.py"
    return (str(problem) if problem.exists() else names["KGEN_REDTEAM_PROBLEM"]), names["KGEN_REDTEAM_EXPECT"]


@pytest.mark.parametrize("candidate", sorted((FIXTURES / "candidates").glob("gpuidiom_*.py")), ids=lambda p: p.stem)
def test_kgen_eval_on_cpu_judges_gpu_style_candidates(candidate):
    problem, expect = _declared(candidate)
    run = subprocess.run(
        [sys.executable, "-c", "from kgen.cli.main import main; main()", "eval", problem, str(candidate),
         "--device", "cpu", "--json"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    report = json.loads(run.stdout)
    got = "passed" if report["verdict"] == "passed" else report["rejection"]
    assert got == expect, f"{report['verdict']} {report['rejection']}: {report['reason']}"


def test_a_device_type_check_is_a_gpu_need_and_other_assertions_are_not(tmp_path):
    source = tmp_path / "device_checks.py"
    source.write_text(
        "def typed(x):\n    assert x.device.type == 'cuda', 'cuda only'\n"
        "def raised(x):\n    if x.device.type != \"cuda\":\n        raise ValueError('cuda only')\n"
        "def named(x):\n    assert str(x.device).startswith('cuda')\n"
        "def shaped(x):\n    assert x.shape[0] == 3, 'rows'\n"
        "def devices(x, y):\n    assert x.device == y.device\n"
    )
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    x = torch.zeros(2)
    for name, gpu in (("typed", True), ("raised", True), ("named", True), ("shaped", False)):
        with pytest.raises(Exception) as info:
            namespace[name](x)
        assert (needs_gpu_reason(info.value) is not None) is gpu, name
    namespace["devices"](x, x)  # a same-device check holds on the CPU: nothing to excuse


@triton.jit
def _masked_by_constexpr_rows(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = (pid < M) & (offs < N)  # int32 in the bare interpreter, a predicate on a GPU
    tl.store(y_ptr + pid * N + offs, tl.load(x_ptr + pid * N + offs, mask=mask, other=0.0) * 2, mask=mask)


def test_a_mask_built_from_a_constexpr_comparison_loads_and_stores():
    x = torch.randn(3, 5)
    y = torch.full_like(x, float("nan"))
    _masked_by_constexpr_rows[(3,)](x, y, 3, 5, BLOCK=8)
    assert torch.equal(y, x * 2)
