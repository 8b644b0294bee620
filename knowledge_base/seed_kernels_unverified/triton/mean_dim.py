"""Mean over any one dim (the dim dropped) in Triton: x viewed as [outer, L, inner], reduced along L,
fp32; the sum_dim seed's kernels with the sums scaled by 1/L as they are stored.

torch.mean(x, dim) for any ``dim``: the tensor (made contiguous)
is the 3-D view [outer, L, inner], with L the reduced dim, outer the product
of the dims before it and inner of those after it. Nothing about the dim or
the sizes is fixed; two memory patterns follow from the view:

* inner == 1 (the last dim: contiguous rows, as ``row_sum``): a program takes
  a [BLOCK_ROWS, BLOCK_COLS] tile of whole rows, L across lanes, and loops over
  the row in BLOCK_COLS chunks with a lane-wise fp32 accumulator (a thread's
  registers do not grow with L), reduced once at the end.
* inner > 1 (a middle or first dim: every output is a column of an [L, inner]
  slab): a program takes a [BLOCK_L, BLOCK_INNER] tile with the contiguous
  inner dim across lanes (coalesced loads: reading "down" the reduced dim one
  output per thread would touch a new cache line per element), walks L in
  BLOCK_L steps and sums axis 0 at the end. KernelBench's 128 x 4096 x 4095
  (dim 1) gives 128 x 32 programs of 32 KB steps.

What bounds it: bytes. Each element is read once (4 B fp32) and outputs are
1/L of that; 32 x 1024 x 1024 fp32 reads 128 MB, ~43 us at the H100's ~3.0 TB/s
copy bandwidth. Every tile is ~8192 elements (32 KB of fp32 in flight per
program, 32 values a thread at 8 warps), so two or more programs per SM keep
HBM busy. Few outputs with a long L (2 x 65537 x 5, or a 1-row sum) would
leave SMs idle, so L is split across programs when the tiles alone give fewer
than PROGRAMS_PER_SM per SM: program (tile, s) writes an fp32 partial for its
range of L into partials[s, :], and a second small kernel adds each output's
partials in one fixed order. No atomics: the same input gives the same bits
on every run. With one split the sums go straight to the output.

The mean is the sum times 1/L, applied where each sum (or each split's
partial, the scale being linear) is stored: one rounding more than the sum.
Precision: fp32 accumulation lane-wise (each lane adds L / BLOCK_COLS terms,
at most a few thousand) then a tree across lanes: for fp32 inputs this is the
verifier's fp32 standard; bf16 inputs are widened as loaded. Masked lanes
load 0. Offsets are int64 (outer * L * inner passes 2^31 at KernelBench's
size). An empty reduced dim gives nan (0 / 0, as torch's mean of nothing).

BLOCK_ROWS and num_warps at each launch, LOOP_BLOCK_COLS, COL_BLOCK_INNER,
COL_BLOCK_ELEMS and PROGRAMS_PER_SM are knobs for kgen's search (any value is
correct: tails are masked); BLOCK_COLS = next_power_of_2(L) for short rows
covers the row and is correctness, not a knob.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

#: rows per tile by row width (every tile ~8192 elements, 32 values a thread at 8 warps)
NARROW_BLOCK_ROWS = 32  # rows up to 256 wide
MID_BLOCK_ROWS = 8  # up to 1024
WIDE_BLOCK_ROWS = 2  # up to 4096
#: column chunk of the looped row launch (one row per program, rows wider than 4096)
LOOP_BLOCK_COLS = 4096
#: strided reduction: contiguous inner elements per tile row, and elements per tile
COL_BLOCK_INNER = 256
COL_BLOCK_ELEMS = 8192


@triton.jit
def _sum_rows(x_ptr, part_ptr, n_rows, n_cols, cols_per_split, scale,
              BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Program (r, s): sums of rows [r*BLOCK_ROWS, ...) over split s's column range, into part[s, rows]."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    split = tl.program_id(1)
    row_mask = rows < n_rows
    row_ptr = x_ptr + rows.to(tl.int64)[:, None] * n_cols  # int64: rows * cols can pass 2^31
    col_start = split * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    acc = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)  # lane-wise: one tree sum at the end
    for start in range(col_start, col_end, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = row_mask[:, None] & (cols < col_end)[None, :]
        acc += tl.load(row_ptr + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(part_ptr + split.to(tl.int64) * n_rows + rows, (tl.sum(acc, axis=1) * scale).to(part_ptr.dtype.element_ty), mask=row_mask)


@triton.jit
def _sum_columns(x_ptr, part_ptr, n_len, n_inner, n_inner_blocks, n_out, len_per_split, scale,
                 BLOCK_L: tl.constexpr, BLOCK_INNER: tl.constexpr):
    """Program (t, s), t = (outer index, inner block): the sums over split s's range of L of
    BLOCK_INNER adjacent columns of one [L, inner] slab, into part[s, outputs]."""
    tile = tl.program_id(0)
    split = tl.program_id(1)
    outer = tile // n_inner_blocks
    inner = (tile % n_inner_blocks) * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    inner_mask = inner < n_inner
    slab = x_ptr + outer.to(tl.int64) * n_len * n_inner
    l_start = split * len_per_split
    l_end = tl.minimum(l_start + len_per_split, n_len)
    acc = tl.zeros((BLOCK_L, BLOCK_INNER), dtype=tl.float32)
    for start in range(l_start, l_end, BLOCK_L):
        ls = start + tl.arange(0, BLOCK_L)
        mask = (ls < l_end)[:, None] & inner_mask[None, :]
        ptrs = slab + ls.to(tl.int64)[:, None] * n_inner + inner[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    out = outer.to(tl.int64) * n_inner + inner
    tl.store(part_ptr + split.to(tl.int64) * n_out + out, (tl.sum(acc, axis=0) * scale).to(part_ptr.dtype.element_ty),
             mask=inner_mask)


@triton.jit
def _sum_splits(part_ptr, out_ptr, n_out, n_splits, BLOCK: tl.constexpr):
    """out[j] = part[0, j] + ... + part[n_splits - 1, j], in that order: the same bits every run."""
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = j < n_out
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, n_splits):
        acc += tl.load(part_ptr + s * n_out + j, mask=mask, other=0.0)
    tl.store(out_ptr + j, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _splits(tiles: int, n_len: int, block: int, target_programs: int) -> tuple[int, int]:
    """(splits of L, length per split): L split only while the tiles leave SMs idle, in whole blocks."""
    n_chunks = max(triton.cdiv(n_len, block), 1)
    n_splits = min(triton.cdiv(target_programs, tiles), n_chunks)
    per_split = triton.cdiv(n_chunks, n_splits) * block
    return max(triton.cdiv(n_len, per_split), 1), per_split


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        dim = self.dim % x.dim()
        shape = list(x.shape)
        n_len = shape[dim]
        n_inner = 1
        for s in shape[dim + 1:]:
            n_inner *= s
        n_out = x.numel() // n_len if n_len else 0
        out_shape = shape[:dim] + shape[dim + 1:]
        out_dtype = torch.promote_types(x.dtype, torch.float32)
        out = torch.empty(out_shape, dtype=out_dtype, device=x.device)
        if out.numel() == 0:
            return out
        if n_len == 0:  # the mean of nothing
            return out.fill_(float("nan"))
        x = x.contiguous()  # the [outer, L, inner] view needs the standard layout
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4  # the interpreter: any count
        PROGRAMS_PER_SM = 4
        target_programs = PROGRAMS_PER_SM * sms
        if n_inner == 1:
            block_cols = triton.next_power_of_2(n_len)
            if block_cols <= 256:
                block_rows = NARROW_BLOCK_ROWS
            elif block_cols <= 1024:
                block_rows = MID_BLOCK_ROWS
            elif block_cols <= 4096:
                block_rows = WIDE_BLOCK_ROWS
            else:
                block_rows, block_cols = 1, LOOP_BLOCK_COLS
            row_blocks = triton.cdiv(n_out, block_rows)
            n_splits, per_split = _splits(row_blocks, n_len, block_cols, target_programs)
            part = out if n_splits == 1 else torch.empty((n_splits, n_out), dtype=torch.float32, device=x.device)
            _sum_rows[(row_blocks, n_splits)](
                x, part, n_out, n_len, per_split, 1.0 / n_len, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, num_warps=8,
            )
        else:
            block_inner = min(triton.next_power_of_2(n_inner), COL_BLOCK_INNER)
            block_l = max(COL_BLOCK_ELEMS // block_inner, 1)
            inner_blocks = triton.cdiv(n_inner, block_inner)
            tiles = (n_out // n_inner) * inner_blocks
            n_splits, per_split = _splits(tiles, n_len, block_l, target_programs)
            part = out if n_splits == 1 else torch.empty((n_splits, n_out), dtype=torch.float32, device=x.device)
            _sum_columns[(tiles, n_splits)](
                x, part, n_len, n_inner, inner_blocks, n_out, per_split, 1.0 / n_len,
                BLOCK_L=block_l, BLOCK_INNER=block_inner, num_warps=8,
            )
        if n_splits > 1:
            BLOCK_SPLIT_SUM = 1024
            _sum_splits[(triton.cdiv(n_out, BLOCK_SPLIT_SUM),)](
                part, out, n_out, n_splits, BLOCK=BLOCK_SPLIT_SUM, num_warps=4,
            )
        return out
