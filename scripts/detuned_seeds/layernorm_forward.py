"""LayerNorm forward in Triton, deliberately de-tuned: a benchmark's starting point, not a kernel to ship.

Correct, but launched the slow way on purpose: one program per SM, each with a
single warp, so a 4096-wide row is spread over 32 threads and most of the GPU
waits. ``scripts/search_vs_sweep.py`` starts kgen's offline search here and
compares it with an exhaustive sweep over the same two knobs, which kgen's
mutation finds:

* ``num_warps`` of the kernel (1 here; 1..16 on NVIDIA);
* programs per SM (the ``1 *`` in ``_grid_programs``; 1..8).

The row block is ``next_power_of_2(n_cols)`` (the whole row stays in
registers): a correctness choice, never mutated. Each program walks rows
``pid, pid + P, ...``; per row it loads x once, takes the mean, then the variance
of the centred values (two passes over registers, so a large mean does not
cancel the variance away), and writes y = (x - mean) * rstd * w + b.
Statistics are fp32.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ln_fwd_rows(
    x_ptr, w_ptr, b_ptr, y_ptr,
    n_rows, n_cols, n_programs, rows_per_program, eps,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    in_row = cols < n_cols
    w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    for i in range(0, rows_per_program):
        row = pid + i * n_programs
        if row < n_rows:
            base = row.to(tl.int64) * n_cols  # int64: rows * cols can pass 2^31
            x = tl.load(x_ptr + base + cols, mask=in_row, other=0.0).to(tl.float32)
            mean = tl.sum(x, axis=0) / n_cols
            centred = tl.where(in_row, x - mean, 0.0)
            var = tl.sum(centred * centred, axis=0) / n_cols
            rstd = 1.0 / tl.sqrt(var + eps)
            y = centred * rstd * w + b
            tl.store(y_ptr + base + cols, y.to(y_ptr.dtype.element_ty), mask=in_row)


def _grid_programs(device: torch.device) -> int:
    """Programs of the kernel: a multiple of the SM count (three "SMs" in the interpreter)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 3
    return 1 * sms


class ModelNew(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        n_cols = x.shape[-1]
        rows = x.contiguous().view(-1, n_cols)
        weight, bias = weight.contiguous(), bias.contiguous()
        n_rows = rows.shape[0]
        y = torch.empty_like(rows)
        n_programs = max(1, min(n_rows, _grid_programs(x.device)))
        row_block = triton.next_power_of_2(n_cols)
        _ln_fwd_rows[(n_programs,)](
            rows, weight, bias, y,
            n_rows, n_cols, n_programs, triton.cdiv(n_rows, n_programs), self.eps,
            BLOCK=row_block, num_warps=1,
        )
        return y.view(x.shape)
