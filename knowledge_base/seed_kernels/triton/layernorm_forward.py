"""LayerNorm forward in Triton: a tile of whole rows per program, chunked rows past a width.

What bounds it: bytes. Each element is read once (x, bf16) and written once
(y, bf16); weight and bias are a few KB that stay in L2. At ~3 TB/s of copy
bandwidth a 128 MB x takes ~85 us to stream in and out; the arithmetic (two
row reductions and an FMA per element) is a rounding error next to that. So
the only goals are: every byte moved once, fp32 maths in registers, and
enough loads in flight on every SM to cover DRAM latency (Little's law:
~3.3 TB/s x ~1 us is ~25 KB outstanding per SM).

Why the tiles. A program that owns one 2 KB row (hidden 1024) has far too
little in flight and pays its launch and reductions for every 2 KB, so narrow
rows are processed several at a time as a [BLOCK_ROWS, BLOCK_COLS] tile:
BLOCK_ROWS = tile elements // padded row width, per size class. Each tile is
loaded with 16-byte vector loads and kept in registers for both reductions
(the mean, then the variance of the centred values: two passes over
registers, one over memory). num_warps sets the elements each thread holds
(tile / (32 * num_warps)): ~16-32 gives each thread several independent
16-byte loads without pushing registers so high that fewer programs fit on
an SM. Programs are not persistent: a grid of cdiv(rows, BLOCK_ROWS) small
programs lets the hardware keep several per SM resident, and their loads
overlap one another's reductions.

Wide rows. A whole 16384-wide row in registers is 64 KB of fp32 per
program; it still fits without spilling. The hand-picked 8 warps (64 values
per thread, ~127 registers on sm_90) let two programs share an SM; kgen's
sweep on an H100 (scripts/library_sweep.py, 2026-11-27) found 16 warps (~76
registers, 32 values per thread) 9% faster at hidden 16384 (0.098 ms against
0.108 ms): a lone program per SM still has a 32 KB row of loads in flight, and
its two row reductions run over half as many values per thread. So rows up to
BLOCK_FUSED_MAX stay whole, at NUM_WARPS_WIDE warps. Wider rows take the chunked kernel:
a persistent grid (WIDE_PROGRAMS_PER_SM per SM, bounding how many rows are
in flight so their re-read still hits L2) walks rows; per row it streams
chunks of BLOCK_CHUNK columns, merging each chunk's (mean, M2) into the
row's with Chan's formula (numerically the same as a two-pass variance,
unlike E[x^2] - E[x]^2, which cancels for mean-shifted rows), then re-reads
the row (from L2, loaded with evict_last the first time) to write y.

Size classes (padded width <= NARROW_MAX_COLS, <= MEDIUM_MAX_COLS, wider)
each have their own knobs, so tuning one width class leaves the others as
they were. The statistics are fp32 throughout; masked lanes are zeroed after
centring so they add nothing to the variance.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# Size classes by padded row width (a correctness-neutral split, not knobs).
NARROW_MAX_COLS = 2048
MEDIUM_MAX_COLS = 8192

# Knobs. Tile elements per program and warps per program, per size class.
BLOCK_TILE_NARROW = 4096
NUM_WARPS_NARROW = 4
BLOCK_TILE_MEDIUM = 8192
NUM_WARPS_MEDIUM = 8
NUM_WARPS_WIDE = 16
# Widest padded row kept whole in registers; wider rows are chunked.
BLOCK_FUSED_MAX = 16384
# The chunked kernel: columns per chunk, and programs per SM of its persistent grid.
BLOCK_CHUNK = 4096
NUM_WARPS_CHUNKED = 8
WIDE_PROGRAMS_PER_SM = 4


@triton.jit
def _layernorm_fwd_tile(
    x_ptr, weight_ptr, bias_ptr, y_ptr,
    n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31
    x = tl.load(
        x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0,
        eviction_policy="evict_first",
    ).to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    centred = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(centred * centred, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = centred * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_fwd_chunked(
    x_ptr, weight_ptr, bias_ptr, y_ptr,
    n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_COLS: tl.constexpr,
):
    n_programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_COLS)
    for row in range(tl.program_id(0), n_rows, n_programs):
        x_row = x_ptr + row.to(tl.int64) * stride_x
        y_row = y_ptr + row.to(tl.int64) * stride_y
        # pass 1: chunk statistics merged with Chan's formula (count, mean, M2), all fp32
        count = 0.0
        mean = 0.0
        m2 = 0.0
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            n_chunk = tl.minimum(n_cols - start, BLOCK_COLS).to(tl.float32)
            mean_chunk = tl.sum(x, axis=0) / n_chunk
            d = tl.where(mask, x - mean_chunk, 0.0)
            m2_chunk = tl.sum(d * d, axis=0)
            total = count + n_chunk
            delta = mean_chunk - mean
            mean = mean + delta * (n_chunk / total)
            m2 = m2 + m2_chunk + delta * delta * (count * n_chunk / total)
            count = total
        rstd = 1.0 / tl.sqrt(m2 / n_cols + eps)
        # pass 2: the row again (an L2 hit), normalised and written once
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _rows_view(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    """``t`` as [rows, n_cols] with unit column stride (a view when the layout allows)."""
    rows = t.reshape(-1, n_cols)
    return rows if rows.stride(-1) == 1 or n_cols <= 1 else rows.contiguous()


class ModelNew(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        n_cols = x.shape[-1]
        x_rows = _rows_view(x, n_cols)
        weight, bias = weight.contiguous(), bias.contiguous()
        n_rows = x_rows.shape[0]
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        if n_rows == 0 or n_cols == 0:
            return y.view(x.shape)
        block_cols = triton.next_power_of_2(n_cols)  # the whole row: correctness, not a knob
        if block_cols <= BLOCK_FUSED_MAX:
            if block_cols <= NARROW_MAX_COLS:
                tile, warps = BLOCK_TILE_NARROW, NUM_WARPS_NARROW
            elif block_cols <= MEDIUM_MAX_COLS:
                tile, warps = BLOCK_TILE_MEDIUM, NUM_WARPS_MEDIUM
            else:
                tile, warps = block_cols, NUM_WARPS_WIDE
            tile_rows = tile // min(tile, block_cols)  # powers of two: at least one row
            _layernorm_fwd_tile[(triton.cdiv(n_rows, tile_rows),)](
                x_rows, weight, bias, y,
                n_rows, n_cols, x_rows.stride(0), y.stride(0), self.eps,
                BLOCK_ROWS=tile_rows, BLOCK_COLS=block_cols, num_warps=warps,
            )
        else:
            sm_count = torch.cuda.get_device_properties(x.device).multi_processor_count
            n_programs = min(n_rows, WIDE_PROGRAMS_PER_SM * sm_count)
            _layernorm_fwd_chunked[(n_programs,)](
                x_rows, weight, bias, y,
                n_rows, n_cols, x_rows.stride(0), y.stride(0), self.eps,
                BLOCK_COLS=BLOCK_CHUNK, num_warps=NUM_WARPS_CHUNKED,
            )
        return y.view(x.shape)
