"""Min over any one dim (values, the dim dropped) in Triton: x viewed as [outer, L, inner], reduced
along L in x's own dtype, NaN propagated as torch does.

torch.min(x, dim)[0] for any ``dim``: the tensor (made contiguous) is the 3-D
view [outer, L, inner], L the reduced dim, outer the product of the dims before
it and inner of those after it. The structure is the sum_dim seed's, with min
for + (a min is exact: the output is one of the inputs, bit for bit, so the
values stay in x's dtype and nothing is widened):

* inner == 1 (the last dim: contiguous rows): a program takes a
  [BLOCK_ROWS, BLOCK_COLS] tile of whole rows, L across lanes, and loops over
  the row in BLOCK_COLS chunks with a lane-wise running min (a thread's
  registers do not grow with L), reduced across lanes once at the end.
* inner > 1 (a middle or first dim: every output is a column of an [L, inner]
  slab): a [BLOCK_L, BLOCK_INNER] tile with the contiguous inner dim across
  lanes (coalesced loads), walking L in BLOCK_L steps, min down axis 0 at the
  end. KernelBench's 128 x 4096 x 4095 (dim 1) gives 128 x 32 programs.

What bounds it: bytes, as for any reduction: each element read once (4 B
fp32), outputs 1/L of that; 32 x 1024 x 1024 fp32 reads 128 MB, ~43 us at the
H100's ~3.0 TB/s copy bandwidth. Every tile is ~8192 elements (32 KB of fp32
in flight per program). Few outputs with a long L (2 x 65537 x 5) would leave
SMs idle, so L is split across programs when the tiles alone give fewer than
PROGRAMS_PER_SM per SM: partial minima in partials[s, :], then a small kernel
takes each output's min over its splits. No atomics; a min does not depend
on order anyway.

NaN: torch.min returns NaN for a slice holding one. Triton's min reductions
use minnum (a NaN loses to any number), so the lane-wise step uses
tl.minimum(..., propagate_nan=ALL) and the final tree is tl.min made NaN where a
lane holds one (a second, integer tree: a custom tl.reduce combine would do the
same in one, but runs element by element in the CPU interpreter).
Masked lanes load +inf, which never wins over a real value. Offsets are int64.

BLOCK_ROWS and num_warps at each launch, LOOP_BLOCK_COLS, COL_BLOCK_INNER,
COL_BLOCK_ELEMS and PROGRAMS_PER_SM are knobs for kgen's search (any value is
correct: tails are masked); BLOCK_COLS = next_power_of_2(L) for short rows
covers the row and is correctness, not a knob. An empty reduced dim is an
error, as in torch.
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
def _pick(a, b):
    """The lane-wise step: the smaller, a NaN on either side winning."""
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _reduce(acc, axis: tl.constexpr):
    """tl.min along ``axis`` (a minnum tree: a NaN loses), made NaN where a lane holds one."""
    has_nan = tl.max((acc != acc).to(tl.int32), axis=axis) > 0
    return tl.where(has_nan, float("nan"), tl.min(acc, axis=axis))


@triton.jit
def _min_rows(x_ptr, part_ptr, n_rows, n_cols, cols_per_split,
              BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Program (r, s): minima of rows [r*BLOCK_ROWS, ...) over split s's column range, into part[s, rows]."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    split = tl.program_id(1)
    row_mask = rows < n_rows
    row_ptr = x_ptr + rows.to(tl.int64)[:, None] * n_cols  # int64: rows * cols can pass 2^31
    col_start = split * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    acc = tl.full((BLOCK_ROWS, BLOCK_COLS), float("inf"), x_ptr.dtype.element_ty)  # lane-wise
    for start in range(col_start, col_end, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = row_mask[:, None] & (cols < col_end)[None, :]
        x = tl.load(row_ptr + cols[None, :], mask=mask, other=float("inf"), eviction_policy="evict_first")
        acc = _pick(acc, x)
    tl.store(part_ptr + split.to(tl.int64) * n_rows + rows, _reduce(acc, 1), mask=row_mask)


@triton.jit
def _min_columns(x_ptr, part_ptr, n_len, n_inner, n_inner_blocks, n_out, len_per_split,
                 BLOCK_L: tl.constexpr, BLOCK_INNER: tl.constexpr):
    """Program (t, s), t = (outer index, inner block): the minima over split s's range of L of
    BLOCK_INNER adjacent columns of one [L, inner] slab, into part[s, outputs]."""
    tile = tl.program_id(0)
    split = tl.program_id(1)
    outer = tile // n_inner_blocks
    inner = (tile % n_inner_blocks) * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    inner_mask = inner < n_inner
    slab = x_ptr + outer.to(tl.int64) * n_len * n_inner
    l_start = split * len_per_split
    l_end = tl.minimum(l_start + len_per_split, n_len)
    acc = tl.full((BLOCK_L, BLOCK_INNER), float("inf"), x_ptr.dtype.element_ty)
    for start in range(l_start, l_end, BLOCK_L):
        ls = start + tl.arange(0, BLOCK_L)
        mask = (ls < l_end)[:, None] & inner_mask[None, :]
        x = tl.load(slab + ls.to(tl.int64)[:, None] * n_inner + inner[None, :], mask=mask, other=float("inf"),
                    eviction_policy="evict_first")
        acc = _pick(acc, x)
    out = outer.to(tl.int64) * n_inner + inner
    tl.store(part_ptr + split.to(tl.int64) * n_out + out, _reduce(acc, 0), mask=inner_mask)


@triton.jit
def _min_splits(part_ptr, out_ptr, n_out, n_splits, BLOCK: tl.constexpr):
    """out[j] = the min of part[:, j] over the splits."""
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = j < n_out
    acc = tl.load(part_ptr + j, mask=mask)
    for s in range(1, n_splits):
        acc = _pick(acc, tl.load(part_ptr + s * n_out + j, mask=mask))
    tl.store(out_ptr + j, acc, mask=mask)


def _splits(tiles: int, n_len: int, block: int, target_programs: int) -> tuple[int, int]:
    """(splits of L, length per split): L split only while the tiles leave SMs idle, in whole blocks."""
    n_chunks = max(triton.cdiv(n_len, block), 1)
    n_splits = min(triton.cdiv(target_programs, tiles), n_chunks)
    per_split = triton.cdiv(n_chunks, n_splits) * block
    return max(triton.cdiv(n_len, per_split), 1), per_split


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        dim = self.dim % max(x.dim(), 1)
        shape = list(x.shape) or [1]  # a 0-d tensor: its one value
        n_len = shape[dim]
        if n_len == 0:
            raise IndexError("min(): cannot reduce over a dimension of size 0")
        n_inner = 1
        for s in shape[dim + 1:]:
            n_inner *= s
        n_out = x.numel() // n_len
        out = torch.empty(list(x.shape[:dim]) + list(x.shape[dim + 1:]), dtype=x.dtype, device=x.device)
        if out.numel() == 0:
            return out
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
            part = out if n_splits == 1 else torch.empty((n_splits, n_out), dtype=x.dtype, device=x.device)
            _min_rows[(row_blocks, n_splits)](
                x, part, n_out, n_len, per_split, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, num_warps=8,
            )
        else:
            block_inner = min(triton.next_power_of_2(n_inner), COL_BLOCK_INNER)
            block_l = max(COL_BLOCK_ELEMS // block_inner, 1)
            inner_blocks = triton.cdiv(n_inner, block_inner)
            tiles = (n_out // n_inner) * inner_blocks
            n_splits, per_split = _splits(tiles, n_len, block_l, target_programs)
            part = out if n_splits == 1 else torch.empty((n_splits, n_out), dtype=x.dtype, device=x.device)
            _min_columns[(tiles, n_splits)](
                x, part, n_len, n_inner, inner_blocks, n_out, per_split,
                BLOCK_L=block_l, BLOCK_INNER=block_inner, num_warps=8,
            )
        if n_splits > 1:
            BLOCK_SPLIT_MIN = 1024
            _min_splits[(triton.cdiv(n_out, BLOCK_SPLIT_MIN),)](
                part, out, n_out, n_splits, BLOCK=BLOCK_SPLIT_MIN, num_warps=4,
            )
        return out
