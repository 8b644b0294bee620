"""Log-softmax along any dim (``Model(dim)``) in Triton: x viewed as [outer, L, inner], rows held
in registers when they fit, else an online max/sum pass and a writing pass.

y = x - max - log(sum(exp(x - max))) along ``dim``, for any dim: the tensor
(made contiguous) is the 3-D view [outer, L, inner], L the reduced dim. The
view gives two memory patterns:

* inner == 1 (the last dim: contiguous rows, the catalog's ``softmax`` layout):
  rows up to MAX_FUSED_BLOCK_COLS wide are loaded whole, BLOCK_ROWS of them per
  program (a tile of ~ROW_BLOCK_ELEMS values, so a short row still puts 16-32 KB
  in flight per program): max, exp-sum and the store all read that one copy,
  so x is read once and y written once (8 B per fp32 element, the bound).
  Longer rows (KernelBench's 393216) would spill, so a program loops over its
  row in LOOP_BLOCK_COLS chunks twice: pass 1 keeps an online max and a sum of
  exp(x - max) rescaled whenever the max grows; pass 2 re-reads the row and
  stores x - lse. That costs a second read (12 B per element instead of 8):
  with a 1.5 MB row per program and a hundred programs in flight the re-read
  mostly misses the 50 MB L2, so such rows are bounded near two thirds of
  copy bandwidth, as torch's own kernel is.
* inner > 1 (an earlier dim: each output column of an [L, inner] slab): a
  program takes BLOCK_INNER adjacent columns (contiguous across lanes:
  coalesced) and walks L in BLOCK_L-row steps, the same two passes with a max
  and a sum per column.

Precision: fp32 throughout (bf16 or fp32 in, the output's dtype out). The
log is of a sum >= 1 (the max's own term is exp(0) = 1), so no cancellation;
An all -inf row (every class masked) shifts by 0 instead of by -inf: its sum
is 0, its lse -inf and its output nan, as torch gives, with no inf - inf
inside the running sums.
Offsets are int64 (4096 x 393216 passes 2^31).

BLOCK_* values, MAX_FUSED_BLOCK_COLS, ROW_BLOCK_ELEMS and num_warps at each launch are
knobs for kgen's search (any value is correct: tails are masked);
next_power_of_2(L) for a fused row covers the row and is correctness.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_BLOCK_COLS = 8192  # rows up to this wide are held whole in registers
ROW_BLOCK_ELEMS = 8192  # values per fused program: BLOCK_ROWS = ROW_BLOCK_ELEMS // BLOCK_COLS
LOOP_BLOCK_COLS = 4096  # chunk of a long row
COL_BLOCK_INNER = 128  # strided dim: adjacent columns per program
COL_BLOCK_L = 32  # strided dim: L rows per step


@triton.jit
def _log_softmax_rows_fused(x_ptr, y_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]  # int64: rows * cols can pass 2^31
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
    m = tl.max(x, axis=1)
    shift = tl.where(m == float("-inf"), 0.0, m)  # an all -inf row (or a row past the end)
    lse = shift + tl.log(tl.sum(tl.exp(x - shift[:, None]), axis=1))
    tl.store(y_ptr + offs, (x - lse[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _log_softmax_rows_looped(x_ptr, y_ptr, n_cols, BLOCK_COLS: tl.constexpr):
    row_start = tl.program_id(0).to(tl.int64) * n_cols
    # pass 1: online max and sum of exp(x - max) over the row's chunks
    m = float("-inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        x = tl.load(x_ptr + row_start + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(new_m == float("-inf"), 0.0, new_m)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = new_m
    lse = tl.where(m == float("-inf"), 0.0, m) + tl.log(s)
    # pass 2: re-read (from L2 when it is still there) and store x - lse
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = cols < n_cols
        x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        tl.store(y_ptr + row_start + cols, (x - lse).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _log_softmax_columns(x_ptr, y_ptr, n_len, n_inner, n_inner_blocks, BLOCK_L: tl.constexpr, BLOCK_INNER: tl.constexpr):
    """Program t = (outer index, inner block): log-softmax down L of BLOCK_INNER adjacent columns."""
    tile = tl.program_id(0)
    outer = tile // n_inner_blocks
    inner = (tile % n_inner_blocks) * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    inner_mask = inner < n_inner
    base = outer.to(tl.int64) * n_len * n_inner
    m = tl.full((BLOCK_INNER,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_INNER,), dtype=tl.float32)
    for start in range(0, n_len, BLOCK_L):
        ls = start + tl.arange(0, BLOCK_L)
        mask = (ls < n_len)[:, None] & inner_mask[None, :]
        offs = base + ls.to(tl.int64)[:, None] * n_inner + inner[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(new_m == float("-inf"), 0.0, new_m)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[None, :]), axis=0)
        m = new_m
    lse = tl.where(m == float("-inf"), 0.0, m) + tl.log(s)
    for start in range(0, n_len, BLOCK_L):
        ls = start + tl.arange(0, BLOCK_L)
        mask = (ls < n_len)[:, None] & inner_mask[None, :]
        offs = base + ls.to(tl.int64)[:, None] * n_inner + inner[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        tl.store(y_ptr + offs, (x - lse[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.numel() == 0:
            return y
        shape = list(x.shape) or [1]  # a 0-d tensor: one value, log_softmax 0
        dim = self.dim % len(shape)
        x = x.contiguous()  # the [outer, L, inner] view needs the standard layout
        n_len = shape[dim]
        n_inner = math.prod(shape[dim + 1:])
        n_outer = x.numel() // (n_len * n_inner)
        if n_inner > 1:
            block_inner = min(triton.next_power_of_2(n_inner), COL_BLOCK_INNER)
            inner_blocks = triton.cdiv(n_inner, block_inner)
            _log_softmax_columns[(n_outer * inner_blocks,)](
                x, y, n_len, n_inner, inner_blocks, BLOCK_L=COL_BLOCK_L, BLOCK_INNER=block_inner, num_warps=4,
            )
        elif n_len <= MAX_FUSED_BLOCK_COLS:
            block_cols = triton.next_power_of_2(n_len)  # covers the row: correctness, not a knob
            block_rows = triton.next_power_of_2(triton.cdiv(ROW_BLOCK_ELEMS, block_cols))
            _log_softmax_rows_fused[(triton.cdiv(n_outer, block_rows),)](
                x, y, n_outer, n_len, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols,
                num_warps=min(max(block_rows * block_cols // 1024, 1), 16),
            )
        else:
            _log_softmax_rows_looped[(n_outer,)](x, y, n_len, BLOCK_COLS=LOOP_BLOCK_COLS, num_warps=8)
        return y
