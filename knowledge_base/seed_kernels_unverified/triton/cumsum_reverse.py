"""Reverse (suffix) cumulative sum along any dim (``Model(dim)``) in Triton: the cumsum_dim seed
with every position along the scanned dim read and written mirrored (i -> L - 1 - i).

torch.cumsum(x.flip(dim), dim).flip(dim) without the two flips: a flip is a
full copy (8 bytes an element each way in fp32), so instead each kernel reads
x[L - 1 - i] as the scan's element i and stores its running total at L - 1 - i
(``_src`` / ``_dst`` below). Rows are still read as contiguous chunks, only
walked from the far end; a chunk's loads are a reversed contiguous range, which
coalesces as well as a forward one. Everything else (the paths, the
compensated carry, the three-phase split of few long rows, the column scan)
is cumsum_dim's, whose docstring follows.

Inclusive prefix sum along any dim (``Model(dim)``) in Triton: x viewed as [outer, L, inner],
scanned along L with tree scans in a block and a compensated fp32 carry across blocks.

torch.cumsum(x, dim) for any ``dim``: the tensor (made contiguous) is the 3-D
view [outer, L, inner], L the scanned dim. Nothing about the dim or the sizes
is fixed; the view gives two memory patterns:

* inner == 1 (the last dim: contiguous rows): the catalog ``cumsum`` seed's
  kernels, unchanged (below): rows walked in chunks with a compensated carry,
  or a three-phase scan over chunks when a few long rows must be split.
* inner > 1 (an earlier dim: each column of an [L, inner] slab is scanned): a
  program takes BLOCK_INNER adjacent columns, contiguous across lanes
  (coalesced loads; one column per thread would touch a new cache line per
  element), and walks L in BLOCK_L-row steps: each [BLOCK_L, BLOCK_INNER] tile
  is scanned down axis 0 in registers (``tl.cumsum(axis=0)``), offset by every
  column's compensated running total, stored, and the tile's column totals
  added to the carry. x is read once. The slab's columns give
  outer * cdiv(inner, BLOCK_INNER) programs (a 4096 x 4096 scan along dim 0:
  32 programs of 128 columns at BLOCK_INNER=128; fewer, wider-L ones are a
  known limit: a column's scan is sequential in L steps).

The rest of this docstring is the catalog cumsum seed's, whose row kernels
this file carries:

Inclusive prefix sum (cumsum) along the last dim in Triton: fp32 in/out, tree scans in a block,
a compensated fp32 carry across blocks, and a three-phase scan when a few long rows must be split.

What bounds it: bytes. Each element is read once (4 B) and written once (4 B):
4096 x 4096 fp32 moves 128 MB, ~43 us at the H100's ~3.0 TB/s copy bandwidth.
A scan is a handful of adds and shuffles per element, so as for any streaming
kernel the design is about bytes in flight and never touching one twice, with
one twist: element j depends on every element before it in its row.

Two ways to run, picked from the shape:

* Rows that fill the GPU (at least ROW_PROGRAMS_PER_SM programs per SM; the
  default 4096 x 4096, the awkward 999 x 1531) or are short: one program owns
  BLOCK_ROWS whole rows and walks them in BLOCK_COLS-wide chunks. Each chunk is
  scanned in registers (``tl.cumsum``: a sequential scan of each thread's few
  values, then a log-depth tree across lanes and warps), offset by the row's
  running total, stored, and the chunk's total added to the running total. x
  is read once; rows up to 1024 wide take 4 rows per program (a [4, 1024] tile
  is 16 KB, as much in flight as one 4096-wide row).
* Few long rows (4 x 65537, 2 x 1M): one program per row would leave most of
  the 132 SMs idle and walk 256 chunks one after another, so the row is split
  into CHUNK_BLOCK_COLS chunks scanned in parallel, in three launches:
  (1) every chunk's total (a tree sum); (2) per row, the exclusive prefix of
  the chunk totals with a compensated carry (a tiny launch: one value per
  chunk); (3) every chunk scanned in registers and offset by its prefix. x is
  read twice, but the second read of a few MB hits the 50 MB L2 (only a
  tensor larger than the L2 with this few rows pays 12 bytes an element
  instead of 8). The chunk shrinks from CHUNK_BLOCK_COLS down to
  MIN_CHUNK_BLOCK_COLS while that gives fewer than ROW_PROGRAMS_PER_SM programs
  per SM.

Precision, the part a scan gets wrong: an fp32 running total carried naively
across thousands of chunks loses a rounding per chunk, and the total of a
1M-long row of positive values is ~1e6 times a term. Here the carry is a
two-float (hi, lo) pair updated by Knuth's two-sum: each add's rounding error
is computed exactly and kept in lo, so hi + lo is the sum of the fp32 chunk
totals up to errors of order eps^2, whatever their signs and magnitudes (a NaN
or infinite total disables the compensation, which has nothing left to
correct). A chunk's output is hi + (local + lo): one rounding of the true
running total plus the in-chunk scan's own error (a tree over at most a few
thousand values). So every element is within a few fp32 roundings of the
fp64 prefix sum at any row length, the verifier's fp32 standard.

Registers on sm_90: 64 a thread for a 4096-wide chunk at 8 warps (16 values a
thread, the scan's temporaries beside them), under 50 for the chunk kernels.

BLOCK_ROWS, BLOCK_COLS and num_warps at each launch, CHUNK_BLOCK_COLS, MIN_CHUNK_BLOCK_COLS
and ROW_PROGRAMS_PER_SM are knobs for kgen's search (any value is correct:
tails are masked); BLOCK_COLS = next_power_of_2(n_cols) for short rows covers
the row and is correctness. Offsets are int64 and the strides of x are
honoured; the output is a new contiguous tensor.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

#: column chunk of a long row walked by one program (16 KB of fp32)
BLOCK_COLS_LONG = 4096
#: chunk of the three-phase scan, and the smallest it shrinks to for parallelism
CHUNK_BLOCK_COLS = 4096
MIN_CHUNK_BLOCK_COLS = 1024
#: scan down an earlier dim: adjacent columns per program, and L rows per step
COL_BLOCK_INNER = 128
COL_BLOCK_L = 32


@triton.jit
def _src(i, n):
    """Element i of the scanned sequence is x[n - 1 - i]: the scan runs from the far end."""
    return n - 1 - i


@triton.jit
def _src_ok(i, n):
    return i < n


@triton.jit
def _dst(i, n):
    """Its running total is stored where it was read: y[n - 1 - i]."""
    return n - 1 - i


@triton.jit
def _two_sum(hi, lo, b):
    """(hi, lo) + b with the rounding error of hi + b kept in lo (Knuth's two-sum, any order of
    magnitudes); a non-finite sum leaves lo as it was."""
    s = hi + b
    bp = s - hi
    err = (hi - (s - bp)) + (b - bp)
    return s, lo + tl.where(tl.abs(s) < float("inf"), err, 0.0)


@triton.jit
def _cumsum_rows(
    x_ptr, y_ptr, n_rows, n_cols, stride_row, stride_col,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """Rows [pid*BLOCK_ROWS, ...) walked in BLOCK_COLS chunks with a compensated carry per row."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    x_row = x_ptr + rows.to(tl.int64)[:, None] * stride_row  # int64: rows * stride can pass 2^31
    y_row = y_ptr + rows.to(tl.int64)[:, None] * n_cols
    hi = tl.zeros((BLOCK_ROWS,), dtype=tl.float32)
    lo = tl.zeros((BLOCK_ROWS,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = row_mask[:, None] & (cols < n_cols)[None, :]
        x = tl.load(x_row + _src(cols, n_cols).to(tl.int64)[None, :] * stride_col,
                    mask=row_mask[:, None] & _src_ok(cols, n_cols)[None, :], other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        local = tl.cumsum(x, axis=1)
        tl.store(y_row + _dst(cols, n_cols)[None, :], hi[:, None] + (local + lo[:, None]), mask=mask)
        hi, lo = _two_sum(hi, lo, tl.sum(x, axis=1))


@triton.jit
def _chunk_totals(x_ptr, totals_ptr, n_cols, stride_row, stride_col, n_chunks, BLOCK_COLS: tl.constexpr):
    """Phase 1, program (c, r): totals[r, c] = the tree sum of chunk c of row r."""
    chunk = tl.program_id(0)
    row = tl.program_id(1)
    cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    x = tl.load(x_ptr + row.to(tl.int64) * stride_row + _src(cols, n_cols).to(tl.int64) * stride_col,
                mask=_src_ok(cols, n_cols), other=0.0).to(tl.float32)
    tl.store(totals_ptr + row.to(tl.int64) * n_chunks + chunk, tl.sum(x, axis=0))


@triton.jit
def _chunk_prefixes(totals_ptr, hi_ptr, lo_ptr, n_chunks, BLOCK_CHUNKS: tl.constexpr):
    """Phase 2, one program per row: (hi, lo)[r, c] = the exclusive prefix of the chunk totals,
    as a compensated pair. The inclusive prefix of chunk c is stored at c + 1 (a shifted
    store), so entry 0 is 0 and entry c is the exclusive prefix."""
    row = tl.program_id(0)
    base = row.to(tl.int64) * (n_chunks + 1)
    tl.store(hi_ptr + base, 0.0)
    tl.store(lo_ptr + base, 0.0)
    hi = 0.0
    lo = 0.0
    for start in range(0, n_chunks, BLOCK_CHUNKS):
        idx = start + tl.arange(0, BLOCK_CHUNKS)
        mask = idx < n_chunks
        t = tl.load(totals_ptr + row.to(tl.int64) * n_chunks + idx, mask=mask, other=0.0)
        # each prefix as the carry plus the block's own scan, compensated element-wise
        p_hi, p_lo = _two_sum(hi, lo, tl.cumsum(t, axis=0))
        tl.store(hi_ptr + base + 1 + idx, p_hi, mask=mask)
        tl.store(lo_ptr + base + 1 + idx, p_lo, mask=mask)
        hi, lo = _two_sum(hi, lo, tl.sum(t, axis=0))


@triton.jit
def _chunk_scan(x_ptr, y_ptr, hi_ptr, lo_ptr, n_cols, stride_row, stride_col, n_chunks, BLOCK_COLS: tl.constexpr):
    """Phase 3, program (c, r): chunk c of row r scanned in registers plus its exclusive prefix."""
    chunk = tl.program_id(0)
    row = tl.program_id(1)
    cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    x = tl.load(x_ptr + row.to(tl.int64) * stride_row + _src(cols, n_cols).to(tl.int64) * stride_col,
                mask=_src_ok(cols, n_cols), other=0.0, eviction_policy="evict_first").to(tl.float32)
    k = row.to(tl.int64) * (n_chunks + 1) + chunk
    hi = tl.load(hi_ptr + k)
    lo = tl.load(lo_ptr + k)
    tl.store(y_ptr + row.to(tl.int64) * n_cols + _dst(cols, n_cols), hi + (tl.cumsum(x, axis=0) + lo), mask=mask)


@triton.jit
def _cumsum_columns(x_ptr, y_ptr, n_len, n_inner, n_inner_blocks, BLOCK_L: tl.constexpr, BLOCK_INNER: tl.constexpr):
    """Program t = (outer index, inner block): BLOCK_INNER adjacent columns of one [L, inner]
    slab scanned down L in BLOCK_L steps, each column with its own compensated carry."""
    tile = tl.program_id(0)
    outer = tile // n_inner_blocks
    inner = (tile % n_inner_blocks) * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    inner_mask = inner < n_inner
    base = outer.to(tl.int64) * n_len * n_inner  # int64: outer * L * inner can pass 2^31
    hi = tl.zeros((BLOCK_INNER,), dtype=tl.float32)
    lo = tl.zeros((BLOCK_INNER,), dtype=tl.float32)
    for start in range(0, n_len, BLOCK_L):
        ls = start + tl.arange(0, BLOCK_L)
        mask = (ls < n_len)[:, None] & inner_mask[None, :]
        src = base + _src(ls, n_len).to(tl.int64)[:, None] * n_inner + inner[None, :]
        x = tl.load(x_ptr + src, mask=_src_ok(ls, n_len)[:, None] & inner_mask[None, :], other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        local = tl.cumsum(x, axis=0)
        dst = base + _dst(ls, n_len).to(tl.int64)[:, None] * n_inner + inner[None, :]
        tl.store(y_ptr + dst, hi[None, :] + (local + lo[None, :]), mask=mask)
        hi, lo = _two_sum(hi, lo, tl.sum(x, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.numel() == 0:  # nothing to scan
            return y
        shape = list(x.shape) or [1]  # a 0-d tensor scans as one value
        dim = self.dim % len(shape)
        x = x.contiguous()  # the [outer, L, inner] view needs the standard layout
        n_len = shape[dim]
        n_inner = math.prod(shape[dim + 1:])
        n_outer = x.numel() // (n_len * n_inner)
        if n_inner == 1:
            self._scan_rows(x.view(n_outer, n_len), y.view(n_outer, n_len))
            return y
        block_inner = min(triton.next_power_of_2(n_inner), COL_BLOCK_INNER)
        inner_blocks = triton.cdiv(n_inner, block_inner)
        _cumsum_columns[(n_outer * inner_blocks,)](
            x, y, n_len, n_inner, inner_blocks, BLOCK_L=COL_BLOCK_L, BLOCK_INNER=block_inner, num_warps=4,
        )
        return y

    @staticmethod
    def _scan_rows(x2d, y):
        """The catalog cumsum seed's launches: contiguous rows of x2d scanned into y."""
        n_rows, n_cols = x2d.shape
        sx0, sx1 = x2d.stride(0), x2d.stride(1)
        ROW_PROGRAMS_PER_SM = 2
        sms = torch.cuda.get_device_properties(x2d.device).multi_processor_count if x2d.is_cuda else 4  # the interpreter: any count
        min_programs = ROW_PROGRAMS_PER_SM * sms
        block_cols = triton.next_power_of_2(n_cols)
        if block_cols <= 1024:
            # short rows: several whole rows per program, one chunk each
            _cumsum_rows[(triton.cdiv(n_rows, 4),)](
                x2d, y, n_rows, n_cols, sx0, sx1, BLOCK_ROWS=4, BLOCK_COLS=block_cols, num_warps=4,
            )
        elif n_rows >= min_programs or n_cols <= BLOCK_COLS_LONG:
            # rows fill the GPU (or fit one chunk): one row per program, chunks walked in order
            _cumsum_rows[(triton.cdiv(n_rows, 1),)](
                x2d, y, n_rows, n_cols, sx0, sx1,
                BLOCK_ROWS=1, BLOCK_COLS=min(block_cols, BLOCK_COLS_LONG), num_warps=8,
            )
        else:
            # few long rows: three-phase scan over chunks, chunks shrunk until the GPU is busy
            chunk = CHUNK_BLOCK_COLS
            while chunk > MIN_CHUNK_BLOCK_COLS and n_rows * triton.cdiv(n_cols, chunk) < min_programs:
                chunk //= 2
            n_chunks = triton.cdiv(n_cols, chunk)
            totals = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x2d.device)
            prefix_hi = torch.empty((n_rows, n_chunks + 1), dtype=torch.float32, device=x2d.device)
            prefix_lo = torch.empty((n_rows, n_chunks + 1), dtype=torch.float32, device=x2d.device)
            _chunk_totals[(n_chunks, n_rows)](x2d, totals, n_cols, sx0, sx1, n_chunks, BLOCK_COLS=chunk, num_warps=8)
            _chunk_prefixes[(n_rows,)](
                totals, prefix_hi, prefix_lo, n_chunks,
                BLOCK_CHUNKS=min(triton.next_power_of_2(n_chunks), 1024), num_warps=4,
            )
            _chunk_scan[(n_chunks, n_rows)](
                x2d, y, prefix_hi, prefix_lo, n_cols, sx0, sx1, n_chunks, BLOCK_COLS=chunk, num_warps=8,
            )
