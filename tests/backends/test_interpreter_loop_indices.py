"""Loop indices in Triton's CPU interpreter are Triton integers, as in compiled code
(``backends/triton/interpreter_compat.py``: ``_install_loop_indices`` / ``triton_loop``).

Compiled Triton gives ``for i in range(...)`` and ``tl.range(...)`` an int32 (int64 when a bound is
int64) tensor index; the bare interpreter runs Python's ``range`` and gives a plain ``int``, so
``row.to(tl.int64)`` in a persistent loop fails on CPU only ("'int' object has no attribute 'to'")
and a kernel that is fine on a GPU was rejected as a runtime error. ``tl.static_range`` keeps a
Python int (a constexpr on a GPU).

tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported; ``prepare_process("cpu")``
installs the compatibility layer in this process as the verifier's child does. Each kernel is
written in a style LLMs use and is compared with torch; the last test runs kgen's verifier end to
end on a persistent RMSNorm.
"""

from pathlib import Path

import pytest
import torch

from kgen.backends.device import Device
from kgen.backends.registry import get_backend

get_backend("triton").prepare_process(Device.CPU)

import triton  # noqa: E402 - after prepare_process
import triton.language as tl  # noqa: E402

from kgen.evals.harness import EvalOptions, evaluate  # noqa: E402
from kgen.evals.verdict import Verdict  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = REPO / "tests" / "fixtures" / "problems"


# -- persistent row loop, `row.to(tl.int64)`, an `if` on the index, nested column loop -----------------
@triton.jit
def _persistent_rmsnorm(x_ptr, y_ptr, n_rows, n_cols, stride, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    for row in range(pid, n_rows, step):
        row64 = row.to(tl.int64)
        if row < n_rows:
            acc = tl.zeros((BLOCK,), dtype=tl.float32)  # loop-carried over the column chunks
            for c0 in range(0, n_cols, BLOCK):
                cols = c0 + tl.arange(0, BLOCK)
                x = tl.load(x_ptr + row64 * stride + cols, mask=cols < n_cols, other=0.0)
                acc += x * x
            rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
            for c0 in range(0, n_cols, BLOCK):
                cols = c0 + tl.arange(0, BLOCK)
                x = tl.load(x_ptr + row64 * stride + cols, mask=cols < n_cols, other=0.0)
                tl.store(y_ptr + row64 * stride + cols, x * rstd, mask=cols < n_cols)


def test_persistent_row_loop_with_int64_row_offsets():
    torch.manual_seed(0)
    x = torch.randn(37, 100)
    y = torch.full_like(x, float("nan"))
    _persistent_rmsnorm[(5,)](x, y, 37, 100, x.stride(0), 1e-6, BLOCK=32)
    torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


# -- `tl.range` with num_stages (the fused-softmax tutorial's loop), step by keyword --------------------
@triton.jit
def _softmax_tl_range(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr,
                      num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, step=row_step, num_stages=num_stages):
        row_start_ptr = in_ptr + row_idx.to(tl.int64) * in_stride
        col_offsets = tl.arange(0, BLOCK)
        mask = col_offsets < n_cols
        row = tl.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf"))
        numerator = tl.exp(row - tl.max(row, axis=0))
        out_row_ptr = out_ptr + row_idx.to(tl.int64) * out_stride
        tl.store(out_row_ptr + col_offsets, numerator / tl.sum(numerator, axis=0), mask=mask)


def test_tl_range_with_num_stages_and_a_keyword_step():
    torch.manual_seed(0)
    x = torch.randn(50, 70)
    y = torch.empty_like(x)
    _softmax_tl_range[(6,)](y, x, x.stride(0), y.stride(0), 50, 70, BLOCK=128, num_stages=3)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1))


# -- nested loops over 2-D tiles, the index cast by `tl.cast`, pointer arithmetic ----------------------
@triton.jit
def _nested_tiles_cast(x_ptr, y_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    for tm in range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        rm = tl.cast(tm, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        for tn in range(tl.cdiv(N, BLOCK_N)):
            rn = tn * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = (rm[:, None] < M) & (rn[None, :] < N)
            offs = rm[:, None] * stride_m + rn[None, :]
            v = tl.load(x_ptr + offs, mask=mask)
            tl.store(y_ptr + offs, v * 2.0 + tm.to(tl.float32), mask=mask)


def test_nested_loops_with_the_index_cast_by_tl_cast():
    torch.manual_seed(0)
    x = torch.randn(45, 70)
    y = torch.empty_like(x)
    _nested_tiles_cast[(2,)](x, y, 45, 70, x.stride(0), BLOCK_M=16, BLOCK_N=32)
    tile_of_row = (torch.arange(45) // 16).float()[:, None]
    torch.testing.assert_close(y, x * 2.0 + tile_of_row)


# -- grid-stride loop over blocks: `tl.arange(0, BLOCK) + blk * BLOCK` ---------------------------------
@triton.jit
def _grid_stride_gelu(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    num_blocks = tl.cdiv(n_elements, BLOCK)
    for blk in range(tl.program_id(0), num_blocks, tl.num_programs(0)):
        offs = tl.arange(0, BLOCK) + blk * BLOCK
        mask = offs < n_elements
        x = tl.load(x_ptr + offs, mask=mask)
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
        tl.store(y_ptr + offs, y, mask=mask)


def test_grid_stride_loop_over_blocks():
    torch.manual_seed(0)
    x = torch.randn(1000)
    y = torch.empty_like(x)
    _grid_stride_gelu[(3,)](x, y, x.numel(), BLOCK=64)
    torch.testing.assert_close(y, torch.nn.functional.gelu(x))


# -- persistent tile loop (matmul style): `//` and `%` on the index, a loop-carried accumulator -------
@triton.jit
def _persistent_tiled_matmul(a_ptr, b_ptr, c_ptr, M, N, K, NUM_SMS: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m = tile_id // num_pid_n
        pid_n = tile_id % num_pid_n
        rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, tl.cdiv(K, BLOCK_K)):
            rk = ki * BLOCK_K + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_persistent_tile_loop_with_a_loop_carried_accumulator():
    torch.manual_seed(0)
    a, b = torch.randn(40, 50), torch.randn(50, 36)
    c = torch.empty(40, 36)
    _persistent_tiled_matmul[(4,)](a, b, c, 40, 36, 50, NUM_SMS=4, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


# -- index types: int32 by default, int64 from an int64 bound; static_range stays a Python int --------
@triton.jit
def _index_types(out_ptr, n, n64, R: tl.constexpr):
    pid = tl.program_id(0)
    total = pid.to(tl.int64) * 0  # program_id converts as on a GPU
    for i in range(n):
        tl.static_assert(i.dtype == tl.int32)
        total += i
    for j in range(0, n64.to(tl.int64)):
        tl.static_assert(j.dtype == tl.int64)
        total += j
    for k in range(R):  # a constexpr bound still gives a Triton integer, as compiled code does
        total += k.to(tl.int64) * 100
    for s in tl.static_range(R):  # unrolled: a Python int that can pick from a tuple
        tl.static_assert(isinstance(s, int))
        total += (1000, 10000, 100000)[s]
    tl.store(out_ptr + pid, total)


def test_index_types_follow_the_bounds_and_static_range_keeps_python_ints():
    out = torch.zeros(2, dtype=torch.int64)
    _index_types[(2,)](out, 4, 3, R=3)
    expected = sum(range(4)) + sum(range(3)) + 100 * sum(range(3)) + 111000
    assert out.tolist() == [expected, expected]


# -- bounds loaded from memory, the index passed to a device function ---------------------------------
@triton.jit
def _scale_row(x_ptr, y_ptr, row, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    base = row.to(tl.int64) * n_cols
    tl.store(y_ptr + base + cols, tl.load(x_ptr + base + cols, mask=cols < n_cols) * 3.0, mask=cols < n_cols)


@triton.jit
def _rows_from_device_count(x_ptr, y_ptr, n_rows_ptr, n_cols, BLOCK: tl.constexpr):
    n_rows = tl.load(n_rows_ptr)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        _scale_row(x_ptr, y_ptr, row, n_cols, BLOCK)


def test_a_bound_loaded_from_memory_and_the_index_passed_to_a_device_function():
    torch.manual_seed(0)
    x = torch.randn(9, 20)
    y = torch.zeros_like(x)
    _rows_from_device_count[(4,)](x, y, torch.tensor([7], dtype=torch.int32), 20, BLOCK=32)
    torch.testing.assert_close(y[:7], x[:7] * 3.0)
    assert torch.equal(y[7:], torch.zeros(2, 20))  # only the rows the device count named


# -- kgen's verifier, end to end ----------------------------------------------------------------------
PERSISTENT_RMSNORM_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_persistent_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                              BLOCK_SIZE: tl.constexpr, NUM_SMS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in range(pid, n_rows, NUM_SMS):
        row_i64 = row.to(tl.int64)  # 64-bit row offsets for large tensors
        x = tl.load(x_ptr + row_i64 * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        tl.store(y_ptr + row_i64 * y_row_stride + cols, x * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 8
        grid = (max(1, min(n_rows, num_sms)),)
        rmsnorm_persistent_kernel[grid](x2, self.weight, self.bias, y, n_rows, n_cols, x2.stride(0), y.stride(0),
                                        self.eps, BLOCK_SIZE=triton.next_power_of_2(n_cols), NUM_SMS=grid[0])
        return y.view_as(x)
'''


@pytest.mark.slow
def test_verifier_passes_a_persistent_rmsnorm_that_casts_its_loop_index(tmp_path):
    candidate = tmp_path / "rmsnorm_persistent.py"
    candidate.write_text(PERSISTENT_RMSNORM_CANDIDATE)
    result = evaluate(PROBLEMS / "rt3_rmsnorm_affine.py", candidate, EvalOptions(device="cpu", n_seeds=1))
    assert result.verdict == Verdict.PASSED, f"{result.verdict} {result.rejection}: {result.reason}"
