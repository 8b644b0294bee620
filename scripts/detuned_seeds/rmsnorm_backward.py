"""RMSNorm backward in Triton, deliberately de-tuned: a benchmark's starting point, not a kernel to ship.

Correct, but launched the slow way on purpose: one warp per program and one
program per SM, so a 4096-wide bf16 row is spread over 32 threads (128 fp32
values each, per operand) and most of the GPU sits idle. ``scripts/search_vs_sweep.py``
starts kgen's offline search here and checks how close it gets to the best of
an exhaustive sweep over the same two knobs, which kgen's mutation finds:

* ``num_warps`` of the row kernel (1 here; 1..16 on NVIDIA);
* programs per SM (the ``1 *`` in ``_grid_programs``; 1..8).

The row block is ``next_power_of_2(n_cols)`` (the whole row stays in
registers): a correctness choice, never mutated. Each program walks rows
``pid, pid + P, pid + 2P, ...``, writes dx, and keeps an fp32 running sum of
g * x_hat for dweight; a second kernel adds the P partial rows in a fixed order,
so the result is deterministic.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_bwd_rows(
    g_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr,
    n_rows, n_cols, n_programs, rows_per_program,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    in_row = cols < n_cols
    w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    dw_sum = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, rows_per_program):
        row = pid + i * n_programs
        if row < n_rows:
            base = row.to(tl.int64) * n_cols  # int64: rows * cols can pass 2^31
            g = tl.load(g_ptr + base + cols, mask=in_row, other=0.0).to(tl.float32)
            x = tl.load(x_ptr + base + cols, mask=in_row, other=0.0).to(tl.float32)
            r = tl.load(rstd_ptr + row).to(tl.float32)
            x_hat = x * r
            gw = g * w
            # d/dx of x * r * w with r = rsqrt(mean(x^2) + eps): r * (gw - x_hat * mean(gw * x_hat))
            proj = tl.sum(gw * x_hat, axis=0) / n_cols
            dx = r * (gw - x_hat * proj)
            tl.store(dx_ptr + base + cols, dx.to(dx_ptr.dtype.element_ty), mask=in_row)
            dw_sum += g * x_hat
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, dw_sum, mask=in_row)


@triton.jit
def _rms_bwd_weight(dw_part_ptr, dw_ptr, n_parts, n_cols, TILE: tl.constexpr):
    cols = tl.program_id(0) * TILE + tl.arange(0, TILE)
    in_row = cols < n_cols
    total = tl.zeros([TILE], dtype=tl.float32)
    for p in range(0, n_parts):
        total += tl.load(dw_part_ptr + p * n_cols + cols, mask=in_row, other=0.0)
    tl.store(dw_ptr + cols, total.to(dw_ptr.dtype.element_ty), mask=in_row)


def _grid_programs(device: torch.device) -> int:
    """Programs of the row kernel: a multiple of the SM count (three "SMs" in the interpreter)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 3
    return 1 * sms


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, x, weight, rstd):
        n_rows, n_cols = x.shape
        grad_out, x, weight, rstd = grad_out.contiguous(), x.contiguous(), weight.contiguous(), rstd.contiguous()
        n_programs = max(1, min(n_rows, _grid_programs(x.device)))
        grad_x = torch.empty_like(x)
        dw_part = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x.device)
        row_block = triton.next_power_of_2(n_cols)
        _rms_bwd_rows[(n_programs,)](
            grad_out, x, weight, rstd, grad_x, dw_part,
            n_rows, n_cols, n_programs, triton.cdiv(n_rows, n_programs),
            BLOCK=row_block, num_warps=1,
        )
        grad_weight = torch.empty(n_cols, dtype=weight.dtype, device=x.device)
        tile = triton.next_power_of_2(min(n_cols, 512))
        _rms_bwd_weight[(triton.cdiv(n_cols, tile),)](
            dw_part, grad_weight, n_programs, n_cols, TILE=tile,
        )
        return grad_x, grad_weight
