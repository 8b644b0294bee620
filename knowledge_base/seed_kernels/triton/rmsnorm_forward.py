"""RMSNorm forward in Triton: one program per row, the whole row in registers.

A row of a transformer's hidden state (a few thousand bf16 values) fits in
one block, so each program loads its row once, reduces sum(x^2) in fp32,
and writes y = x * rstd * weight without touching memory again: the kernel
reads x and writes y exactly once, which is all a memory-bound op can do.
One program per row gives tens of thousands of programs at LLM sizes, plenty
to fill the GPU. The statistics are accumulated in fp32 because a bf16 sum of
thousands of squares keeps only two or three digits.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_fwd_row(
    x_ptr, weight_ptr, y_ptr,
    n_cols, eps,
    BLOCK_COLS: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    offs = row.to(tl.int64) * n_cols + cols  # int64: rows * cols can pass 2^31
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    # masked lanes hold 0 and add nothing to the sum; divide by the true width
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    y = x * rstd * w
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        n_cols = x.shape[-1]
        x_rows = x.contiguous().view(-1, n_cols)
        weight = weight.contiguous()
        n_rows = x_rows.shape[0]
        y = torch.empty_like(x_rows)
        block_cols = triton.next_power_of_2(n_cols)
        num_warps = min(max(block_cols // 256, 1), 16)
        _rmsnorm_fwd_row[(n_rows,)](
            x_rows, weight, y,
            n_cols, self.eps,
            BLOCK_COLS=block_cols, num_warps=num_warps,
        )
        return y.view(x.shape)
