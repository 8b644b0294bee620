"""Fused residual add + RMSNorm backward in Triton: persistent programs over row tiles, fp32 dweight partials.

The forward was s = x + residual (written out as residual_out) and
y = s * rstd * weight. Per row, with s recomputed from x and residual:

    s_hat  = s * rstd, gw = grad_y * weight
    grad_s = grad_residual_out + rstd * (gw - s_hat * mean(gw * s_hat))
    grad_x = grad_residual = grad_s,   grad_weight = sum over rows of grad_y * s_hat

What bounds it: bytes. Per element it reads grad_y, grad_residual_out, x and
residual (2 B each) and writes grad_x and grad_residual (2 B each); per row one
fp32 rstd. At 16384 x 4096 bf16 that is 768 MB, about 260 us at the H100's ~3.0
TB/s copy bandwidth; the math (a row dot product and a few multiplies per element)
is free next to it. Each input value is read from HBM once and each output written
once. grad_x and grad_residual hold the same values and are both written: they are
two tensors (a caller may write into one, and a torch custom op may not return two
outputs sharing storage). s is recomputed from x and residual, the inputs the
problem hands over (an add per element; reading the forward's bf16 residual_out
instead would save one row-sized read, but the export pairing saves only the
forward's inputs).

Structure, as rmsnorm_backward's. grad_weight = sum over rows of grad_y * s_hat
needs a reduction across every row, so programs are persistent:
*_PROGRAMS_PER_SM x (SM count) programs walk the row tiles in a grid stride
(program p takes tiles p, p + P, ..., so at any moment the programs touch
neighbouring rows). Each program folds every tile's rows into one fp32
[BLOCK_COLS] accumulator held in registers and writes it once as its partial row;
a second kernel sums the P partials per column, in fp32 and in a fixed order. The
partials are P x n_cols x 4 B (a few MB, written and re-read through L2): a few
percent of the main traffic, which is why P is kept to what fills the SMs.

Why these tiles, warps and programs: HBM needs ~25 KB outstanding per SM (Little's
law, ~3.3 TB/s x ~1 us over 132 SMs). The tile loads four row-sized bf16 tensors,
twice rmsnorm_backward's two, but x and residual are summed as they arrive and
grad_residual_out is loaded only for the final add, so a thread keeps about the
same fp32 values alive (s_hat, grad_y, weight, the accumulator) and about the same
registers. The registers fix how many programs fit on an SM (sm_90 builds,
cross-compiled, no spills in any of them):

* rows up to 1024 wide: SMALL_TILE=2048 elements a tile (BLOCK_ROWS=2 at 1024,
  more rows for narrower ones: 16 at 128), 4 warps, 72 to 96 registers a thread, 4
  programs per SM, 16 KB of input per tile (64 KB per SM) whatever the width;
* up to 4096: BLOCK_ROWS=1, 8 warps, 80 registers, 3 programs per SM, 32 KB
  per tile at 4096 (96 KB per SM);
* up to MAX_FUSED_COLS=16384: one row, 16 warps, 100 registers at 8192 and
  128 (the whole register file) at 16384, so one program per SM. With one
  program there is nobody to load while it reduces, so its tile loop is
  software pipelined (NUM_STAGES=2: the next row is copied to shared memory
  with cp.async while this one is reduced; 80 KB at 8192, 160 KB at 16384, in
  the H100's 227 KB). The weight row is re-read per tile (an L1/L2 hit,
  pipelined too) rather than held: held, it would add 32 fp32 values a thread
  to a program already at 128 registers at 16384;
* wider rows do not fit registers, so each row is walked in LOOP_BLOCK_COLS
  chunks twice (first for the row's dot product, then for grad_s; the second
  read mostly hits L2) and the program's partial row is accumulated in its own
  zeroed slice of the fp32 partial buffer in global memory (one owner per
  slice: no atomics, a fixed order).

The partial sum gives each program SUM_TILE fp32 values of partials at a time,
[SUM_TILE // c, c] with c columns: c = 16 (64 B of a partial row, two L2 sectors)
up to 4096 columns, so even 1024 columns make 64 programs and the sum is a few
pipelined L2 round trips, not a serial walk over P rows; wider rows take wider
column blocks (c up to 256), about SUM_PROGRAMS programs whatever the width.

Knobs for kgen's search: BLOCK_ROWS and num_warps at each launch, the
*_PROGRAMS_PER_SM and *_NUM_STAGES constants, SMALL_TILE, LOOP_BLOCK_COLS, and
the partial sum's SUM_TILE, SUM_PROGRAMS and num_warps; any value is correct
(SMALL_TILE at least 1024 and SUM_TILE at least 256, both powers of two; tails
are masked, programs without a tile write zeros). BLOCK_COLS =
next_power_of_2(n_cols) of the row kernels covers the row and is correctness, not
a knob.

Numerics: every input is widened to fp32 as it is loaded; s = x + residual is the
same fp32 sum the forward normalised. The row dot product sum(gw * s_hat) runs in
fp32 along each row and divides by the true width (masked lanes load 0).
grad_weight sums tens of thousands of rows of small products: in bf16 the late
contributions would round away, so every partial is fp32, each program adds its
tiles in a fixed order, the P partials are summed in fp32 in a fixed order per
column, and only the final value is rounded to weight's dtype. No atomics, so the
same inputs give the same bits whatever the scheduling. Row offsets are int64
(rows * cols passes 2^31 at 128k x 16k).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

#: widest row kept whole in registers (16 warps x 32 values a thread per tensor)
MAX_FUSED_COLS = 16384
#: chunk width of the looped kernel for wider rows
LOOP_BLOCK_COLS = 2048
#: elements of a tile for rows up to 1024 wide: BLOCK_ROWS = SMALL_TILE // BLOCK_COLS
SMALL_TILE = 2048
#: the partial sum: fp32 values a program holds ([BLOCK_PARTIALS, BLOCK_COLS]) and about how many programs
SUM_TILE = 4096
SUM_PROGRAMS = 256
# Launch settings by row width (see the module docstring): persistent programs per SM (as many
# as the registers of one program allow) and software-pipelining depth of the row-tile loop.
SMALL_PROGRAMS_PER_SM = 4  # rows up to 1024 wide: 4 warps, 72 to 96 registers a thread
SMALL_NUM_STAGES = 1
MEDIUM_PROGRAMS_PER_SM = 3  # up to 4096: 8 warps, 80 registers a thread
MEDIUM_NUM_STAGES = 1
LARGE_PROGRAMS_PER_SM = 1  # up to 16384: 16 warps, up to 128 registers a thread, the whole register file
LARGE_NUM_STAGES = 2
LOOPED_PROGRAMS_PER_SM = 4  # wider rows, looped in chunks: 8 warps, 40 registers a thread


@triton.jit
def _add_rmsnorm_bwd_tiles(
    grad_y_ptr, grad_res_out_ptr, x_ptr, residual_ptr, weight_ptr, rstd_ptr,
    grad_x_ptr, grad_residual_ptr, partial_ptr,
    n_rows, n_cols,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    dw_acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
    # NUM_STAGES > 1: the next tile's loads are issued (cp.async) while this one is reduced
    for tile in tl.range(pid, n_tiles, n_programs, num_stages=NUM_STAGES):
        rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]  # int64: rows * cols can pass 2^31
        x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        res = tl.load(residual_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        g = tl.load(grad_y_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        # the weight row is re-read per tile (an L1/L2 hit) instead of held in registers
        w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        r = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        s_hat = (x + res) * r[:, None]
        # fold the tile's rows into the accumulator first: g is dead after gw, fewer live registers
        dw_acc += tl.sum(g * s_hat, axis=0)
        gw = g * w[None, :]
        # masked lanes and rows hold 0 and add nothing; divide by the true width
        c = tl.sum(gw * s_hat, axis=1) / n_cols
        g_res = tl.load(grad_res_out_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        grad_s = g_res + r[:, None] * (gw - s_hat * c[:, None])
        tl.store(grad_x_ptr + offs, grad_s.to(grad_x_ptr.dtype.element_ty), mask=mask)
        tl.store(grad_residual_ptr + offs, grad_s.to(grad_residual_ptr.dtype.element_ty), mask=mask)
    tl.store(partial_ptr + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=col_mask)


@triton.jit
def _add_rmsnorm_bwd_looped(
    grad_y_ptr, grad_res_out_ptr, x_ptr, residual_ptr, weight_ptr, rstd_ptr,
    grad_x_ptr, grad_residual_ptr, partial_ptr,
    n_rows, n_cols,
    BLOCK_COLS: tl.constexpr,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    partial_row = partial_ptr + pid.to(tl.int64) * n_cols  # zeroed by the caller, owned by this program
    for row in range(pid, n_rows, n_programs):
        row_start = tl.cast(row, tl.int64) * n_cols  # int64 (row is a plain int in the interpreter)
        r = tl.load(rstd_ptr + row)
        # pass 1: the row's dot product sum(g * w * s), lane-wise in fp32
        dot = tl.zeros([BLOCK_COLS], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + tl.arange(0, BLOCK_COLS)
            mask = cols < n_cols
            g = tl.load(grad_y_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            res = tl.load(residual_ptr + row_start + cols, mask=mask, other=0.0,
                          eviction_policy="evict_last").to(tl.float32)
            w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            dot += g * w * (x + res)
        c = tl.sum(dot, axis=0) * r / n_cols
        # pass 2: grad_s, and this program's fp32 partial of grad_weight
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + tl.arange(0, BLOCK_COLS)
            mask = cols < n_cols
            g = tl.load(grad_y_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            res = tl.load(residual_ptr + row_start + cols, mask=mask, other=0.0,
                          eviction_policy="evict_first").to(tl.float32)
            g_res = tl.load(grad_res_out_ptr + row_start + cols, mask=mask, other=0.0,
                            eviction_policy="evict_first").to(tl.float32)
            w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            s_hat = (x + res) * r
            gw = g * w
            grad_s = g_res + r * (gw - s_hat * c)
            tl.store(grad_x_ptr + row_start + cols, grad_s.to(grad_x_ptr.dtype.element_ty), mask=mask)
            tl.store(grad_residual_ptr + row_start + cols, grad_s.to(grad_residual_ptr.dtype.element_ty), mask=mask)
            acc = tl.load(partial_row + cols, mask=mask, other=0.0)
            tl.store(partial_row + cols, acc + g * s_hat, mask=mask)


@triton.jit
def _sum_partials(
    partial_ptr, grad_weight_ptr, n_partials, n_cols,
    BLOCK_PARTIALS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_PARTIALS, BLOCK_COLS], dtype=tl.float32)
    for start in tl.range(0, n_partials, BLOCK_PARTIALS, num_stages=2):
        parts = start + tl.arange(0, BLOCK_PARTIALS)
        mask = (parts < n_partials)[:, None] & col_mask[None, :]
        offs = parts.to(tl.int64)[:, None] * n_cols + cols[None, :]
        acc += tl.load(partial_ptr + offs, mask=mask, other=0.0)
    tl.store(grad_weight_ptr + cols, tl.sum(acc, axis=0).to(grad_weight_ptr.dtype.element_ty), mask=col_mask)


def _program_count(device: torch.device, n_rows: int, per_sm: int) -> int:
    """Persistent programs: per_sm per SM on a GPU (4 in the CPU interpreter), never more than rows."""
    programs = per_sm * torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    return max(1, min(n_rows, programs))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_y, grad_residual_out, x, residual, weight, rstd):
        n_rows, n_cols = x.shape
        grad_y, grad_residual_out = grad_y.contiguous(), grad_residual_out.contiguous()
        x, residual, weight, rstd = x.contiguous(), residual.contiguous(), weight.contiguous(), rstd.contiguous()
        grad_x = torch.empty_like(x)
        grad_residual = torch.empty_like(residual)
        grad_weight = torch.empty(n_cols, dtype=weight.dtype, device=x.device)
        if n_cols == 0:
            return grad_x, grad_residual, grad_weight
        if n_rows == 0:
            return grad_x, grad_residual, grad_weight.zero_()
        block_cols = triton.next_power_of_2(n_cols)
        args = (grad_y, grad_residual_out, x, residual, weight, rstd, grad_x, grad_residual)
        if block_cols <= MAX_FUSED_COLS:
            if block_cols <= 1024:
                per_sm, stages, block_rows, warps = SMALL_PROGRAMS_PER_SM, SMALL_NUM_STAGES, SMALL_TILE // block_cols, 4
            elif block_cols <= 4096:
                per_sm, stages, block_rows, warps = MEDIUM_PROGRAMS_PER_SM, MEDIUM_NUM_STAGES, 1, 8
            else:
                per_sm, stages, block_rows, warps = LARGE_PROGRAMS_PER_SM, LARGE_NUM_STAGES, 1, 16
            n_programs = _program_count(x.device, n_rows, per_sm)
            partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x.device)
            _add_rmsnorm_bwd_tiles[(n_programs,)](
                *args, partial, n_rows, n_cols,
                BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, NUM_STAGES=stages, num_warps=warps,
            )
        else:
            n_programs = _program_count(x.device, n_rows, LOOPED_PROGRAMS_PER_SM)
            partial = torch.zeros((n_programs, n_cols), dtype=torch.float32, device=x.device)
            _add_rmsnorm_bwd_looped[(n_programs,)](
                *args, partial, n_rows, n_cols, BLOCK_COLS=LOOP_BLOCK_COLS, num_warps=8,
            )
        sum_cols = min(256, max(16, triton.next_power_of_2(triton.cdiv(n_cols, SUM_PROGRAMS))))
        _sum_partials[(triton.cdiv(n_cols, sum_cols),)](
            partial, grad_weight, n_programs, n_cols,
            BLOCK_PARTIALS=SUM_TILE // sum_cols, BLOCK_COLS=sum_cols, num_warps=4,
        )
        return grad_x, grad_residual, grad_weight
