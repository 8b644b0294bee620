"""Embedding backward in Triton: bucket the ids, sum each row in registers, write every row once.

grad_weight[v] = sum of grad_out[t] over the tokens t with ids[t] == v, for every row v of
the table, the untouched ones (zero) included. What bounds it is memory: the fp32 table is
written once (VOCAB * DIM * 4 bytes, 524 MB at the default size, four fifths of all the
traffic) and grad_out is read once (bf16). A zero-filled table followed by atomic adds
(the simple design) writes the table twice over for every touched row: the fill, then an
L2 read-modify-write per add that sends the touched rows back to DRAM once more, and fp32
atomics on the Zipf-hot rows (the hottest id takes ~14% of the tokens) queue up in L2. So
this kernel groups the tokens by id first and writes each row once, with a plain store:

1. ``_bucket_tokens`` (one pass over the ids): each token takes a slot in its id's bucket
   with an int32 atomic on a per-id counter (``BLOCK_BUCKET`` slots per id). That is a
   counting sort without the prefix sum: no scan launch, no second pass over the ids.
   A token that finds its bucket full goes to one shared spill list instead; the token
   that overflows a bucket first also zeroes that (hot) row of grad_weight.
2. ``_sum_rows``: programs over [BLOCK_ROWS ids, BLOCK_COLS columns] tiles read the
   counters, gather the bucketed grad_out rows (one per id per step, BLOCK_ROWS rows in
   flight) and sum them in fp32 registers, then store the tile: zeros for untouched ids,
   the sum for the rest. Ids with a full bucket are hot: their bucket sum is atomically
   added to the row zeroed in step 1, and programs over the spill list add its tokens the
   same way. Only hot rows (a few dozen at the default size) see atomics, and their
   contention is bounded by the spill count, not by every token.

Work per program is bounded by BLOCK_BUCKET tokens whatever the skew, so no program of a
hot id becomes the tail. BLOCK_BUCKET trades register summation (bigger buckets keep more
of the hot rows' tokens out of atomics) against the length of the slowest row group's loop
and the bucket table's size (VOCAB * BLOCK_BUCKET int32, written only where tokens land).
BLOCK_ROWS * BLOCK_COLS is the tile in flight per program; the zero stores of untouched
rows need no loads and stream at write bandwidth.

Accumulation is fp32 on purpose, in registers and in the atomics: a hot row collects
thousands of bf16 gradients, and a bf16 running sum (8 mantissa bits) stops taking in the
small late contributions once it has grown: the most frequent tokens' embeddings would
silently learn from a wrong gradient. fp32 atomics make the order of the hot rows' sums
nondeterministic, which costs only fp32 rounding. Token and row offsets are int64 where
they multiply a row length (VOCAB * DIM and N_TOKENS * DIM can pass 2^31).

kgen's sweep on an H100 (scripts/library_sweep.py, 2026-11-27) moved the bucketing
kernel from 4 to 8 warps: 2-4% faster at every shape tried.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bucket_tokens(
    ids_ptr, ids_stride, counts_ptr, slots_ptr, spill_ptr, grad_weight_ptr,
    n_tokens, n_rows, n_cols,
    BLOCK_BUCKET: tl.constexpr, BLOCK_TOKENS: tl.constexpr, BLOCK_ZERO: tl.constexpr,
):
    toks = tl.program_id(0) * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
    live = toks < n_tokens
    row = tl.load(ids_ptr + toks.to(tl.int64) * ids_stride, mask=live, other=0).to(tl.int32)
    # every lane's atomic is its own, so tokens of one id in this block get distinct slots
    slot = tl.atomic_add(counts_ptr + row, 1, mask=live, sem="relaxed")
    tl.store(slots_ptr + row.to(tl.int64) * BLOCK_BUCKET + slot, toks, mask=live & (slot < BLOCK_BUCKET))
    spilled = live & (slot >= BLOCK_BUCKET)
    # the spill counter sits after the n_rows per-id counters
    at = tl.atomic_add(counts_ptr + n_rows + tl.zeros_like(toks), 1, mask=spilled, sem="relaxed")
    tl.store(spill_ptr + at, toks, mask=spilled)
    # the first token to overflow a bucket zeroes that hot row: it is summed with atomics
    first = live & (slot == BLOCK_BUCKET)
    if tl.max(first.to(tl.int32), axis=0) > 0:
        base = grad_weight_ptr + row.to(tl.int64)[:, None] * n_cols
        for c in range(0, n_cols, BLOCK_ZERO):
            cols = c + tl.arange(0, BLOCK_ZERO)
            zero = tl.zeros((BLOCK_TOKENS, BLOCK_ZERO), dtype=tl.float32)
            tl.store(base + cols[None, :], zero, mask=first[:, None] & (cols < n_cols)[None, :])


@triton.jit
def _sum_rows(
    grad_out_ptr, go_stride_row, go_stride_col, ids_ptr, ids_stride,
    counts_ptr, slots_ptr, spill_ptr, grad_weight_ptr,
    n_rows, n_cols, n_spill_programs,
    BLOCK_BUCKET: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
    BLOCK_SPILL: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_ok = cols < n_cols
    go_cols = cols.to(tl.int64) * go_stride_col
    if pid < n_spill_programs:
        # spilled tokens of hot rows, first in the grid so their atomics overlap the stores
        n_spilled = tl.load(counts_ptr + n_rows)
        first = pid * BLOCK_SPILL
        if first < n_spilled:
            idx = first + tl.arange(0, BLOCK_SPILL)
            live = idx < n_spilled
            tok = tl.load(spill_ptr + idx, mask=live, other=0).to(tl.int64)
            row = tl.load(ids_ptr + tok * ids_stride, mask=live, other=0).to(tl.int64)
            m = live[:, None] & col_ok[None, :]
            g = tl.load(grad_out_ptr + tok[:, None] * go_stride_row + go_cols[None, :], mask=m, other=0.0)
            tl.atomic_add(grad_weight_ptr + row[:, None] * n_cols + cols[None, :], g.to(tl.float32),
                          mask=m, sem="relaxed")
    else:
        rows = (pid - n_spill_programs) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_ok = rows < n_rows
        count = tl.load(counts_ptr + rows, mask=row_ok, other=0)
        n = tl.minimum(count, BLOCK_BUCKET)
        slots = slots_ptr + rows.to(tl.int64) * BLOCK_BUCKET
        acc = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)
        for j in range(0, tl.max(n, axis=0)):
            live = j < n
            tok = tl.load(slots + j, mask=live, other=0).to(tl.int64)
            g = tl.load(grad_out_ptr + tok[:, None] * go_stride_row + go_cols[None, :],
                        mask=live[:, None] & col_ok[None, :], other=0.0)
            acc += g.to(tl.float32)
        out = grad_weight_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        hot = count > BLOCK_BUCKET
        tl.store(out, acc, mask=(row_ok & ~hot)[:, None] & col_ok[None, :])
        if tl.max(hot.to(tl.int32), axis=0) > 0:
            tl.atomic_add(out, acc, mask=hot[:, None] & col_ok[None, :], sem="relaxed")


class ModelNew(nn.Module):
    def __init__(self, num_embeddings):
        super().__init__()
        self.num_embeddings = num_embeddings

    def forward(self, grad_out, ids):
        n_cols = grad_out.shape[-1]
        grad_out = grad_out.reshape(-1, n_cols)
        ids = ids.reshape(-1)
        n_tokens, n_rows = ids.shape[0], self.num_embeddings
        grad_weight = torch.empty((n_rows, n_cols), dtype=torch.float32, device=grad_out.device)
        if n_rows == 0 or n_cols == 0:
            return grad_weight

        BLOCK_BUCKET = 32
        # per-id counters, then the spill counter
        counts = torch.zeros(n_rows + 1, dtype=torch.int32, device=grad_out.device)
        slots = torch.empty(n_rows * BLOCK_BUCKET, dtype=torch.int32, device=grad_out.device)
        spill = torch.empty(max(n_tokens, 1), dtype=torch.int32, device=grad_out.device)
        if n_tokens > 0:
            BLOCK_TOKENS = 128
            _bucket_tokens[(triton.cdiv(n_tokens, BLOCK_TOKENS),)](
                ids, ids.stride(0), counts, slots, spill, grad_weight,
                n_tokens, n_rows, n_cols,
                BLOCK_BUCKET=BLOCK_BUCKET, BLOCK_TOKENS=BLOCK_TOKENS, BLOCK_ZERO=32, num_warps=8,
            )

        BLOCK_COLS = min(triton.next_power_of_2(n_cols), 1024)
        BLOCK_ROWS = 8
        BLOCK_SPILL = 16
        n_spill_programs = triton.cdiv(n_tokens, BLOCK_SPILL)
        grid = (n_spill_programs + triton.cdiv(n_rows, BLOCK_ROWS), triton.cdiv(n_cols, BLOCK_COLS))
        _sum_rows[grid](
            grad_out, grad_out.stride(0), grad_out.stride(1), ids, ids.stride(0),
            counts, slots, spill, grad_weight,
            n_rows, n_cols, n_spill_programs,
            BLOCK_BUCKET=BLOCK_BUCKET, BLOCK_ROWS=BLOCK_ROWS, BLOCK_COLS=BLOCK_COLS,
            BLOCK_SPILL=BLOCK_SPILL, num_warps=8,
        )
        return grad_weight
