"""RMSNorm backward in Triton: persistent programs over [BLOCK_ROWS, BLOCK_COLS] row tiles, fp32 dweight partials.

What bounds it: bytes. Per element it reads grad_out and x (2 B each) and
writes grad_x (2 B); per row it reads one fp32 rstd. At 16384 x 4096 bf16 that
is 384 MB, about 130 us at the H100's ~3.0 TB/s copy bandwidth; the math (a
row dot product and a few multiplies per element) is free next to it. Each
input value is read from HBM once and each grad_x written once.

Structure. grad_weight = sum over rows of g * x_hat needs a reduction across
every row, so programs are persistent: *_PROGRAMS_PER_SM x (SM count)
programs walk the row tiles in a grid stride (program p takes tiles p, p + P,
..., so at any moment the programs touch neighbouring rows). Each program
folds every tile's rows into one fp32 [BLOCK_COLS] accumulator held in
registers (with the default layouts a thread holds all BLOCK_ROWS rows of its
columns, so that fold needs no shared memory) and writes it once as its
partial row; a second kernel sums the P partials per column. The partials are
P x n_cols x 4 B (2 to 9 MB here, written and re-read through L2): a few
percent of the main traffic, which is why P is kept to what fills the SMs.

Why these tiles, warps and programs: HBM needs ~25 KB outstanding per SM
(Little's law, ~3.3 TB/s x ~1 us over 132 SMs). A thread holds, per row of
the tile, its share of grad_out and x in fp32 plus its columns of the
accumulator, so the tile size fixes the registers of a program and the
registers fix how many programs fit on an SM:

* rows up to 1024 wide: BLOCK_ROWS=4, 4 warps, ~128 registers a thread, 4
  programs per SM, 16 KB of grad_out + x per tile (64 KB per SM);
* up to 4096: BLOCK_ROWS=1, 8 warps, ~80 registers, 3 programs per SM, 16 KB
  per tile (48 KB per SM; two rows a tile would take 128 registers and leave
  room for only two programs);
* up to MAX_FUSED_COLS=16384: one row, 16 warps, 128 registers a thread (the
  whole register file, no spills), one program per SM. With one program
  there is nobody to load while it reduces, so its tile loop is software
  pipelined (NUM_STAGES=2: the next row's 64 KB are copied to shared memory
  with cp.async while this one is reduced). The weight row is re-read per
  tile (an L1/L2 hit, pipelined too) rather than held: holding it would cost
  32 more registers a thread and spill;
* wider rows do not fit registers, so each row is walked in LOOP_BLOCK_COLS
  chunks twice (first for the row's dot product, then for grad_x; the second
  read mostly hits L2) and the program's partial row is accumulated in its own
  zeroed slice of the fp32 partial buffer in global memory (one owner per
  slice: no atomics, a fixed order).

The partial sum reads [BLOCK_PARTIALS, 16]-column tiles (64 B of a partial row,
two L2 sectors), so even 1024 columns make 64 programs and the sum is a few
pipelined L2 round trips, not a serial walk over P rows.

Knobs for kgen's search: BLOCK_ROWS and num_warps at each launch, the
*_PROGRAMS_PER_SM and *_NUM_STAGES constants, LOOP_BLOCK_COLS, and the partial
sum's BLOCK_PARTIALS / BLOCK_COLS / num_warps; any value is correct (tails are
masked, programs without a tile write zeros). BLOCK_COLS =
next_power_of_2(n_cols) of the row kernels covers the row and is correctness,
not a knob.

Why the reduction order and fp32 partials: the row dot product
sum(g * w * x_hat) runs in fp32 along each row and divides by the true width
(masked lanes load 0). grad_weight sums tens of thousands of rows of small
products: in bf16 the late contributions would round away, so every partial
is fp32, each program adds its tiles in a fixed order, the P partials are
summed in fp32 in a fixed order per column, and only the final value is
rounded to weight's dtype. No atomics, so the same inputs give the same bits
whatever the scheduling.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

#: widest row kept whole in registers (16 warps x 32 values a thread per tensor)
MAX_FUSED_COLS = 16384
#: chunk width of the looped kernel for wider rows
LOOP_BLOCK_COLS = 2048
# Launch settings by row width (see the module docstring): persistent programs per SM (as many
# as the registers of one program allow) and software-pipelining depth of the row-tile loop.
SMALL_PROGRAMS_PER_SM = 4  # rows up to 1024 wide: 4 warps, ~128 registers a thread
SMALL_NUM_STAGES = 1
MEDIUM_PROGRAMS_PER_SM = 3  # up to 4096: 8 warps, ~80 registers a thread
MEDIUM_NUM_STAGES = 1
LARGE_PROGRAMS_PER_SM = 1  # up to 16384: 16 warps, 128 registers a thread, the whole register file
LARGE_NUM_STAGES = 2
LOOPED_PROGRAMS_PER_SM = 4  # wider rows, looped in chunks: 8 warps, ~40 registers a thread


@triton.jit
def _rmsnorm_bwd_tiles(
    grad_out_ptr, x_ptr, weight_ptr, rstd_ptr, grad_x_ptr, partial_ptr,
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
        g = tl.load(grad_out_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        # the weight row is re-read per tile (an L1/L2 hit) instead of held in registers
        w = tl.load(weight_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        r = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        x_hat = x * r[:, None]
        # fold the tile's rows into the accumulator first: g is dead after gw, fewer live registers
        dw_acc += tl.sum(g * x_hat, axis=0)
        gw = g * w[None, :]
        # masked lanes and rows hold 0 and add nothing; divide by the true width
        c = tl.sum(gw * x_hat, axis=1) / n_cols
        grad_x = r[:, None] * (gw - x_hat * c[:, None])
        tl.store(grad_x_ptr + offs, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)
    tl.store(partial_ptr + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=col_mask)


@triton.jit
def _rmsnorm_bwd_looped(
    grad_out_ptr, x_ptr, weight_ptr, rstd_ptr, grad_x_ptr, partial_ptr,
    n_rows, n_cols,
    BLOCK_COLS: tl.constexpr,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    partial_row = partial_ptr + pid.to(tl.int64) * n_cols  # zeroed by the caller, owned by this program
    for row in range(pid, n_rows, n_programs):
        row_start = row.to(tl.int64) * n_cols
        r = tl.load(rstd_ptr + row)
        # pass 1: the row's dot product sum(g * w * x_hat), lane-wise in fp32
        dot = tl.zeros([BLOCK_COLS], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + tl.arange(0, BLOCK_COLS)
            mask = cols < n_cols
            g = tl.load(grad_out_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            dot += g * w * x
        c = tl.sum(dot, axis=0) * r / n_cols
        # pass 2: grad_x, and this program's fp32 partial of grad_weight
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + tl.arange(0, BLOCK_COLS)
            mask = cols < n_cols
            g = tl.load(grad_out_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            x_hat = x * r
            gw = g * w
            grad_x = r * (gw - x_hat * c)
            tl.store(grad_x_ptr + row_start + cols, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)
            acc = tl.load(partial_row + cols, mask=mask, other=0.0)
            tl.store(partial_row + cols, acc + g * x_hat, mask=mask)


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

    def forward(self, grad_out, x, weight, rstd):
        n_rows, n_cols = x.shape
        grad_out, x, rstd, weight = grad_out.contiguous(), x.contiguous(), rstd.contiguous(), weight.contiguous()
        grad_x = torch.empty_like(x)
        grad_weight = torch.empty(n_cols, dtype=weight.dtype, device=x.device)
        if n_cols == 0:
            return grad_x, grad_weight
        if n_rows == 0:
            return grad_x, grad_weight.zero_()
        block_cols = triton.next_power_of_2(n_cols)
        args = (grad_out, x, weight, rstd, grad_x)
        if block_cols <= 1024:
            n_programs = _program_count(x.device, n_rows, SMALL_PROGRAMS_PER_SM)
            partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x.device)
            _rmsnorm_bwd_tiles[(n_programs,)](
                *args, partial, n_rows, n_cols,
                BLOCK_ROWS=4, BLOCK_COLS=block_cols, NUM_STAGES=SMALL_NUM_STAGES, num_warps=4,
            )
        elif block_cols <= 4096:
            n_programs = _program_count(x.device, n_rows, MEDIUM_PROGRAMS_PER_SM)
            partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x.device)
            _rmsnorm_bwd_tiles[(n_programs,)](
                *args, partial, n_rows, n_cols,
                BLOCK_ROWS=1, BLOCK_COLS=block_cols, NUM_STAGES=MEDIUM_NUM_STAGES, num_warps=8,
            )
        elif block_cols <= MAX_FUSED_COLS:
            n_programs = _program_count(x.device, n_rows, LARGE_PROGRAMS_PER_SM)
            partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x.device)
            _rmsnorm_bwd_tiles[(n_programs,)](
                *args, partial, n_rows, n_cols,
                BLOCK_ROWS=1, BLOCK_COLS=block_cols, NUM_STAGES=LARGE_NUM_STAGES, num_warps=16,
            )
        else:
            n_programs = _program_count(x.device, n_rows, LOOPED_PROGRAMS_PER_SM)
            partial = torch.zeros((n_programs, n_cols), dtype=torch.float32, device=x.device)
            _rmsnorm_bwd_looped[(n_programs,)](
                *args, partial, n_rows, n_cols, BLOCK_COLS=LOOP_BLOCK_COLS, num_warps=8,
            )
        _sum_partials[(triton.cdiv(n_cols, 16),)](
            partial, grad_weight, n_programs, n_cols, BLOCK_PARTIALS=256, BLOCK_COLS=16, num_warps=4,
        )
        return grad_x, grad_weight
