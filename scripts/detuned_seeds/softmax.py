"""Row softmax in Triton, deliberately de-tuned: a benchmark's starting point, not a kernel to ship.

Correct for any row length, but launched the slow way on purpose: a small
column block (256 fp32 values a step), a single warp per program and one row
per program. ``scripts/search_vs_sweep.py`` starts kgen's offline search here
and compares it with an exhaustive sweep over the same three knobs, which
kgen's mutation finds:

* ``BLOCK_COLS``, the column block of the looped reduction (256 here; 64..1024);
* ``num_warps`` (1 here; 1..16 on NVIDIA);
* ``ROWS_PER_PROGRAM``, rows each program handles one after another (1 here; 1, 2, 4).

The block only sets how many columns a step loads, never what is computed, so
every value is correct. Per row, a first pass keeps an online maximum and a
running sum of exp(x - max) (rescaled whenever the maximum grows); a second
pass writes exp(x - max) / sum. Masked lanes load -inf, so exp() gives 0 there.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_looped(
    x_ptr, y_ptr, n_rows, n_cols,
    BLOCK_COLS: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
):
    first_row = tl.program_id(0) * ROWS_PER_PROGRAM
    for r in range(0, ROWS_PER_PROGRAM):
        row = first_row + r
        if row < n_rows:
            base = row.to(tl.int64) * n_cols  # int64: rows * cols can pass 2^31
            # pass 1: running max m and running sum s of exp(x - m), per lane, merged at the end
            m = tl.full([BLOCK_COLS], float("-inf"), dtype=tl.float32)
            s = tl.zeros([BLOCK_COLS], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_COLS):
                cols = start + tl.arange(0, BLOCK_COLS)
                x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
                m_new = tl.maximum(m, x)
                # a lane that has seen only -inf keeps s = 0 (exp of nan avoided by the where)
                scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
                s = s * scale + tl.where(m_new == float("-inf"), 0.0, tl.exp(x - m_new))
                m = m_new
            row_max = tl.max(m, axis=0)
            lane_scale = tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max))
            inv_sum = 1.0 / tl.sum(s * lane_scale, axis=0)
            # pass 2: normalise and store
            for start in range(0, n_cols, BLOCK_COLS):
                cols = start + tl.arange(0, BLOCK_COLS)
                in_row = cols < n_cols
                x = tl.load(x_ptr + base + cols, mask=in_row, other=float("-inf")).to(tl.float32)
                y = tl.exp(x - row_max) * inv_sum
                tl.store(y_ptr + base + cols, y.to(y_ptr.dtype.element_ty), mask=in_row)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_cols = x.shape[-1]
        rows = x.contiguous().view(-1, n_cols)
        n_rows = rows.shape[0]
        y = torch.empty_like(rows)
        rows_each = 1
        _softmax_looped[(triton.cdiv(n_rows, rows_each),)](
            rows, y, n_rows, n_cols,
            BLOCK_COLS=256, ROWS_PER_PROGRAM=rows_each, num_warps=1,
        )
        return y.view(x.shape)
