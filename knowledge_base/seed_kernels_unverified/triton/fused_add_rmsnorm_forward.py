"""Fused residual add + RMSNorm forward in Triton: [BLOCK_ROWS, BLOCK_COLS] tiles, launch by row width.

s = x + residual is written out as residual_out (the next block's residual
stream) and normalised, y = s * rstd * weight with rstd = 1/sqrt(mean(s^2) + eps)
per row, in one pass over the data.

What bounds it: bytes. Per element the kernel reads x and residual (2 B each) and
writes y and residual_out (2 B each); weight is one row, read once per program out
of L2. The arithmetic (an add, a square, a sum, two multiplies) is a few
instructions per 8 bytes, so at 16384 x 4096 bf16 (512 MB moved) the only question
is how close it gets to the copy bandwidth (~3.0 TB/s on an H100, about 170 us).
Each input value is read from HBM once and each output written once: the unfused
pair (an add writing s, then an RMSNorm reading it back) moves five row-sized
tensors where this moves four.

Why tiles of several rows: HBM needs ~25 KB outstanding per SM (Little's law,
~3.3 TB/s x ~1 us over 132 SMs). A [BLOCK_ROWS, BLOCK_COLS] tile loads BLOCK_ROWS
rows of both inputs with one set of vector loads, and since x and residual are
summed as soon as they arrive, a thread keeps one fp32 value per element of its
share (s) plus its columns of weight, as rmsnorm_forward keeps x. So it needs about
the same registers (sm_90 builds, cross-compiled, no spills: 64, 62, 102 and 76 a
thread at 1024, 4096, 8192 and 16384 wide, against rmsnorm_forward's 56, 57, 100
and 64) and takes the same launches, with twice the bytes in flight per tile:

* rows up to 1024 wide: SMALL_TILE=4096 elements a tile (BLOCK_ROWS=4 at 1024,
  more rows for narrower ones: 32 at 128), 4 warps (16 KB of input per program,
  32 values a thread, whatever the width: a narrow row does not make a program
  move less);
* up to 8192: BLOCK_ROWS=2, 8 warps (32 KB at 4096, 32 values a thread; at
  8192 64 KB and 64 values a thread, two programs per SM);
* up to MAX_FUSED_COLS=16384: one row, 16 warps (64 KB, 32 values a thread, one
  program per SM: 64 KB in flight is still well past Little's 25 KB);
* wider rows do not fit registers (a 32768-wide row is 128 KB of fp32), so they
  loop over LOOP_BLOCK_COLS-wide chunks twice: first s, residual_out and
  sum(s^2), then y from x and residual read again (mostly from L2). The second
  pass re-reads the inputs rather than the bf16 residual_out it just wrote, so y
  is the norm of the same fp32 sum on every path.

BLOCK_ROWS and num_warps at each launch, SMALL_TILE and LOOP_BLOCK_COLS are
literals for kgen's search to move (any value is correct, SMALL_TILE a power of two
of at least 1024: tail rows and columns are masked);
BLOCK_COLS = next_power_of_2(n_cols) of the tile kernel covers the row and is
correctness, not a knob. The tile kernel is not persistent: there is nothing to
carry across rows, and the hardware keeps as many programs per SM as their
registers allow, which is what keeps bytes in flight.

Numerics: x and residual are widened to fp32 as they are loaded and added there,
and that fp32 sum feeds both the statistics and the scaling; each output is
rounded to its dtype once, at its store (the problem's docstring says why y
normalises the unrounded sum). sum(s^2) runs in fp32 along the row (axis 1 of the
tile), the order-free tree reduction Triton uses for any row sum; masked lanes load
0 and add nothing, and the mean divides by the true width. Row offsets are int64
(rows * cols passes 2^31 at 128k x 16k); x and residual are loaded evict_first so
the weight row stays in L2.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

#: widest row kept whole in registers (16 warps x 32 fp32 values a thread)
MAX_FUSED_COLS = 16384
#: chunk width of the looped kernel for wider rows
LOOP_BLOCK_COLS = 4096
#: elements of a tile for rows up to 1024 wide: BLOCK_ROWS = SMALL_TILE // BLOCK_COLS
SMALL_TILE = 4096


@triton.jit
def _add_rmsnorm_fwd_tile(
    x_ptr, residual_ptr, weight_ptr, y_ptr, residual_out_ptr,
    n_rows, n_cols, eps,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]  # int64: rows * cols can pass 2^31
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    r = tl.load(residual_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    s = x + r
    tl.store(residual_out_ptr + offs, s.to(residual_out_ptr.dtype.element_ty), mask=mask)
    w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    # masked lanes hold 0 and add nothing to the sum; divide by the true width
    mean_sq = tl.sum(s * s, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    y = s * rstd[:, None] * w[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _add_rmsnorm_fwd_looped(
    x_ptr, residual_ptr, weight_ptr, y_ptr, residual_out_ptr,
    n_cols, eps,
    BLOCK_COLS: tl.constexpr,
):
    row_start = tl.program_id(0).to(tl.int64) * n_cols
    # pass 1: s, stored as residual_out, and sum(s^2) accumulated lane-wise in fp32
    acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = cols < n_cols
        x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        r = tl.load(residual_ptr + row_start + cols, mask=mask, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
        s = x + r
        tl.store(residual_out_ptr + row_start + cols, s.to(residual_out_ptr.dtype.element_ty), mask=mask)
        acc += s * s
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    # pass 2: the row's inputs again (mostly from L2), the same fp32 sum, scaled and stored
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = cols < n_cols
        x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        r = tl.load(residual_ptr + row_start + cols, mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row_start + cols, ((x + r) * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _row_blocks(n_rows: int):
    """The tile kernel's grid: one program per BLOCK_ROWS rows, whatever BLOCK_ROWS the launch names."""
    return lambda meta: (triton.cdiv(n_rows, meta["BLOCK_ROWS"]),)


class ModelNew(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, residual, weight):
        n_cols = x.shape[-1]
        x_rows = x.contiguous().view(-1, n_cols)
        residual_rows = residual.contiguous().view(-1, n_cols)
        weight = weight.contiguous()
        n_rows = x_rows.shape[0]
        y = torch.empty_like(x_rows)
        residual_out = torch.empty_like(residual_rows)
        if n_rows == 0 or n_cols == 0:
            return y.view(x.shape), residual_out.view(residual.shape)
        block_cols = triton.next_power_of_2(n_cols)
        args = (x_rows, residual_rows, weight, y, residual_out, n_rows, n_cols, self.eps)
        grid = _row_blocks(n_rows)
        if block_cols <= 1024:
            _add_rmsnorm_fwd_tile[grid](*args, BLOCK_ROWS=SMALL_TILE // block_cols, BLOCK_COLS=block_cols, num_warps=4)
        elif block_cols <= 8192:
            _add_rmsnorm_fwd_tile[grid](*args, BLOCK_ROWS=2, BLOCK_COLS=block_cols, num_warps=8)
        elif block_cols <= MAX_FUSED_COLS:
            _add_rmsnorm_fwd_tile[grid](*args, BLOCK_ROWS=1, BLOCK_COLS=block_cols, num_warps=16)
        else:
            _add_rmsnorm_fwd_looped[(n_rows,)](
                x_rows, residual_rows, weight, y, residual_out, n_cols, self.eps,
                BLOCK_COLS=LOOP_BLOCK_COLS, num_warps=8,
            )
        return y.view(x.shape), residual_out.view(residual.shape)
