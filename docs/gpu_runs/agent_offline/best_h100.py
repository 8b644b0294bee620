# kgen: best kernel for h100 (g0-c01, mutation).
# passed, 0.1702 ms, 1.02x vs torch.compile
# Import it and use ModelNew like the problem's Model.
"""RMSNorm backward in Triton: dx per row, dweight as fp32 per-program partials.

Each program walks a strided set of rows, keeps the whole row in registers,
writes dx and accumulates g * x_hat into an fp32 partial for dweight; a
second kernel sums the partials over programs. Accumulating in fp32 matters:
bf16 partials lose the small contributions of long batches.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_bwd_rows(
    grad_out_ptr, x_ptr, weight_ptr, rstd_ptr, grad_x_ptr, partial_ptr,
    n_rows, n_cols, rows_per_program,
    BLOCK_COLS: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    row_start = pid * rows_per_program
    for i in range(0, rows_per_program):
        row = row_start + i
        if row < n_rows:
            offs = row.to(tl.int64) * n_cols + cols
            g = tl.load(grad_out_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            r = tl.load(rstd_ptr + row)
            x_hat = x * r
            gw = g * w
            c = tl.sum(gw * x_hat, axis=0) / n_cols
            dx = r * (gw - x_hat * c)
            tl.store(grad_x_ptr + offs, dx.to(grad_x_ptr.dtype.element_ty), mask=mask)
            dw_acc += g * x_hat
    tl.store(partial_ptr + pid * n_cols + cols, dw_acc, mask=mask)


@triton.jit
def _sum_partials(partial_ptr, grad_weight_ptr, n_partials, n_cols, BLOCK_COLS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    for p in range(0, n_partials):
        acc += tl.load(partial_ptr + p * n_cols + cols, mask=mask, other=0.0)
    tl.store(grad_weight_ptr + cols, acc.to(grad_weight_ptr.dtype.element_ty), mask=mask)


def _program_count(device: torch.device) -> int:
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, x, weight, rstd):
        n_rows, n_cols = x.shape
        grad_out, x, rstd = grad_out.contiguous(), x.contiguous(), rstd.contiguous()
        n_programs = max(1, min(n_rows, _program_count(x.device)))
        rows_per_program = triton.cdiv(n_rows, n_programs)
        n_programs = triton.cdiv(n_rows, rows_per_program)
        grad_x = torch.empty_like(x)
        partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x.device)
        block_cols = triton.next_power_of_2(n_cols)
        num_warps = min(max(block_cols // 256, 1), 16)
        _rmsnorm_bwd_rows[(n_programs,)](
            grad_out, x, weight, rstd, grad_x, partial,
            n_rows, n_cols, rows_per_program,
            BLOCK_COLS=block_cols, num_warps=8,
        )
        grad_weight = torch.empty(n_cols, dtype=weight.dtype, device=x.device)
        sum_block = 256
        _sum_partials[(triton.cdiv(n_cols, sum_block),)](
            partial, grad_weight, n_programs, n_cols, BLOCK_COLS=sum_block,
        )
        return grad_x, grad_weight
