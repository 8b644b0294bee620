"""LayerNorm forward in Triton: one program per row, the whole row in registers.

Each program loads its row once and keeps it in registers for both passes
over it: the mean first, then the variance of the centred values (two-pass,
so a large mean does not cancel the variance away as E[x^2] - E[x]^2 in fp32
would). y = (x - mean) * rstd * weight + bias is written once, so the kernel
reads x and writes y exactly once. Statistics are accumulated in fp32; masked
lanes are zeroed after centring so they add nothing to the variance.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm_fwd_row(
    x_ptr, weight_ptr, bias_ptr, y_ptr,
    n_cols, eps,
    BLOCK_COLS: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    offs = row.to(tl.int64) * n_cols + cols  # int64: rows * cols can pass 2^31
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = centred * rstd * w + b
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        n_cols = x.shape[-1]
        x_rows = x.contiguous().view(-1, n_cols)
        weight, bias = weight.contiguous(), bias.contiguous()
        n_rows = x_rows.shape[0]
        y = torch.empty_like(x_rows)
        block_cols = triton.next_power_of_2(n_cols)
        num_warps = min(max(block_cols // 256, 1), 16)
        _layernorm_fwd_row[(n_rows,)](
            x_rows, weight, bias, y,
            n_cols, self.eps,
            BLOCK_COLS=block_cols, num_warps=num_warps,
        )
        return y.view(x.shape)
