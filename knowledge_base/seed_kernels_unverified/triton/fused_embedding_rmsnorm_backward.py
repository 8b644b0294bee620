"""Fused embedding + RMSNorm backward in Triton: per-token grad_x in registers, scattered by fp32 atomics.

Per token t with row v = ids[t], x = emb_weight[v], r = rstd[t], g = grad_out[t], w = norm_weight:
grad_x = r*g*w - x * r^3 * dot(g*w, x) / D is added into grad_emb_weight[v], and
grad_norm_weight = sum_t g * x * r. grad_x lives in fp32 registers only: never rounded, never
written out, added into the fp32 table with fp32 atomics.

What bounds it is memory: the fp32 grad_emb_weight (VOCAB * DIM * 4 bytes, 262 MB at the
default size, ~85% of the traffic) is written in full, zero rows included; grad_out is read once
and emb_weight only at the ids that occur. Three launches, each write of the table owned by
exactly one of them so that no ordering between programs is ever assumed:

1. ``_claim_rows`` (one pass over the ids): an int32 atomic on a per-id flag; the token that
   finds the flag 0 owns the row and zeroes it. Only touched rows are written here (a few MB),
   each by exactly one token, and this launch ends before any atomic add starts.
2. ``_scatter_and_zero``: two kinds of programs in one grid. Token programs (first in the grid,
   ``TOKEN_PROGRAMS_PER_SM`` per SM, persistent: one leaves an SM's other program slot to the
   zero programs, so the two overlap) load BLOCK_T tokens per step (grad_out rows and the
   gathered x rows in flight together, ids one step ahead), finish grad_x in registers and add it to the
   touched rows with fp32 atomics: those rows were zeroed by the previous launch and are still
   in L2, so the atomics are L2 read-modify-writes, not DRAM round trips. Zero programs store
   zeros into the untouched rows (flag 0) at full write bandwidth, tiles of BLOCK_ZERO_TILE elements;
   they never touch a flagged row, the token programs never touch an unflagged one, so the two
   kinds share no address and run side by side: the atomics hide under the zero stream.
   Each token program sums g*x*r over its tokens into its own fp32 partial row of
   grad_norm_weight (registers when a row fits one tile; else its own scratch row, read and
   written by this program only, with a barrier between a chunk's store and its next load).
3. ``_reduce_partials``: column blocks sum the per-program partials in a fixed order (no
   atomics: grad_norm_weight is deterministic).

Rows wider than BLOCK_D (4096) take two passes over their chunks per token tile: the first
for dot(g*w, x), the second (an L2 hit) for grad_x. BLOCK_T * BLOCK_D is BLOCK_TOKEN_TILE elements
whatever the width (bytes in flight against registers); TOKEN_PROGRAMS_PER_SM trades loads in
flight against the partials' size (programs x D fp32).

fp32 atomics make the hot rows' sums order-dependent at fp32 rounding only (~1e-6 relative);
a lost or duplicated update cannot happen: every add is atomic, and the only plain writes to
the table (the zeroing) happen in launches that share no row with the adds or precede them.
Both parameter gradients are fp32 and accumulated in fp32: a hot row collects thousands of
contributions, and a bf16 running sum (8 mantissa bits) silently drops the small late ones.
Row and token offsets are int64 where they multiply a row length.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _claim_rows(
    ids_ptr, ids_stride, flags_ptr, grad_emb_ptr, n_tokens, n_cols,
    BLOCK_TOKENS: tl.constexpr, BLOCK_ZERO: tl.constexpr,
):
    toks = tl.program_id(0) * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
    live = toks < n_tokens
    row = tl.load(ids_ptr + toks.to(tl.int64) * ids_stride, mask=live, other=0)
    # every lane's atomic is its own: of all tokens of one id, exactly one sees 0
    old = tl.atomic_add(flags_ptr + row, 1, mask=live, sem="relaxed")
    owner = live & (old == 0)
    if tl.max(owner.to(tl.int32), axis=0) > 0:
        base = grad_emb_ptr + row.to(tl.int64)[:, None] * n_cols
        zero = tl.zeros((BLOCK_TOKENS, BLOCK_ZERO), dtype=tl.float32)
        for c in range(0, n_cols, BLOCK_ZERO):
            cols = c + tl.arange(0, BLOCK_ZERO)
            tl.store(base + cols[None, :], zero, mask=owner[:, None] & (cols < n_cols)[None, :])


@triton.jit
def _scatter_and_zero(
    grad_out_ptr, go_stride_row, go_stride_col, ids_ptr, ids_stride,
    emb_ptr, emb_stride_row, emb_stride_col, w_ptr, w_stride, rstd_ptr, rstd_stride,
    flags_ptr, grad_emb_ptr, partial_ptr,
    n_tokens, n_rows, n_cols, n_token_programs,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, ONE_CHUNK: tl.constexpr,
    ZERO_ROWS: tl.constexpr, BLOCK_ZERO: tl.constexpr,
):
    pid = tl.program_id(0)
    inv_d = 1.0 / n_cols
    offs = tl.arange(0, BLOCK_D)
    if pid >= n_token_programs:
        # untouched rows: zeros, store only (flagged rows belong to the token programs)
        rows = (pid - n_token_programs) * ZERO_ROWS + tl.arange(0, ZERO_ROWS)
        flag = tl.load(flags_ptr + rows, mask=rows < n_rows, other=1)
        keep = (rows < n_rows) & (flag == 0)
        base = grad_emb_ptr + rows.to(tl.int64)[:, None] * n_cols
        zero = tl.zeros((ZERO_ROWS, BLOCK_ZERO), dtype=tl.float32)
        for c in range(0, n_cols, BLOCK_ZERO):
            cols = c + tl.arange(0, BLOCK_ZERO)
            tl.store(base + cols[None, :], zero, mask=keep[:, None] & (cols < n_cols)[None, :])
    else:
        step = n_token_programs * BLOCK_T
        if ONE_CHUNK:
            col_ok = offs < n_cols
            w = tl.load(w_ptr + offs * w_stride, mask=col_ok, other=0.0).to(tl.float32)
            go_cols = offs.to(tl.int64) * go_stride_col
            emb_cols = offs.to(tl.int64) * emb_stride_col
            norm_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
            # ids and rstd are loaded one tile ahead: the gather of x waits on the ids, and
            # this way only the first tile pays for that dependent load
            toks = pid * BLOCK_T + tl.arange(0, BLOCK_T)
            row = tl.load(ids_ptr + toks.to(tl.int64) * ids_stride, mask=toks < n_tokens, other=0).to(tl.int64)
            r = tl.load(rstd_ptr + toks.to(tl.int64) * rstd_stride, mask=toks < n_tokens, other=0.0).to(tl.float32)
            for _start in range(pid * BLOCK_T, n_tokens, step):
                live = toks < n_tokens
                tok64 = toks.to(tl.int64)
                nxt = toks + step
                nxt_row = tl.load(ids_ptr + nxt.to(tl.int64) * ids_stride, mask=nxt < n_tokens, other=0).to(tl.int64)
                nxt_r = tl.load(rstd_ptr + nxt.to(tl.int64) * rstd_stride, mask=nxt < n_tokens, other=0.0).to(tl.float32)
                m = live[:, None] & col_ok[None, :]
                g = tl.load(grad_out_ptr + tok64[:, None] * go_stride_row + go_cols[None, :],
                            mask=m, other=0.0).to(tl.float32)
                x = tl.load(emb_ptr + row[:, None] * emb_stride_row + emb_cols[None, :],
                            mask=m, other=0.0).to(tl.float32)
                gw = g * w[None, :]
                coef = r * r * r * tl.sum(gw * x, axis=1) * inv_d
                grad_x = r[:, None] * gw - x * coef[:, None]
                tl.atomic_add(grad_emb_ptr + row[:, None] * n_cols + offs[None, :], grad_x,
                              mask=m, sem="relaxed")
                norm_acc += tl.sum(g * x * r[:, None], axis=0)
                toks, row, r = nxt, nxt_row, nxt_r
            tl.store(partial_ptr + pid.to(tl.int64) * n_cols + offs, norm_acc, mask=col_ok)
        else:
            # rows wider than one tile: dot(g*w, x) over the chunks first, then grad_x chunk by
            # chunk (the re-read is an L2 hit); this program's partial row kept in its scratch row
            part = partial_ptr + pid.to(tl.int64) * n_cols
            for c in range(0, n_cols, BLOCK_D):
                tl.store(part + c + offs, tl.zeros((BLOCK_D,), dtype=tl.float32), mask=c + offs < n_cols)
            tl.debug_barrier()
            for start in range(pid * BLOCK_T, n_tokens, step):
                toks = start + tl.arange(0, BLOCK_T)
                live = toks < n_tokens
                tok64 = toks.to(tl.int64)
                row = tl.load(ids_ptr + tok64 * ids_stride, mask=live, other=0).to(tl.int64)
                r = tl.load(rstd_ptr + tok64 * rstd_stride, mask=live, other=0.0).to(tl.float32)
                dot = tl.zeros((BLOCK_T,), dtype=tl.float32)
                for c in range(0, n_cols, BLOCK_D):
                    cols = c + offs
                    col_ok = cols < n_cols
                    m = live[:, None] & col_ok[None, :]
                    w = tl.load(w_ptr + cols * w_stride, mask=col_ok, other=0.0).to(tl.float32)
                    g = tl.load(grad_out_ptr + tok64[:, None] * go_stride_row + cols[None, :].to(tl.int64) * go_stride_col,
                                mask=m, other=0.0).to(tl.float32)
                    x = tl.load(emb_ptr + row[:, None] * emb_stride_row + cols[None, :].to(tl.int64) * emb_stride_col,
                                mask=m, other=0.0).to(tl.float32)
                    dot += tl.sum(g * w[None, :] * x, axis=1)
                coef = r * r * r * dot * inv_d
                for c in range(0, n_cols, BLOCK_D):
                    cols = c + offs
                    col_ok = cols < n_cols
                    m = live[:, None] & col_ok[None, :]
                    w = tl.load(w_ptr + cols * w_stride, mask=col_ok, other=0.0).to(tl.float32)
                    g = tl.load(grad_out_ptr + tok64[:, None] * go_stride_row + cols[None, :].to(tl.int64) * go_stride_col,
                                mask=m, other=0.0).to(tl.float32)
                    x = tl.load(emb_ptr + row[:, None] * emb_stride_row + cols[None, :].to(tl.int64) * emb_stride_col,
                                mask=m, other=0.0).to(tl.float32)
                    grad_x = r[:, None] * g * w[None, :] - x * coef[:, None]
                    tl.atomic_add(grad_emb_ptr + row[:, None] * n_cols + cols[None, :], grad_x,
                                  mask=m, sem="relaxed")
                    acc = tl.load(part + cols, mask=col_ok, other=0.0)
                    tl.store(part + cols, acc + tl.sum(g * x * r[:, None], axis=0), mask=col_ok)
                # every thread's partial stores visible before any thread's next load of them
                tl.debug_barrier()


@triton.jit
def _reduce_partials(
    partial_ptr, grad_norm_ptr, n_partials, n_cols,
    BLOCK_PARTIALS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_ok = cols < n_cols
    acc = tl.zeros((BLOCK_PARTIALS, BLOCK_COLS), dtype=tl.float32)
    for p in range(0, n_partials, BLOCK_PARTIALS):
        ps = p + tl.arange(0, BLOCK_PARTIALS)
        acc += tl.load(partial_ptr + ps.to(tl.int64)[:, None] * n_cols + cols[None, :],
                       mask=(ps < n_partials)[:, None] & col_ok[None, :], other=0.0)
    tl.store(grad_norm_ptr + cols, tl.sum(acc, axis=0), mask=col_ok)


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

        # per-id flags: the first token of an id owns (zeroes) its row
        flags = torch.zeros(max(n_rows, 1), dtype=torch.int32, device=device)
        if n_tokens > 0:
            # one id per thread (BLOCK_TOKENS = 32 * num_warps): the flag's old value, which
            # decides the owner, is then never a copy broadcast between threads
            BLOCK_TOKENS = 32
            _claim_rows[(triton.cdiv(n_tokens, BLOCK_TOKENS),)](
                ids, ids.stride(0), flags, grad_emb, n_tokens, n_cols,
                BLOCK_TOKENS=BLOCK_TOKENS, BLOCK_ZERO=min(triton.next_power_of_2(n_cols), 256), num_warps=1,
            )

        # a whole row per tile up to BLOCK_D columns, column chunks beyond
        BLOCK_D = min(triton.next_power_of_2(n_cols), 4096)
        # tokens per step: BLOCK_TOKEN_TILE elements in flight, whatever the row length
        BLOCK_TOKEN_TILE = 4096
        BLOCK_T = triton.cdiv(BLOCK_TOKEN_TILE, BLOCK_D)
        TOKEN_PROGRAMS_PER_SM = 1
        n_token_programs = min(triton.cdiv(n_tokens, BLOCK_T), TOKEN_PROGRAMS_PER_SM * sm_count(device))
        # untouched rows: BLOCK_ZERO_TILE elements of zeros per program
        BLOCK_ZERO = min(triton.next_power_of_2(n_cols), 1024)
        BLOCK_ZERO_TILE = 16384
        ZERO_ROWS = triton.cdiv(BLOCK_ZERO_TILE, BLOCK_ZERO)
        n_zero_programs = triton.cdiv(n_rows, ZERO_ROWS)
        partials = torch.empty((max(n_token_programs, 1), n_cols), dtype=torch.float32, device=device)
        if n_token_programs + n_zero_programs > 0:
            _scatter_and_zero[(n_token_programs + n_zero_programs,)](
                grad_out, grad_out.stride(0), grad_out.stride(1), ids, ids.stride(0),
                emb_weight, emb_weight.stride(0), emb_weight.stride(1), norm_weight, norm_weight.stride(0),
                rstd, rstd.stride(0), flags, grad_emb, partials,
                n_tokens, n_rows, n_cols, n_token_programs,
                BLOCK_T=BLOCK_T, BLOCK_D=BLOCK_D, ONE_CHUNK=BLOCK_D >= n_cols,
                ZERO_ROWS=ZERO_ROWS, BLOCK_ZERO=BLOCK_ZERO, num_warps=8,
            )

        BLOCK_COLS = min(triton.next_power_of_2(n_cols), 128)
        _reduce_partials[(triton.cdiv(n_cols, BLOCK_COLS),)](
            partials, grad_norm, n_token_programs, n_cols,
            BLOCK_PARTIALS=16, BLOCK_COLS=BLOCK_COLS, num_warps=4,
        )
        return grad_emb, grad_norm
