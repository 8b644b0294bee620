"""Fused linear cross-entropy in Triton + cuBLAS: the LM head, its mean loss and both gradients,
token chunk by token chunk, so the [N, V] logits never exist in full.

loss = mean_i (lse(z_i) - z_i[t_i]) with z = hidden @ weight.T, G = (softmax(z) - onehot(t)) / N,
grad_hidden = G @ weight, grad_weight = G.T @ hidden (the problem file says it exactly).

What bounds it: GEMMs. Three products of 2 N H V flops each (6 N H V: 3.2 TFLOP at
8192 x 2048 x 32000, ~5 ms of tensor-core time on an H100) against ~0.3 GB of inputs and outputs; the logits and
their gradient are N V values each (1 GB of fp32 logits at the default sizes), which an unfused
LM head writes and reads several times and this op only ever holds one chunk of. Per chunk of
C tokens:

1. ``_logits_kernel`` (Triton GEMM, fp32 accumulators): z = hidden[chunk] @ weight.T stored as
   **fp32**, and in its epilogue each [BLOCK_M, BLOCK_N] tile's per-row (max, sum exp(z - max))
   stored as partials, so the log-sum-exp needs no extra pass over the logits. Not a bf16
   product from cuBLAS: the loss is an fp32 output judged at fp32's tolerance, and rounding z to
   bf16 (8 mantissa bits: 0.016 at z = 3) moves a one-token loss by ~5e-4 relative and, for
   large or spread logits, the softmax itself. ``torch.mm(..., out_dtype=torch.float32)`` would
   do this in cuBLAS but exists on CUDA only, and this file runs the same code in the CPU
   interpreter that verifies it.
2. ``_ce_grad_kernel`` (BLOCK_R tokens a program): merges each row's partials into its lse,
   stores the token's fp32 loss, and walks the row once more storing G = (exp(z - lse) - onehot)
   / N as two bf16 halves, ``G_hi = bf16(G)`` and ``G_lo = bf16(G - G_hi)``: G to ~16 bits.
3. ``grad_hidden[chunk] = G_hi @ weight + G_lo @ weight``: ``torch.mm`` then ``torch.addmm``
   (cuBLAS, fp32 accumulation inside, bf16 out).
4. ``_grad_weight_kernel`` (Triton GEMM): grad_weight += G_hi.T @ h + G_lo.T @ h over the chunk,
   into an **fp32** [V, H] accumulator that lives across chunks (none with one chunk); the last
   chunk stores it rounded once to bf16. The accumulator is read and written once per chunk:
   8 V H bytes a chunk, 0.5 GB at the default sizes, so 16 chunks cost ~8 GB of traffic (about
   2.5 ms at an H100's 3.35 TB/s, beside ~8 ms of GEMMs): the price of chunking over tokens,
   and why chunks are as large as the memory budget allows.
5. after the last chunk, ``_mean_kernel`` sums the N fp32 token losses in a fixed order (one
   program: deterministic) and multiplies by 1 / N.

Why G in two halves, and why grad_weight is not a bf16 product from cuBLAS added into fp32:
every row of the exact G sums to zero, so a component common to all rows of weight (a mean-
shifted weight) cancels from grad_hidden, which a bf16 G (rows that no longer sum to zero)
misses by a few percent; and grad_weight's rows for the targets are sums of -h_t / N terms
several times its RMS that cancel where two tokens share a target, so rounding G, or each
chunk's product, to bf16 before that cancellation leaves errors of a few percent of the RMS on
those elements. Measured in plain-torch emulation at 37 x 64 x 301 over 42 trials of the
verifier's distributions: G in bf16 fails the elementwise bound on 4 (one chunk) to 11 (three
chunks, bf16 products), G in halves with fp32 products on none. The halves cost a fourth and a
fifth GEMM's worth of flops (10 N H V in all, not 6). A bf16 running sum of grad_weight over
chunks would be worse still: 8 bits of a sum of N / C parts, silently wrong for hundreds of
chunks (long sequences, small chunks).

Memory beyond the inputs and outputs: C V (4 + 2 + 2) bytes per chunk (fp32 logits, G_hi, G_lo)
plus 8 C V / BLOCK_N bytes of partials, reused by every chunk; a V H fp32 accumulator (with more
than one chunk) and 4 N bytes of token losses. At 8192 x 2048 x 32000: 131 MB per 512-token
chunk + 262 MB, against the ~2 GB an unfused fp32 LM head, loss and backward hold.

Knobs: ``CHUNK_LOGITS`` (logits per chunk on a GPU: 2^24 is 512 tokens of a 32K vocabulary,
128 MB of chunk buffers; larger chunks mean fewer passes over the fp32 accumulator and fuller
GEMMs, smaller ones less memory); ``INTERPRETER_CHUNKS`` (chunks per call in the CPU
interpreter, whose cost is launches, not memory: three, so every size takes the first, middle
and last chunk paths and a partial last chunk); ``CHUNK_ALIGN`` (GPU chunks a multiple of
BLOCK_M where they can be); the logits GEMM's ``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``
(GROUP_M row tiles walk the vocabulary together, so a weight tile comes from HBM once per
chunk), ``GEMM_WARPS`` / ``GEMM_STAGES``; ``CE_BLOCK_V`` and ``CE_TILE`` (a gradient program
holds CE_TILE logits, rows of at most CE_BLOCK_V); the grad_weight GEMM's ``GW_BLOCK_V``,
``GW_BLOCK_H``, ``GW_BLOCK_T``, ``GW_WARPS``; ``MEAN_BLOCK``. Short axes get short tiles (a vocabulary,
head or chunk below a block: BLOCK_N, BLOCK_K, BLOCK_M and GW_BLOCK_T shrink to its power of
two, at least 16); the default sizes take the full ones. Offsets that multiply a row length are
int64. N = 1, a vocabulary that is a multiple of no block and a token count that is a multiple
of no chunk are masked tails of the same code. Inputs are bf16 (or fp16): their products are
exact in the fp32 accumulators of every ``tl.dot`` here; fp32 inputs would need TF32 turned off.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK_LOGITS = 1 << 24  # logits per token chunk on a GPU (fp32: 64 MB, + 2 x 32 MB of G halves)
INTERPRETER_CHUNKS = 3  # chunks per call in the CPU interpreter (first, middle, last)
CHUNK_ALIGN = 128  # chunk length a multiple of this where the budget allows (BLOCK_M)
BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
GROUP_M = 8
GEMM_WARPS = 8
GEMM_STAGES = 3
CE_BLOCK_V = 2048
CE_TILE = 16384
GW_BLOCK_V = 128
GW_BLOCK_H = 128
GW_BLOCK_T = 64
GW_WARPS = 8
MEAN_BLOCK = 1024


@triton.jit
def _logits_kernel(
    h_ptr, w_ptr, z_ptr, part_m_ptr, part_s_ptr,
    n_rows, n_vocab, n_hidden, stride_h, stride_w, n_vtiles,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """z[m, n] = sum_k h[m, k] w[n, k] in fp32, stored fp32, with each tile's per-row
    (max, sum exp(z - max)) stored at part[m, tile]."""
    pid = tl.program_id(0)
    n_mtiles = tl.cdiv(n_rows, BLOCK_M)
    in_group = GROUP_M * n_vtiles
    first_m = (pid // in_group) * GROUP_M
    group_rows = tl.minimum(n_mtiles - first_m, GROUP_M)
    tile_m = first_m + (pid % in_group) % group_rows
    tile_n = (pid % in_group) // group_rows
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < n_rows
    col_ok = cols < n_vocab
    h_base = h_ptr + rows.to(tl.int64)[:, None] * stride_h
    w_base = w_ptr + cols.to(tl.int64)[None, :] * stride_w
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, n_hidden, BLOCK_K):
        k = k0 + ks
        k_ok = k < n_hidden
        a = tl.load(h_base + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_base + k[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)  # bf16 x bf16 products, exact in the fp32 accumulator
    z_offs = rows.to(tl.int64)[:, None] * n_vocab + cols[None, :]
    tl.store(z_ptr + z_offs, acc, mask=row_ok[:, None] & col_ok[None, :])
    # epilogue: this tile's share of each row's log-sum-exp (a tile always holds a real column)
    z = tl.where(col_ok[None, :], acc, float("-inf"))
    m = tl.max(z, axis=1)
    s = tl.sum(tl.exp(z - m[:, None]), axis=1)
    part = rows.to(tl.int64) * n_vtiles + tile_n
    tl.store(part_m_ptr + part, m, mask=row_ok)
    tl.store(part_s_ptr + part, s, mask=row_ok)


@triton.jit
def _ce_grad_kernel(
    z_ptr, part_m_ptr, part_s_ptr, targets_ptr, loss_ptr, g_hi_ptr, g_lo_ptr,
    n_rows, n_vocab, n_vtiles, inv_n,
    BLOCK_R: tl.constexpr, BLOCK_TILES: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """BLOCK_R tokens: lse from their tiles' partials, their fp32 losses, and
    G = (softmax - onehot) / N as bf16 high and low halves."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    tiles = tl.arange(0, BLOCK_TILES)
    part = rows.to(tl.int64)[:, None] * n_vtiles + tiles[None, :]
    part_ok = row_ok[:, None] & (tiles < n_vtiles)[None, :]
    pm = tl.load(part_m_ptr + part, mask=part_ok, other=float("-inf"))
    ps = tl.load(part_s_ptr + part, mask=part_ok, other=0.0)
    m = tl.max(pm, axis=1)
    m = tl.where(row_ok, m, 0.0)  # rows past the end: no -inf - -inf, no log(0)
    lse = m + tl.log(tl.where(row_ok, tl.sum(ps * tl.exp(pm - m[:, None]), axis=1), 1.0))
    target = tl.load(targets_ptr + rows, mask=row_ok, other=0)
    z_rows = rows.to(tl.int64) * n_vocab
    target_logit = tl.load(z_ptr + z_rows + target, mask=row_ok, other=0.0)
    tl.store(loss_ptr + rows, lse - target_logit, mask=row_ok)
    for v0 in range(0, n_vocab, BLOCK_V):
        v = v0 + tl.arange(0, BLOCK_V)
        ok = row_ok[:, None] & (v < n_vocab)[None, :]
        offs = z_rows[:, None] + v[None, :]
        z = tl.load(z_ptr + offs, mask=ok, other=0.0)
        onehot = (v[None, :] == target[:, None]).to(tl.float32)
        g = (tl.exp(z - lse[:, None]) - onehot) * inv_n
        g_hi = g.to(g_hi_ptr.dtype.element_ty)
        g_lo = (g - g_hi.to(tl.float32)).to(g_lo_ptr.dtype.element_ty)
        tl.store(g_hi_ptr + offs, g_hi, mask=ok)
        tl.store(g_lo_ptr + offs, g_lo, mask=ok)


@triton.jit
def _grad_weight_kernel(
    g_hi_ptr, g_lo_ptr, h_ptr, acc_ptr, out_ptr,
    n_rows, n_vocab, n_hidden, stride_h,
    FIRST: tl.constexpr, LAST: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr,
):
    """One [BLOCK_V, BLOCK_H] tile of grad_weight: acc (+)= (G_hi + G_lo)[chunk].T @ h[chunk] in
    fp32, kept in the fp32 accumulator between chunks (none before the first), rounded once to
    the output's dtype after the last."""
    pid = tl.program_id(0)
    n_htiles = tl.cdiv(n_hidden, BLOCK_H)
    vs = (pid // n_htiles) * BLOCK_V + tl.arange(0, BLOCK_V)
    hs = (pid % n_htiles) * BLOCK_H + tl.arange(0, BLOCK_H)
    v_ok = vs < n_vocab
    h_ok = hs < n_hidden
    out_offs = vs.to(tl.int64)[:, None] * n_hidden + hs[None, :]
    out_ok = v_ok[:, None] & h_ok[None, :]
    if FIRST:
        acc = tl.zeros((BLOCK_V, BLOCK_H), dtype=tl.float32)
    else:
        acc = tl.load(acc_ptr + out_offs, mask=out_ok, other=0.0)
    ts = tl.arange(0, BLOCK_T)
    for t0 in range(0, n_rows, BLOCK_T):
        t = t0 + ts
        t_ok = t < n_rows
        g_offs = t.to(tl.int64)[None, :] * n_vocab + vs[:, None]  # G[t, v], read as [BLOCK_V, BLOCK_T]
        g_ok = v_ok[:, None] & t_ok[None, :]
        h = tl.load(h_ptr + t.to(tl.int64)[:, None] * stride_h + hs[None, :], mask=t_ok[:, None] & h_ok[None, :], other=0.0)
        acc = tl.dot(tl.load(g_hi_ptr + g_offs, mask=g_ok, other=0.0), h, acc)
        acc = tl.dot(tl.load(g_lo_ptr + g_offs, mask=g_ok, other=0.0), h, acc)
    if LAST:
        tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=out_ok)
    else:
        tl.store(acc_ptr + out_offs, acc, mask=out_ok)


@triton.jit
def _mean_kernel(loss_ptr, out_ptr, n, inv_n, BLOCK: tl.constexpr):
    """out = sum(loss) / n: lane-wise fp32 sums in a fixed order, then one tree."""
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) * inv_n)


def _chunk_tokens(n_tokens: int, n_vocab: int, device: torch.device) -> int:
    """Tokens per chunk. On a GPU: the logits budget over the vocabulary, a multiple of
    CHUNK_ALIGN where that leaves at least one, never more than the tokens there are. In the CPU
    interpreter, whose cost is launches, not memory: the tokens in INTERPRETER_CHUNKS chunks, so
    every size takes the first, middle and last chunk paths and a partial last chunk."""
    if device.type != "cuda":
        return max(1, triton.cdiv(n_tokens, INTERPRETER_CHUNKS))
    chunk = max(1, CHUNK_LOGITS // n_vocab)
    chunk = max(chunk - chunk % CHUNK_ALIGN, min(chunk, CHUNK_ALIGN))
    return min(chunk, n_tokens)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, hidden, weight, targets):
        hidden = hidden.contiguous()
        weight = weight.contiguous()
        targets = targets.contiguous()
        n_tokens, n_hidden = hidden.shape
        n_vocab = weight.shape[0]
        device = hidden.device
        f32 = torch.float32
        loss = torch.empty((), dtype=f32, device=device)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.empty_like(weight)

        chunk = _chunk_tokens(n_tokens, n_vocab, device)
        n_chunks = triton.cdiv(n_tokens, chunk)
        # short axes get short tiles (a small vocabulary or head, a short chunk); the default
        # sizes take the full ones
        block_n = min(BLOCK_N, max(16, triton.next_power_of_2(n_vocab)))
        block_k = min(BLOCK_K, max(16, triton.next_power_of_2(n_hidden)))
        n_vtiles = triton.cdiv(n_vocab, block_n)
        logits = torch.empty(chunk, n_vocab, dtype=f32, device=device)
        part_m = torch.empty(chunk, n_vtiles, dtype=f32, device=device)
        part_s = torch.empty(chunk, n_vtiles, dtype=f32, device=device)
        g_hi = torch.empty(chunk, n_vocab, dtype=weight.dtype, device=device)
        g_lo = torch.empty(chunk, n_vocab, dtype=weight.dtype, device=device)
        token_loss = torch.empty(n_tokens, dtype=f32, device=device)
        # fp32 running sum of grad_weight between chunks; one chunk needs none
        gw_acc = torch.empty(n_vocab, n_hidden, dtype=f32, device=device) if n_chunks > 1 else grad_weight
        inv_n = 1.0 / n_tokens
        ce_cols = min(triton.next_power_of_2(n_vocab), CE_BLOCK_V)
        ce_rows = max(1, CE_TILE // ce_cols)

        for c in range(n_chunks):
            start = c * chunk
            rows = min(chunk, n_tokens - start)
            h = hidden[start:start + rows]
            block_m = min(BLOCK_M, max(16, triton.next_power_of_2(rows)))
            _logits_kernel[(triton.cdiv(rows, block_m) * n_vtiles,)](
                h, weight, logits, part_m, part_s,
                rows, n_vocab, n_hidden, hidden.stride(0), weight.stride(0), n_vtiles,
                BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
                num_warps=GEMM_WARPS, num_stages=GEMM_STAGES,
            )
            _ce_grad_kernel[(triton.cdiv(rows, ce_rows),)](
                logits, part_m, part_s, targets[start:start + rows], token_loss[start:start + rows],
                g_hi, g_lo, rows, n_vocab, n_vtiles, inv_n,
                BLOCK_R=ce_rows, BLOCK_TILES=triton.next_power_of_2(n_vtiles), BLOCK_V=ce_cols, num_warps=16,
            )
            gh = grad_hidden[start:start + rows]
            torch.mm(g_hi[:rows], weight, out=gh)
            torch.addmm(gh, g_lo[:rows], weight, out=gh)
            _grad_weight_kernel[(triton.cdiv(n_vocab, GW_BLOCK_V) * triton.cdiv(n_hidden, GW_BLOCK_H),)](
                g_hi, g_lo, h, gw_acc, grad_weight,
                rows, n_vocab, n_hidden, hidden.stride(0),
                FIRST=c == 0, LAST=c == n_chunks - 1,
                BLOCK_V=GW_BLOCK_V, BLOCK_H=GW_BLOCK_H, BLOCK_T=min(GW_BLOCK_T, max(16, triton.next_power_of_2(rows))),
                num_warps=GW_WARPS, num_stages=GEMM_STAGES,
            )
        _mean_kernel[(1,)](token_loss, loss, n_tokens, inv_n, BLOCK=MEAN_BLOCK, num_warps=4)
        return loss, grad_hidden, grad_weight
