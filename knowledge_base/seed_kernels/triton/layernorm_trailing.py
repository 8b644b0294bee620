"""nn.LayerNorm over trailing dims in Triton: short rows fused in registers; long rows (a million
values, few of them) split into chunks whose centred statistics are merged, in L2-sized row groups.

y = (x - mean) / sqrt(var + eps) * weight + bias, the statistics over the last
len(normalized_shape) dims, weight and bias of that shape (the module's own
``ln.weight`` / ``ln.bias``, so the reference's parameters load by name). With
N = prod(normalized_shape) the tensor (made contiguous) is [rows, N].

What bounds it: bytes. x read, y written (8 B per fp32 element; weight and
bias are N values read once per row, mostly from L2). Two regimes:

* Rows up to MAX_FUSED_BLOCK_COLS: BLOCK_ROWS whole rows per program (a tile of
  ~FUSED_BLOCK_ELEMS values), mean and centred variance from registers, x read
  once (the catalog's ``layernorm_forward`` pattern).
* Long rows (KernelBench's 64 x 256 x 256 = 4M values a row, 16 rows; the
  catalog's 1M-value rows): one program per row would leave most of the 132 SMs
  idle and serialise 16 MB of loads, so each row is cut into CHUNK_BLOCK-value
  chunks, three launches: (1) every chunk's count, mean and centred sum of
  squares M2, from registers; (2) per row, the chunk statistics merged (Chan's
  parallel formula: mean = sum(n_c mean_c) / N, M2 = sum(M2_c + n_c (mean_c -
  mean)^2), no E[x^2] - E[x]^2 cancellation, in fp32) into mean and rstd;
  (3) every chunk re-read, normalised, scaled and stored. The re-read is the
  cost: a 128 MB tensor re-read from HBM moves 12 B per element instead of 8.
  So rows are processed in groups of at most GROUP_BLOCK_MB megabytes of x
  (24 MB: half the H100's 50 MB L2), all three launches per group before the
  next: phase 3 finds its chunks in L2, and HBM sees each byte read once.
  A group of one 16 MB row still has 1024 chunk programs, ~8 per SM.

Precision: statistics in fp32 from centred values (the chunk's own mean
first, then Chan's merge), biased variance as torch; the input's mean may be
far from 0 (the catalog's inputs are offset by 1) without losing digits.
Offsets are int64; the grid is flat (row, chunk) so no grid dim passes 65535.

MAX_FUSED_BLOCK_COLS, FUSED_BLOCK_ELEMS, CHUNK_BLOCK, GROUP_BLOCK_MB and each launch's
num_warps are knobs for kgen's search (any value is correct: tails are
masked); next_power_of_2(N) for a fused row covers it and is correctness.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_BLOCK_COLS = 8192  # rows up to this long are held whole in registers
FUSED_BLOCK_ELEMS = 8192  # values per fused program: BLOCK_ROWS = FUSED_BLOCK_ELEMS // BLOCK_COLS
CHUNK_BLOCK = 4096  # values per chunk of a long row
GROUP_BLOCK_MB = 24  # megabytes of x per row group of the chunked path (fits the L2)


@triton.jit
def _ln_rows_fused(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, eps,
                   BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    centred = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = centred * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ln_chunk_stats(x_ptr, mean_ptr, m2_ptr, row0, n_cols, n_chunks, BLOCK: tl.constexpr):
    """Program p = (row, chunk) of the group: the chunk's mean and centred sum of squares."""
    pid = tl.program_id(0)
    row = row0 + pid // n_chunks
    chunk = pid % n_chunks
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row.to(tl.int64) * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(n_cols - chunk * BLOCK, BLOCK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    centred = tl.where(mask, x - mean, 0.0)
    out = row.to(tl.int64) * n_chunks + chunk
    tl.store(mean_ptr + out, mean)
    tl.store(m2_ptr + out, tl.sum(centred * centred, axis=0))


@triton.jit
def _ln_row_stats(mean_ptr, m2_ptr, row_mean_ptr, row_rstd_ptr, row0, n_cols, n_chunks, eps,
                  BLOCK: tl.constexpr, BLOCK_CHUNKS: tl.constexpr):
    """Program r: the row's mean and rstd from its chunks' (count, mean, M2), Chan's merge."""
    row = row0 + tl.program_id(0)
    base = row.to(tl.int64) * n_chunks
    total = tl.zeros((BLOCK_CHUNKS,), dtype=tl.float32)
    for start in range(0, n_chunks, BLOCK_CHUNKS):
        c = start + tl.arange(0, BLOCK_CHUNKS)
        mask = c < n_chunks
        count = tl.minimum(n_cols - c * BLOCK, BLOCK).to(tl.float32)
        total += tl.where(mask, count * tl.load(mean_ptr + base + c, mask=mask, other=0.0), 0.0)
    mean = tl.sum(total, axis=0) / n_cols
    m2 = tl.zeros((BLOCK_CHUNKS,), dtype=tl.float32)
    for start in range(0, n_chunks, BLOCK_CHUNKS):
        c = start + tl.arange(0, BLOCK_CHUNKS)
        mask = c < n_chunks
        count = tl.minimum(n_cols - c * BLOCK, BLOCK).to(tl.float32)
        delta = tl.load(mean_ptr + base + c, mask=mask, other=0.0) - mean
        m2 += tl.where(mask, tl.load(m2_ptr + base + c, mask=mask, other=0.0) + count * delta * delta, 0.0)
    tl.store(row_mean_ptr + row, mean)
    tl.store(row_rstd_ptr + row, 1.0 / tl.sqrt(tl.sum(m2, axis=0) / n_cols + eps))


@triton.jit
def _ln_chunk_apply(x_ptr, w_ptr, b_ptr, y_ptr, row_mean_ptr, row_rstd_ptr, row0, n_cols, n_chunks,
                    BLOCK: tl.constexpr):
    """Program p = (row, chunk) of the group: the chunk normalised, scaled and shifted."""
    pid = tl.program_id(0)
    row = row0 + pid // n_chunks
    chunk = pid % n_chunks
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row.to(tl.int64) * n_cols + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x - tl.load(row_mean_ptr + row)) * tl.load(row_rstd_ptr + row) * w + b
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n_cols = math.prod(self.ln.normalized_shape)
        if x.numel() == 0 or n_cols == 0:
            return y
        x = x.contiguous()
        weight = self.ln.weight.contiguous()
        bias = self.ln.bias.contiguous()
        n_rows = x.numel() // n_cols
        eps = self.ln.eps
        if n_cols <= MAX_FUSED_BLOCK_COLS:
            block_cols = triton.next_power_of_2(n_cols)  # covers the row: correctness, not a knob
            block_rows = triton.next_power_of_2(triton.cdiv(FUSED_BLOCK_ELEMS, block_cols))
            _ln_rows_fused[(triton.cdiv(n_rows, block_rows),)](
                x, weight, bias, y, n_rows, n_cols, eps, BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols,
                num_warps=8,
            )
            return y
        n_chunks = triton.cdiv(n_cols, CHUNK_BLOCK)
        chunk_mean = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
        chunk_m2 = torch.empty_like(chunk_mean)
        row_mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        row_rstd = torch.empty_like(row_mean)
        group = max((GROUP_BLOCK_MB << 20) // (n_cols * x.element_size()), 1)
        block_chunks = min(triton.next_power_of_2(n_chunks), 1024)
        for row0 in range(0, n_rows, group):
            rows = min(group, n_rows - row0)
            _ln_chunk_stats[(rows * n_chunks,)](
                x, chunk_mean, chunk_m2, row0, n_cols, n_chunks, BLOCK=CHUNK_BLOCK, num_warps=8,
            )
            _ln_row_stats[(rows,)](
                chunk_mean, chunk_m2, row_mean, row_rstd, row0, n_cols, n_chunks, eps,
                BLOCK=CHUNK_BLOCK, BLOCK_CHUNKS=block_chunks, num_warps=4,
            )
            _ln_chunk_apply[(rows * n_chunks,)](
                x, weight, bias, y, row_mean, row_rstd, row0, n_cols, n_chunks, BLOCK=CHUNK_BLOCK, num_warps=8,
            )
        return y
