"""LayerNorm backward in Triton: grad_x per row, grad_weight and grad_bias from fp32 partials.

What bounds it: bytes. grad_out and x are read (bf16) and grad_x written
(bf16) once each, 6 bytes per element; mean and rstd are 8 bytes per row and
weight a few KB that stays in L2. The maths per element is a handful of
FMAs, so the kernel runs at whatever bandwidth its loads in flight can pull
(Little's law: ~25 KB outstanding per SM at ~3.3 TB/s and ~1 us latency).

The row part. With x_hat = (x - mean) * rstd and gw = grad_out * weight,
grad_x = rstd * (gw - mean(gw) - x_hat * mean(gw * x_hat)): two row
reductions, then one element-wise pass. Up to BLOCK_FUSED_MAX padded columns
a tile of [BLOCK_ROWS, whole row] stays in registers for both, so grad_out
and x are read once. BLOCK_ROWS = tile elements // padded width (per size
class), so narrow rows (hidden 1024, 2 KB) are handled several at a time and
each step has tens of KB in flight; num_warps sets the values each thread
holds (tile / (32 * num_warps)).

The column sums. grad_weight = sum over rows of grad_out * x_hat and
grad_bias = sum of grad_out are reductions over all rows, so each program of
a persistent grid (PROGRAMS_PER_SM per SM, *not* one per row block) owns a
contiguous range of rows and accumulates both sums in fp32 registers across
it (a balanced share: floor or ceil of rows / programs, so no SM idles
while another finishes a longer range), then writes them once as its row of
an fp32 partials buffer
[2, n_programs, n_cols]. A second kernel adds the partials over programs in
a fixed order: deterministic (no atomics, so every run gives the same bits)
and accurate (fp32 partials of ~60 rows each, then an fp32 sum of a few
hundred partials; a bf16 accumulator would lose the small contributions of
long batches). The partials cost 8 bytes per column per program, written and
read once: ~2.7 * n_programs / rows of the main traffic, so programs per SM
is the knob that trades bytes in flight against partial traffic.

Wide rows. Past BLOCK_FUSED_MAX a whole row plus the weight and both
accumulators no longer fit in registers (16384 columns would be 5 x 64 KB of
fp32 per program), so the chunked kernel streams each block of BLOCK_ROWS
rows twice in chunks of BLOCK_CHUNK columns: pass 1 accumulates the two row
sums and adds this block's grad_weight / grad_bias contributions into the
program's own partial row (a read-modify-write that stays in L2, once per
BLOCK_ROWS rows); pass 2 re-reads the block (an L2 hit: pass 1 loads it with
evict_last, and the persistent grid bounds how many blocks are in flight)
and writes grad_x. DRAM still sees each byte once. The defaults (one
16-warp program per SM, [2, 4096] steps: 32 KB of loads in flight per SM,
~92 registers on sm_90) keep what must stay in L2 small: ~17 MB of rows
waiting for their second pass plus ~17 MB of partial rows at hidden 16384,
against H100's 50 MB; four rows per step or two programs per SM would double
one of them.

Registers on sm_90 at the hand-picked settings (no spills): hidden 1024,
[4, 1024] at 4 warps: 128; hidden 4096, [1, 4096] at 8 warps: 102 (two
programs per SM fit, matching MEDIUM_PROGRAMS_PER_SM, so the grid is one
wave). kgen's sweep on an H100 (scripts/library_sweep.py, 2026-11-27) then
found 16 warps for the 4096-wide class 9% faster at hidden 4096 (0.174 ms
against 0.190 ms): half the registers per thread, so each thread's loads and
the row sums' shuffles finish sooner, with the same bytes in flight.

Size classes (padded width <= NARROW_MAX_COLS, <= BLOCK_FUSED_MAX, wider)
each have their own knobs, so tuning one width class leaves the others as
they were.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# Size class boundary by padded row width (a correctness-neutral split, not a knob).
NARROW_MAX_COLS = 2048

# Knobs. Tile elements, warps and programs per SM for whole-row tiles, per size class.
BLOCK_TILE_NARROW = 4096
NUM_WARPS_NARROW = 4
NARROW_PROGRAMS_PER_SM = 2
BLOCK_TILE_MEDIUM = 4096
NUM_WARPS_MEDIUM = 16
MEDIUM_PROGRAMS_PER_SM = 2
# Widest padded row kept whole in registers; wider rows are chunked.
BLOCK_FUSED_MAX = 4096
# The chunked kernel: rows per step, columns per chunk, warps, programs per SM.
BLOCK_ROWS_CHUNKED = 2
BLOCK_CHUNK = 4096
NUM_WARPS_CHUNKED = 16
WIDE_PROGRAMS_PER_SM = 1
# The partials reduction: columns per program, partial rows per step.
BLOCK_COLS_REDUCE = 64
BLOCK_PARTIALS = 32


@triton.jit
def _layernorm_bwd_tile(
    grad_out_ptr, x_ptr, weight_ptr, mean_ptr, rstd_ptr, grad_x_ptr, partial_ptr,
    n_rows, n_cols,
    stride_g, stride_x, stride_dx, stride_mean, stride_rstd, partial_plane,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    # a balanced contiguous share of the rows: every program gets floor or ceil(rows / programs)
    n_programs = tl.num_programs(0)
    row_start = (pid.to(tl.int64) * n_rows // n_programs).to(tl.int32)
    row_end = ((pid.to(tl.int64) + 1) * n_rows // n_programs).to(tl.int32)
    for first in range(row_start, row_end, BLOCK_ROWS):
        rows = first + tl.arange(0, BLOCK_ROWS)
        row_mask = rows < row_end
        mask = row_mask[:, None] & col_mask[None, :]
        rows64 = rows.to(tl.int64)  # int64: rows * stride can pass 2^31
        g = tl.load(
            grad_out_ptr + rows64[:, None] * stride_g + cols[None, :], mask=mask, other=0.0,
            eviction_policy="evict_first",
        ).to(tl.float32)
        x = tl.load(
            x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0,
            eviction_policy="evict_first",
        ).to(tl.float32)
        mu = tl.load(mean_ptr + rows64 * stride_mean, mask=row_mask, other=0.0).to(tl.float32)
        r = tl.load(rstd_ptr + rows64 * stride_rstd, mask=row_mask, other=0.0).to(tl.float32)
        x_hat = tl.where(mask, (x - mu[:, None]) * r[:, None], 0.0)
        gw = g * w[None, :]
        c1 = tl.sum(gw, axis=1) / n_cols
        c2 = tl.sum(gw * x_hat, axis=1) / n_cols
        dx = r[:, None] * (gw - c1[:, None] - x_hat * c2[:, None])
        tl.store(
            grad_x_ptr + rows64[:, None] * stride_dx + cols[None, :], dx.to(grad_x_ptr.dtype.element_ty),
            mask=mask,
        )
        dw_acc += tl.sum(g * x_hat, axis=0)
        db_acc += tl.sum(g, axis=0)
    part = partial_ptr + pid.to(tl.int64) * n_cols + cols
    tl.store(part, dw_acc, mask=col_mask)
    tl.store(part + partial_plane, db_acc, mask=col_mask)


@triton.jit
def _layernorm_bwd_chunked(
    grad_out_ptr, x_ptr, weight_ptr, mean_ptr, rstd_ptr, grad_x_ptr, partial_ptr,
    n_rows, n_cols,
    stride_g, stride_x, stride_dx, stride_mean, stride_rstd, partial_plane,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK_COLS)
    part_row = partial_ptr + pid.to(tl.int64) * n_cols
    for start in range(0, n_cols, BLOCK_COLS):  # this program's partial row starts at zero
        cols = start + offs
        zero = tl.zeros([BLOCK_COLS], dtype=tl.float32)
        tl.store(part_row + cols, zero, mask=cols < n_cols)
        tl.store(part_row + partial_plane + cols, zero, mask=cols < n_cols)
    # a balanced contiguous share of the rows: every program gets floor or ceil(rows / programs)
    n_programs = tl.num_programs(0)
    row_start = (pid.to(tl.int64) * n_rows // n_programs).to(tl.int32)
    row_end = ((pid.to(tl.int64) + 1) * n_rows // n_programs).to(tl.int32)
    for first in range(row_start, row_end, BLOCK_ROWS):
        rows = first + tl.arange(0, BLOCK_ROWS)
        row_mask = rows < row_end
        rows64 = rows.to(tl.int64)
        mu = tl.load(mean_ptr + rows64 * stride_mean, mask=row_mask, other=0.0).to(tl.float32)
        r = tl.load(rstd_ptr + rows64 * stride_rstd, mask=row_mask, other=0.0).to(tl.float32)
        # pass 1: the two row sums, element-wise in registers, reduced once after the row;
        # this block's grad_weight / grad_bias added into the program's partial row
        s1 = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
        s2 = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + offs
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            g = tl.load(
                grad_out_ptr + rows64[:, None] * stride_g + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_last",
            ).to(tl.float32)
            x = tl.load(
                x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_last",
            ).to(tl.float32)
            w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
            x_hat = tl.where(mask, (x - mu[:, None]) * r[:, None], 0.0)
            gw = g * w[None, :]
            s1 += gw
            s2 += gw * x_hat
            dw = tl.load(part_row + cols, mask=col_mask, other=0.0) + tl.sum(g * x_hat, axis=0)
            db = tl.load(part_row + partial_plane + cols, mask=col_mask, other=0.0) + tl.sum(g, axis=0)
            tl.store(part_row + cols, dw, mask=col_mask)
            tl.store(part_row + partial_plane + cols, db, mask=col_mask)
        c1 = tl.sum(s1, axis=1) / n_cols
        c2 = tl.sum(s2, axis=1) / n_cols
        # pass 2: the same rows again (L2 hits), grad_x written once
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + offs
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            g = tl.load(
                grad_out_ptr + rows64[:, None] * stride_g + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_first",
            ).to(tl.float32)
            x = tl.load(
                x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_first",
            ).to(tl.float32)
            w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
            x_hat = (x - mu[:, None]) * r[:, None]
            gw = g * w[None, :]
            dx = r[:, None] * (gw - c1[:, None] - x_hat * c2[:, None])
            tl.store(
                grad_x_ptr + rows64[:, None] * stride_dx + cols[None, :], dx.to(grad_x_ptr.dtype.element_ty),
                mask=mask,
            )


@triton.jit
def _layernorm_bwd_reduce(
    partial_ptr, grad_weight_ptr, grad_bias_ptr,
    n_partials, n_cols, partial_plane,
    BLOCK_PARTIALS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    dw = tl.zeros([BLOCK_PARTIALS, BLOCK_COLS], dtype=tl.float32)
    db = tl.zeros([BLOCK_PARTIALS, BLOCK_COLS], dtype=tl.float32)
    for first in range(0, n_partials, BLOCK_PARTIALS):  # a fixed order: the same bits every run
        parts = first + tl.arange(0, BLOCK_PARTIALS)
        mask = (parts < n_partials)[:, None] & col_mask[None, :]
        offs = parts.to(tl.int64)[:, None] * n_cols + cols[None, :]
        dw += tl.load(partial_ptr + offs, mask=mask, other=0.0)
        db += tl.load(partial_ptr + partial_plane + offs, mask=mask, other=0.0)
    tl.store(grad_weight_ptr + cols, tl.sum(dw, axis=0).to(grad_weight_ptr.dtype.element_ty), mask=col_mask)
    tl.store(grad_bias_ptr + cols, tl.sum(db, axis=0).to(grad_bias_ptr.dtype.element_ty), mask=col_mask)


def _rows_view(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    """``t`` as [rows, n_cols] with unit column stride (a view when the layout allows)."""
    rows = t.reshape(-1, n_cols)
    return rows if rows.stride(-1) == 1 or n_cols <= 1 else rows.contiguous()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, x, weight, mean, rstd):
        n_cols = x.shape[-1]
        g_rows, x_rows = _rows_view(grad_out, n_cols), _rows_view(x, n_cols)
        mean, rstd = mean.reshape(-1), rstd.reshape(-1)
        weight = weight.contiguous()
        n_rows = x_rows.shape[0]
        grad_x = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        grad_weight = torch.empty(n_cols, dtype=weight.dtype, device=x.device)
        grad_bias = torch.empty(n_cols, dtype=weight.dtype, device=x.device)
        if n_cols == 0:
            return grad_x.view(x.shape), grad_weight, grad_bias
        sm_count = torch.cuda.get_device_properties(x.device).multi_processor_count
        block_cols = triton.next_power_of_2(n_cols)  # the whole row: correctness, not a knob
        if block_cols <= BLOCK_FUSED_MAX:
            kernel, step_cols = _layernorm_bwd_tile, block_cols
            if block_cols <= NARROW_MAX_COLS:
                tile, warps, per_sm = BLOCK_TILE_NARROW, NUM_WARPS_NARROW, NARROW_PROGRAMS_PER_SM
            else:
                tile, warps, per_sm = BLOCK_TILE_MEDIUM, NUM_WARPS_MEDIUM, MEDIUM_PROGRAMS_PER_SM
            step_rows = tile // min(tile, block_cols)  # powers of two: at least one row
        else:
            kernel, step_cols = _layernorm_bwd_chunked, BLOCK_CHUNK
            step_rows, warps, per_sm = BLOCK_ROWS_CHUNKED, NUM_WARPS_CHUNKED, WIDE_PROGRAMS_PER_SM
        # at least one program, so the partials (zeros for zero rows) always exist
        n_programs = max(1, min(per_sm * sm_count, triton.cdiv(n_rows, step_rows)))
        partials = torch.empty((2, n_programs, n_cols), dtype=torch.float32, device=x.device)
        kernel[(n_programs,)](
            g_rows, x_rows, weight, mean, rstd, grad_x, partials,
            n_rows, n_cols,
            g_rows.stride(0), x_rows.stride(0), grad_x.stride(0), mean.stride(0), rstd.stride(0),
            partials.stride(0),
            BLOCK_ROWS=step_rows, BLOCK_COLS=step_cols, num_warps=warps,
        )
        _layernorm_bwd_reduce[(triton.cdiv(n_cols, BLOCK_COLS_REDUCE),)](
            partials, grad_weight, grad_bias,
            n_programs, n_cols, partials.stride(0),
            BLOCK_PARTIALS=BLOCK_PARTIALS, BLOCK_COLS=BLOCK_COLS_REDUCE, num_warps=4,
        )
        return grad_x.view(x.shape), grad_weight, grad_bias
