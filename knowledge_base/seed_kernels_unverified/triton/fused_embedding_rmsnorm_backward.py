"""Fused embedding + RMSNorm backward in Triton: bucket the ids, finish each row in registers.

Per token t with row v = ids[t], x = emb_weight[v], r = rstd[t], g = grad_out[t]:
grad_x = r*g*w - x * r^3 * dot(g, w*x) / D, scattered into grad_emb_weight[v]; and
grad_norm_weight = sum_t g * x * r. Summed over the tokens of one row, both become sums of
plain vectors, which is what lets a row be finished with one pass over its tokens:

    S_v = sum_t r_t g_t        T_v = sum_t r_t^3 g_t        Q_v = dot(T_v, w * x_v)
    grad_emb_weight[v] = w * S_v - x_v * Q_v / D,    grad_norm_weight = sum_v x_v * S_v

What bounds it is memory: the fp32 grad_emb_weight (VOCAB * DIM * 4 bytes, 262 MB at the
default size, ~85% of the traffic) must be written once, zero rows included; grad_out is
read once and emb_weight only at the ids that occur. A zero fill followed by atomic adds
writes every touched row twice and queues fp32 atomics on the Zipf-hot rows, so:

1. ``_bucket_tokens`` (one pass over the ids): each token takes a slot in its id's bucket
   with an int32 atomic on a per-id counter (``BLOCK_BUCKET`` slots per id): a counting
   sort without its prefix-sum launch. Tokens that find the bucket full go to a spill
   list; the first of them zeroes that hot row and its Q, and lists the row.
2. ``_finish_rows``: a few persistent programs per SM (the ``2 * sm_count`` knob) walk
   [BLOCK_ROWS, D] tiles of ids (BLOCK_TILE elements), counters loaded one tile ahead. Each gathers the bucketed tokens (one per id per step), accumulates S and
   T in fp32 registers, reads x only for touched ids, and stores the finished rows (zeros
   for untouched ids) with one plain store each; x*S is summed into the program's
   grad_norm_weight partial, kept in registers across its tiles. Hot ids (full bucket) add
   S and Q atomically to the zeroed row; spill programs, first in the grid, do the same
   for spilled tokens, one token at a time. Rows wider than ``BLOCK_D`` go in column
   chunks: S goes to the output first and is finished in a second pass (an L2 hit).
3. ``_finish_hot``: column blocks sum the per-program partials (never atomics: a fixed
   order) and finish the few hot rows (w*S - x*Q/D, and their x*S for grad_norm_weight).

Work per program is bounded by BLOCK_BUCKET tokens per id whatever the skew, so no hot
id's program becomes the tail. BLOCK_BUCKET trades register summation against the row
loop's length and the bucket table (VOCAB * BLOCK_BUCKET int32, written where tokens
land); BLOCK_TILE is the tile per step (bytes in flight, and the registers that hold S,
T, x and w; the spill tile is as large, so neither branch sets the registers alone);
programs per SM trade loads in flight against the partials' size (programs x D fp32).

Both parameter gradients are fp32 and accumulated in fp32: a hot row collects thousands
of contributions, and a bf16 running sum (8 mantissa bits) silently drops the small late
ones: the most frequent tokens would learn from a wrong gradient. Row and token offsets are
int64 where they multiply a row length.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bucket_tokens(
    ids_ptr, ids_stride, counts_ptr, slots_ptr, spill_ptr, hot_ptr, q_ptr, grad_emb_ptr,
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
    # counters after the n_rows per-id ones: spilled tokens, then hot rows
    at = tl.atomic_add(counts_ptr + n_rows + tl.zeros_like(toks), 1, mask=spilled, sem="relaxed")
    tl.store(spill_ptr + at, toks, mask=spilled)
    # the first token to overflow a bucket zeroes that hot row and its Q and lists the row
    first = live & (slot == BLOCK_BUCKET)
    if tl.max(first.to(tl.int32), axis=0) > 0:
        h = tl.atomic_add(counts_ptr + n_rows + 1 + tl.zeros_like(toks), 1, mask=first, sem="relaxed")
        tl.store(hot_ptr + h, row, mask=first)
        tl.store(q_ptr + row, tl.zeros((BLOCK_TOKENS,), dtype=tl.float32), mask=first)
        base = grad_emb_ptr + row.to(tl.int64)[:, None] * n_cols
        for c in range(0, n_cols, BLOCK_ZERO):
            cols = c + tl.arange(0, BLOCK_ZERO)
            zero = tl.zeros((BLOCK_TOKENS, BLOCK_ZERO), dtype=tl.float32)
            tl.store(base + cols[None, :], zero, mask=first[:, None] & (cols < n_cols)[None, :])


@triton.jit
def _finish_rows(
    grad_out_ptr, go_stride_row, go_stride_col, ids_ptr, ids_stride,
    emb_ptr, emb_stride_row, emb_stride_col, w_ptr, w_stride, rstd_ptr, rstd_stride,
    counts_ptr, slots_ptr, spill_ptr, q_ptr, grad_emb_ptr, partial_ptr,
    n_rows, n_cols, n_spill_programs, n_row_programs,
    BLOCK_BUCKET: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SPILL: tl.constexpr, BLOCK_SPILL_D: tl.constexpr, ONE_CHUNK: tl.constexpr,
):
    pid = tl.program_id(0)
    inv_d = 1.0 / n_cols
    offs = tl.arange(0, BLOCK_D)
    if pid < n_spill_programs:
        # spilled tokens of hot rows: S and Q added atomically, one token per tile row
        n_spilled = tl.load(counts_ptr + n_rows)
        first = pid * BLOCK_SPILL
        if first < n_spilled:
            idx = first + tl.arange(0, BLOCK_SPILL)
            live = idx < n_spilled
            tok = tl.load(spill_ptr + idx, mask=live, other=0).to(tl.int64)
            row = tl.load(ids_ptr + tok * ids_stride, mask=live, other=0).to(tl.int64)
            r = tl.load(rstd_ptr + tok * rstd_stride, mask=live, other=0.0).to(tl.float32)
            d = tl.zeros((BLOCK_SPILL,), dtype=tl.float32)
            for c in range(0, n_cols, BLOCK_SPILL_D):
                cols = c + tl.arange(0, BLOCK_SPILL_D)
                col_ok = cols < n_cols
                m = live[:, None] & col_ok[None, :]
                w = tl.load(w_ptr + cols * w_stride, mask=col_ok, other=0.0).to(tl.float32)
                g = tl.load(grad_out_ptr + tok[:, None] * go_stride_row + cols[None, :].to(tl.int64) * go_stride_col,
                            mask=m, other=0.0).to(tl.float32)
                x = tl.load(emb_ptr + row[:, None] * emb_stride_row + cols[None, :].to(tl.int64) * emb_stride_col,
                            mask=m, other=0.0).to(tl.float32)
                tl.atomic_add(grad_emb_ptr + row[:, None] * n_cols + cols[None, :], r[:, None] * g,
                              mask=m, sem="relaxed")
                d += tl.sum(g * w[None, :] * x, axis=1)
            tl.atomic_add(q_ptr + row, r * r * r * d, mask=live, sem="relaxed")
    else:
        prog = pid - n_spill_programs
        if ONE_CHUNK:
            col_ok = offs < n_cols
            w = tl.load(w_ptr + offs * w_stride, mask=col_ok, other=0.0).to(tl.float32)
            go_cols = offs.to(tl.int64) * go_stride_col
            emb_cols = offs.to(tl.int64) * emb_stride_col
            norm_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
            step = n_row_programs * BLOCK_ROWS
            # each tile's counters are loaded one tile ahead: a tile of untouched ids is then
            # only a store, with no load latency in front of it
            ahead = prog * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            next_count = tl.load(counts_ptr + ahead, mask=ahead < n_rows, other=0)
            for start in range(prog * BLOCK_ROWS, n_rows, step):
                rows = start + tl.arange(0, BLOCK_ROWS)
                row_ok = rows < n_rows
                count = next_count
                next_count = tl.load(counts_ptr + rows + step, mask=rows + step < n_rows, other=0)
                n = tl.minimum(count, BLOCK_BUCKET)
                hot = count > BLOCK_BUCKET
                slots = slots_ptr + rows.to(tl.int64) * BLOCK_BUCKET
                # x does not depend on the tokens: its load overlaps theirs
                x = tl.load(emb_ptr + rows.to(tl.int64)[:, None] * emb_stride_row + emb_cols[None, :],
                            mask=(n > 0)[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
                s = tl.zeros((BLOCK_ROWS, BLOCK_D), dtype=tl.float32)
                t = tl.zeros((BLOCK_ROWS, BLOCK_D), dtype=tl.float32)
                for j in range(0, tl.max(n, axis=0)):
                    live = j < n
                    tok = tl.load(slots + j, mask=live, other=0).to(tl.int64)
                    r = tl.load(rstd_ptr + tok * rstd_stride, mask=live, other=0.0).to(tl.float32)
                    g = tl.load(grad_out_ptr + tok[:, None] * go_stride_row + go_cols[None, :],
                                mask=live[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
                    rg = r[:, None] * g
                    s += rg
                    t += (r * r)[:, None] * rg
                q = tl.sum(t * w[None, :] * x, axis=1)
                out = grad_emb_ptr + rows.to(tl.int64)[:, None] * n_cols + offs[None, :]
                res = w[None, :] * s - x * (q * inv_d)[:, None]
                tl.store(out, res, mask=(row_ok & ~hot)[:, None] & col_ok[None, :])
                norm_acc += tl.sum(tl.where(hot[:, None], 0.0, x * s), axis=0)
                if tl.max(hot.to(tl.int32), axis=0) > 0:
                    tl.atomic_add(out, s, mask=hot[:, None] & col_ok[None, :], sem="relaxed")
                    tl.atomic_add(q_ptr + rows, q, mask=hot, sem="relaxed")
            tl.store(partial_ptr + prog.to(tl.int64) * n_cols + offs, norm_acc, mask=col_ok)
        else:
            # rows wider than one tile: S to the output per column chunk, finished in a second
            # pass once Q is known; this program's partial row accumulated in place
            part = partial_ptr + prog.to(tl.int64) * n_cols
            for c in range(0, n_cols, BLOCK_D):
                tl.store(part + c + offs, tl.zeros((BLOCK_D,), dtype=tl.float32), mask=c + offs < n_cols)
            for start in range(prog * BLOCK_ROWS, n_rows, n_row_programs * BLOCK_ROWS):
                rows = start + tl.arange(0, BLOCK_ROWS)
                row_ok = rows < n_rows
                count = tl.load(counts_ptr + rows, mask=row_ok, other=0)
                n = tl.minimum(count, BLOCK_BUCKET)
                hot = count > BLOCK_BUCKET
                light = (n > 0) & ~hot
                slots = slots_ptr + rows.to(tl.int64) * BLOCK_BUCKET
                q = tl.zeros((BLOCK_ROWS,), dtype=tl.float32)
                for c in range(0, n_cols, BLOCK_D):
                    cols = c + offs
                    col_ok = cols < n_cols
                    w = tl.load(w_ptr + cols * w_stride, mask=col_ok, other=0.0).to(tl.float32)
                    s = tl.zeros((BLOCK_ROWS, BLOCK_D), dtype=tl.float32)
                    t = tl.zeros((BLOCK_ROWS, BLOCK_D), dtype=tl.float32)
                    for j in range(0, tl.max(n, axis=0)):
                        live = j < n
                        tok = tl.load(slots + j, mask=live, other=0).to(tl.int64)
                        r = tl.load(rstd_ptr + tok * rstd_stride, mask=live, other=0.0).to(tl.float32)
                        g = tl.load(grad_out_ptr + tok[:, None] * go_stride_row
                                    + cols[None, :].to(tl.int64) * go_stride_col,
                                    mask=live[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
                        rg = r[:, None] * g
                        s += rg
                        t += (r * r)[:, None] * rg
                    x = tl.load(emb_ptr + rows.to(tl.int64)[:, None] * emb_stride_row
                                + cols[None, :].to(tl.int64) * emb_stride_col,
                                mask=(n > 0)[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
                    q += tl.sum(t * w[None, :] * x, axis=1)
                    out = grad_emb_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
                    tl.store(out, s, mask=(row_ok & ~hot)[:, None] & col_ok[None, :])
                    if tl.max(hot.to(tl.int32), axis=0) > 0:
                        tl.atomic_add(out, s, mask=hot[:, None] & col_ok[None, :], sem="relaxed")
                if tl.max(hot.to(tl.int32), axis=0) > 0:
                    tl.atomic_add(q_ptr + rows, q, mask=hot, sem="relaxed")
                if tl.max(light.to(tl.int32), axis=0) > 0:
                    # the first pass's stores (other threads' included) before they are read back
                    tl.debug_barrier()
                    for c in range(0, n_cols, BLOCK_D):
                        cols = c + offs
                        col_ok = cols < n_cols
                        m = light[:, None] & col_ok[None, :]
                        w = tl.load(w_ptr + cols * w_stride, mask=col_ok, other=0.0).to(tl.float32)
                        out = grad_emb_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
                        s = tl.load(out, mask=m, other=0.0)
                        x = tl.load(emb_ptr + rows.to(tl.int64)[:, None] * emb_stride_row
                                    + cols[None, :].to(tl.int64) * emb_stride_col, mask=m, other=0.0).to(tl.float32)
                        tl.store(out, w[None, :] * s - x * (q * inv_d)[:, None], mask=m)
                        acc = tl.load(part + cols, mask=col_ok, other=0.0)
                        tl.store(part + cols, acc + tl.sum(x * s, axis=0), mask=col_ok)
                    tl.debug_barrier()


@triton.jit
def _finish_hot(
    emb_ptr, emb_stride_row, emb_stride_col, w_ptr, w_stride,
    counts_ptr, hot_ptr, q_ptr, grad_emb_ptr, partial_ptr, grad_norm_ptr,
    n_rows, n_cols, n_partials,
    BLOCK_HOT: tl.constexpr, BLOCK_PARTIALS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_ok = cols < n_cols
    inv_d = 1.0 / n_cols
    # grad_norm_weight: the programs' partials in a fixed order
    acc = tl.zeros((BLOCK_PARTIALS, BLOCK_COLS), dtype=tl.float32)
    for p in range(0, n_partials, BLOCK_PARTIALS):
        ps = p + tl.arange(0, BLOCK_PARTIALS)
        acc += tl.load(partial_ptr + ps.to(tl.int64)[:, None] * n_cols + cols[None, :],
                       mask=(ps < n_partials)[:, None] & col_ok[None, :], other=0.0)
    norm = tl.sum(acc, axis=0)
    # hot rows hold S; finish them and add their x * S
    w = tl.load(w_ptr + cols * w_stride, mask=col_ok, other=0.0).to(tl.float32)
    n_hot = tl.load(counts_ptr + n_rows + 1)
    for h0 in range(0, n_hot, BLOCK_HOT):
        hs = h0 + tl.arange(0, BLOCK_HOT)
        live = hs < n_hot
        row = tl.load(hot_ptr + hs, mask=live, other=0).to(tl.int64)
        q = tl.load(q_ptr + row, mask=live, other=0.0)
        m = live[:, None] & col_ok[None, :]
        out = grad_emb_ptr + row[:, None] * n_cols + cols[None, :]
        s = tl.load(out, mask=m, other=0.0)
        x = tl.load(emb_ptr + row[:, None] * emb_stride_row + cols[None, :].to(tl.int64) * emb_stride_col,
                    mask=m, other=0.0).to(tl.float32)
        tl.store(out, w[None, :] * s - x * (q * inv_d)[:, None], mask=m)
        norm += tl.sum(x * s, axis=0)
    tl.store(grad_norm_ptr + cols, norm, mask=col_ok)


def sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, ids, emb_weight, norm_weight, rstd):
        n_rows, n_cols = emb_weight.shape
        grad_out = grad_out.reshape(-1, n_cols)
        ids, rstd = ids.reshape(-1), rstd.reshape(-1)
        n_tokens = ids.shape[0]
        device = grad_out.device
        grad_emb = torch.empty((n_rows, n_cols), dtype=torch.float32, device=device)
        grad_norm = torch.empty((n_cols,), dtype=torch.float32, device=device)
        if n_cols == 0:
            return grad_emb, grad_norm

        BLOCK_BUCKET = 32
        # per-id counters, then the spilled-token and hot-row counters
        counts = torch.zeros(n_rows + 2, dtype=torch.int32, device=device)
        slots = torch.empty(max(n_rows * BLOCK_BUCKET, 1), dtype=torch.int32, device=device)
        spill = torch.empty(max(n_tokens, 1), dtype=torch.int32, device=device)
        hot = torch.empty(n_tokens // (BLOCK_BUCKET + 1) + 1, dtype=torch.int32, device=device)
        q = torch.empty(max(n_rows, 1), dtype=torch.float32, device=device)
        if n_tokens > 0:
            BLOCK_TOKENS = 128
            _bucket_tokens[(triton.cdiv(n_tokens, BLOCK_TOKENS),)](
                ids, ids.stride(0), counts, slots, spill, hot, q, grad_emb,
                n_tokens, n_rows, n_cols,
                BLOCK_BUCKET=BLOCK_BUCKET, BLOCK_TOKENS=BLOCK_TOKENS, BLOCK_ZERO=32, num_warps=4,
            )

        # a whole row per tile up to BLOCK_D columns, column chunks beyond
        BLOCK_D = min(triton.next_power_of_2(n_cols), 4096)
        # ids per tile: BLOCK_TILE elements per step, whatever the row length
        BLOCK_TILE = 4096
        BLOCK_ROWS = triton.cdiv(BLOCK_TILE, BLOCK_D)
        BLOCK_SPILL = 8
        # the spill tile holds as many elements as a row tile: the kernel's registers are its largest
        BLOCK_SPILL_D = triton.cdiv(BLOCK_ROWS * BLOCK_D, BLOCK_SPILL)
        n_spill_programs = triton.cdiv(n_tokens, BLOCK_SPILL)
        n_row_programs = max(1, min(triton.cdiv(n_rows, BLOCK_ROWS), 2 * sm_count(device)))
        partials = torch.empty((n_row_programs, n_cols), dtype=torch.float32, device=device)
        _finish_rows[(n_spill_programs + n_row_programs,)](
            grad_out, grad_out.stride(0), grad_out.stride(1), ids, ids.stride(0),
            emb_weight, emb_weight.stride(0), emb_weight.stride(1), norm_weight, norm_weight.stride(0),
            rstd, rstd.stride(0), counts, slots, spill, q, grad_emb, partials,
            n_rows, n_cols, n_spill_programs, n_row_programs,
            BLOCK_BUCKET=BLOCK_BUCKET, BLOCK_ROWS=BLOCK_ROWS, BLOCK_D=BLOCK_D, BLOCK_SPILL=BLOCK_SPILL,
            BLOCK_SPILL_D=BLOCK_SPILL_D, ONE_CHUNK=BLOCK_D >= n_cols, num_warps=8,
        )

        BLOCK_COLS = min(triton.next_power_of_2(n_cols), 64)
        _finish_hot[(triton.cdiv(n_cols, BLOCK_COLS),)](
            emb_weight, emb_weight.stride(0), emb_weight.stride(1), norm_weight, norm_weight.stride(0),
            counts, hot, q, grad_emb, partials, grad_norm,
            n_rows, n_cols, n_row_programs,
            BLOCK_HOT=16, BLOCK_PARTIALS=32, BLOCK_COLS=BLOCK_COLS, num_warps=4,
        )
        return grad_emb, grad_norm
