"""Row sum in Triton: bf16 [ROWS, COLS] -> fp32 sums, [BLOCK_ROWS, BLOCK_COLS] tiles, rows split when too few.

What bounds it: bytes. Each element of x is read once (2 B) and the output is
4 B per row, so at 16384 x 4096 (128 MB read) the kernel can only be as fast as
HBM streams x: ~3.0 TB/s copy bandwidth on an H100, about 45 us. The adds are
one instruction per element; the kernel's whole job is keeping enough loads
in flight and never reading a byte twice.

Bytes in flight: HBM needs ~25 KB outstanding per SM (Little's law: ~3.3 TB/s x
~1 us over 132 SMs). One program per 8 KB row that loads, reduces and stores
has too little in flight, so a program takes a [BLOCK_ROWS, BLOCK_COLS] tile
(BLOCK_ROWS rows with one set of vector loads), and each thread holds only
its 32 values of the tile (32-48 registers on sm_90), so several programs share an SM and
one's reduction overlaps another's loads. The launch is picked from the row
width, every tile ~8192 elements (16 KB of bf16) at 8 warps:

* rows up to 256 wide: BLOCK_ROWS=32;
* up to 1024: BLOCK_ROWS=8;
* up to 4096: BLOCK_ROWS=4 (the default size: 4096 programs of 32 KB; kgen's
  sweep on an H100 moved it from 2, 10% faster at 4096 and 16384 wide);
* wider rows: one row per program, looping over LOOP_BLOCK_COLS-wide chunks.
  The fp32 accumulator stays a [BLOCK_ROWS, BLOCK_COLS] tile added lane by
  lane, so a thread's registers do not grow with the row, and is reduced
  once at the end.

Few long rows (5 x 262147: five programs for 132 SMs) would leave the GPU
idle, so a row is split across programs when the row tiles alone give fewer
than PROGRAMS_PER_SM programs per SM: program (r, s) sums its contiguous column
range into an fp32 partial [ROWS, SPLITS], and a second small kernel adds each
row's partials in one fixed tree. The result never depends on which program
finishes first (no atomics): the same input gives the same bits on every run.
With one split (any shape whose rows fill the GPU) the first kernel writes the
sums straight into the output and the second is never launched.

BLOCK_ROWS and num_warps at each launch, LOOP_BLOCK_COLS and PROGRAMS_PER_SM are
knobs for kgen's search (any value is correct: tail rows and columns are
masked); BLOCK_COLS = next_power_of_2(n_cols) of the tile launches covers the
row and is correctness, not a knob.

Precision: bf16 has 8 significant bits, so a bf16 running sum of thousands of
terms loses about two digits; x is widened to fp32 as it is loaded, each lane
adds its share of the row in fp32 (at most a few dozen terms per lane per
program), and the lanes are combined by Triton's tree reduction. Masked lanes
load 0 and add nothing. Offsets are int64 (rows * stride passes 2^31 at large
sizes), and the strides of x are honoured (a view is read where it lies; unit
column stride is specialised by Triton, so a contiguous row is read with
16-byte vector loads when its start is 16-byte aligned; rows of an odd width
such as 1531 are not, and are read with narrower loads).

Measured (H100, 2026-11-28, kgen bench): 4096 x 4096 0.051 ms, 88% of copy (the same speed
as torch.compile); 16384 wide 99%; an awkward shape 66%.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

#: rows per tile by row width (every tile ~8192 elements, 32 values a thread at 8 warps)
NARROW_BLOCK_ROWS = 32  # rows up to 256 wide
MID_BLOCK_ROWS = 8  # up to 1024
WIDE_BLOCK_ROWS = 4  # up to 4096
#: column chunk of the looped launch (one row per program, rows wider than 4096)
LOOP_BLOCK_COLS = 4096


@triton.jit
def _row_sum_tiles(
    x_ptr, out_ptr,
    n_rows, n_cols, stride_row, stride_col,
    cols_per_split, out_stride_row,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """Program (r, s): the sums of rows [r*BLOCK_ROWS, (r+1)*BLOCK_ROWS) over the column range of split s."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    split = tl.program_id(1)
    row_mask = rows < n_rows
    row_ptr = x_ptr + rows.to(tl.int64)[:, None] * stride_row  # int64: rows * stride can pass 2^31
    col_start = split * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    # lane-wise fp32 accumulator: each lane adds its column of every chunk, one tree sum at the end
    acc = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)
    for start in range(col_start, col_end, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = row_mask[:, None] & (cols < col_end)[None, :]
        x = tl.load(row_ptr + cols.to(tl.int64)[None, :] * stride_col, mask=mask, other=0.0,
                    eviction_policy="evict_first")
        acc += x.to(tl.float32)
    total = tl.sum(acc, axis=1)
    tl.store(out_ptr + rows.to(tl.int64) * out_stride_row + split, total, mask=row_mask)


@triton.jit
def _row_sum_combine(partial_ptr, out_ptr, n_splits, BLOCK_SPLITS: tl.constexpr):
    """out[r] = the tree sum of partial[r, :n_splits]: a fixed order, so the same bits every run."""
    row = tl.program_id(0)
    splits = tl.arange(0, BLOCK_SPLITS)
    p = tl.load(partial_ptr + row.to(tl.int64) * n_splits + splits, mask=splits < n_splits, other=0.0)
    tl.store(out_ptr + row, tl.sum(p, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_cols = x.shape[-1]
        out = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
        n_rows = out.numel()
        x2d = x.reshape(n_rows, n_cols)  # a view for 2-D inputs: strides are passed to the kernel
        if n_rows == 0:
            return out
        block_cols = triton.next_power_of_2(max(n_cols, 1))
        if block_cols <= 256:
            block_rows = NARROW_BLOCK_ROWS
        elif block_cols <= 1024:
            block_rows = MID_BLOCK_ROWS
        elif block_cols <= 4096:
            block_rows = WIDE_BLOCK_ROWS
        else:
            block_rows, block_cols = 1, LOOP_BLOCK_COLS

        # split rows across programs only when the row tiles leave SMs idle
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4  # the interpreter: any count
        PROGRAMS_PER_SM = 4
        target_programs = PROGRAMS_PER_SM * sms
        row_blocks = triton.cdiv(n_rows, block_rows)
        n_chunks = max(triton.cdiv(n_cols, block_cols), 1)
        n_splits = min(triton.cdiv(target_programs, row_blocks), n_chunks)
        cols_per_split = triton.cdiv(n_chunks, n_splits) * block_cols
        n_splits = max(triton.cdiv(n_cols, cols_per_split), 1)  # no empty splits
        # one split: the sums go straight to the output; else to fp32 partials, combined below
        partials = out if n_splits == 1 else torch.empty((n_rows, n_splits), dtype=torch.float32, device=x.device)
        _row_sum_tiles[(row_blocks, n_splits)](
            x2d, partials, n_rows, n_cols, x2d.stride(0), x2d.stride(1), cols_per_split, n_splits,
            BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, num_warps=8,
        )
        if n_splits > 1:
            _row_sum_combine[(n_rows,)](
                partials, out, n_splits, BLOCK_SPLITS=triton.next_power_of_2(n_splits), num_warps=4,
            )
        return out
