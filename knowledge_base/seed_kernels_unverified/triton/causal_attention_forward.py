"""Causal flash attention forward in Triton: one program per (query block, batch*head), online softmax.

What bounds it: compute. Over the causal triangle the two matmuls (S = Q K^T and
O = P V) cost 2 * 2 * B * H * (S^2 / 2) * D FLOPs against 4 * B * H * S * D bf16
values of q, k, v and out: S / 4 FLOPs per byte (512 at S = 2048), well above the
H100's balance point (~990 TFLOP/s / ~3.35 TB/s ~ 300). Per K/V tile a program does
4 * BLOCK_M * BLOCK_N * D FLOPs on 4 * BLOCK_N * D bytes, i.e. BLOCK_M (128) FLOPs
per byte: below the balance point if every re-read came from HBM, so the programs of
one head must share K/V through L2 (see heavy-first below). The ceiling is the
H100's ~990 dense bf16 TFLOP/s; FlashAttention-2 reaches ~335 TFLOP/s on causal
forward at D = 128, FlashAttention-3 ~616. Materialising the S x S score matrix, as
a naive kernel does, makes it memory bound (S^2 fp32 written and read back): this
kernel never lets a score leave registers.

Why online softmax: a program owns BLOCK_M query rows, keeps its Q tile on chip and
walks K/V in BLOCK_N-wide tiles. softmax needs each row's max and sum over all keys
before any probability is known, so it keeps running statistics instead: m_i (the
row max so far, already in the log2 domain) and l_i (the sum of exp2(s - m_i) so
far), both fp32. When a tile raises the max to m_new, the old sum and the fp32
output accumulator are rescaled by alpha = exp2(m_i - m_new) and the tile's
p = exp2(s - m_new) is added: exact algebra, one pass over K and V, and out =
acc / l_i at the end. The scale 1/sqrt(D) and log2(e) are folded into one
multiplier so each score costs one FMA and one exp2 (the MUFU unit's native
instruction). S = tl.dot(q, k^T) takes bf16 operands and accumulates in fp32; p is
rounded once to bf16 for tl.dot(p, v) into the fp32 accumulator, as FlashAttention
does (the tensor cores take bf16 operands; the statistics and the accumulator never
leave fp32 — bf16 statistics would fail the verifier's shifted and wide-range scores).

Why rows with few keys take p in two parts: rounding p to bf16 costs each weight a
relative 2^-9. A long row averages those errors away against an output that the
elementwise bound (rtol * |ref| + atol * rms(out)) judges mostly through atol, but a
row with a handful of keys is a short weighted sum whose value can cancel to near 0
while its rounding error does not: at the default size (S = 2048) and at S = 4096 an
emulation of the one-rounding scheme (plain FlashAttention-2) puts ~5 elements in
10^6 at up to 2x the bound, in the first rows of a sequence (a few dozen keys). So
query blocks whose first row has fewer than EXACT_P_ROWS = 256 keys add p_lo = bf16(p - p_hi) @ v, a second
tensor-core product carrying p to ~16 bits (worst element 0.7x of the bound in the
same emulation). Those blocks are the cheapest ones (at S = 2048 and 128-row blocks,
~2% of the P V work, ~1% of all MMAs). It is a run-time branch on a value uniform
over the program, so the compiled loop stays one pipelined loop.

Why the tile skipping: query block m (rows m*BLOCK_M ..) needs keys 0 .. its last
row only. The key tiles entirely below the diagonal (keys < m*BLOCK_M) are visible to
every row of the block, so that loop runs with no mask at all (and no key-bound mask
either: those keys are all < S). Only the BLOCK_M / BLOCK_N tiles that straddle the
diagonal run a second loop with the causal mask (and the key bound for the last
block); tiles above the diagonal are never loaded. That halves the work against a
masked full-square kernel and keeps the masking cost off the long unmasked loop.
Every row's first tile has a visible key (key 0, or the diagonal tile's first key,
which is <= the row), so m_i is finite from the first tile on and no row can form
-inf - (-inf) = NaN. The split point is rounded down to a whole key tile, so any
BLOCK_M, BLOCK_N pair is correct (BLOCK_M a multiple of BLOCK_N wastes least).

Why heavy-first: block m does m + 1 units of work, so the last query block of a head
is ~S/BLOCK_M times the first. The grid is (query blocks, B*H) with query blocks
fastest, and program 0 takes the LAST block: the long rows start in the first wave
and the short ones fill the tail, instead of a few long programs running alone at
the end. Query blocks of one head stay adjacent, so they read the same K/V tiles
from L2 (~1 MB per head at S = 2048, D = 128), which is what keeps the kernel
compute bound.

Sizes: HEAD_DIM is padded to BLOCK_D (next power of two, at least 16) with masks on
the head dimension (D = 24, 80 work; D = 80 pays for 128 in the MMAs); sequence
lengths need not be multiples of any tile (rows past S are computed on zero queries
and never stored). Strides of q, k, v and out are passed, so any layout works; the
batch/head offset is int64.

Defaults (the GPU sweep moves them): D <= 64: 128 x 64 tiles, 4 warps, 3 stages;
D > 64: 128 x 64 tiles, 8 warps, 3 stages (a 128 x 128 fp32 accumulator is 64
registers a thread at 8 warps). Compiled for sm_90 (Triton 3.9), all with wgmma
(both products are warpgroup MMAs, the P V one asynchronous) and 0 spills: D = 128
and D = 80: 216 / 218 registers, 128 KB shared memory (Q 32 KB + 3 stages of K and
V), one program per SM; D = 64: 254 registers at 4 warps (161 at 8), 64 KB; D = 24:
255 registers, 16 KB. 4 warps at D <= 64 sit at the 255-register ceiling: the
sweep's 8-warp neighbour is the safer one if a change adds live values.

The gap to FlashAttention-3 is Hopper-specific scheduling: warp specialisation
(producer warps issuing TMA loads, consumer warpgroups issuing asynchronous wgmma)
and ping-pong overlap of one warpgroup's softmax with another's matmul. Triton's compiler emits wgmma and pipelines the
K/V loads on sm_90 by itself, but overlaps softmax with the MMAs only partly.

On CPU (TRITON_INTERPRET=1) the dot operands are widened to fp32 before tl.dot:
the interpreter stores bf16 as raw uint16 and its tl.dot multiplies those bit
patterns (triton-lang/triton#11584). p is still rounded to bf16 first, so the CPU
computes what the GPU does; the widening is compiled out on GPU. (Triton's own
interpreter truncates fp32 -> bf16 casts where the GPU rounds to nearest; kgen's
verifier makes it round as the GPU does.) The interpreter also gets small tiles: it runs every tile as numpy arrays, and the wasted work of
padded rows and masked diagonal tiles grows with the tile size.

Measured (H100, 2026-11-28, scripts/attention_anchors.py): [4, 16, 2048, 128] 0.214 ms,
322 TFLOP/s, 0.69x SDPA's fastest backend (cuDNN, 464 TFLOP/s), 1.2x its flash backend;
0.61-0.72x cuDNN at sequence lengths 512, 3001 and 8192. Verified at full size by kgen eval.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

LOG2_E = 1.4426950408889634
#: query rows below this many keys take p in two bf16 parts (see the docstring); not a knob
EXACT_P_ROWS = tl.constexpr(256)


@triton.jit
def _attend_tiles(
    acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, mask_d,
    lo, hi, seq, stride_kn, stride_vn, qk_scale, exact_p,
    DIAGONAL: tl.constexpr, EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):
    """Fold key tiles lo .. hi into (acc, l_i, m_i). DIAGONAL: the tiles straddle the causal
    diagonal (causal mask, and keys may run past seq); otherwise every key is visible.
    exact_p (uniform over the program): p goes to the tensor cores as two bf16 terms, hi + lo.
    A run-time branch, not a constexpr: two specialised copies of the loops behind an ``if``
    would each get their own pipeline buffers (224 KB of shared memory at D = 128, not 128)."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        keys = start_n + offs_n
        if DIAGONAL:
            in_seq = keys < seq
            k = tl.load(k_ptrs + start_n * stride_kn, mask=mask_d[:, None] & in_seq[None, :], other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=in_seq[:, None] & mask_d[None, :], other=0.0)
        elif EVEN_D:
            k = tl.load(k_ptrs + start_n * stride_kn)
            v = tl.load(v_ptrs + start_n * stride_vn)
        else:
            k = tl.load(k_ptrs + start_n * stride_kn, mask=mask_d[:, None], other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=mask_d[None, :], other=0.0)
        if DOT_IN_FP32:  # interpreter only: its tl.dot cannot multiply bf16
            k = k.to(tl.float32)
        s = tl.dot(q, k)  # [BLOCK_M, BLOCK_N] fp32 raw scores
        if DIAGONAL:
            s = tl.where(offs_m[:, None] >= keys[None, :], s, float("-inf"))
        # running max in the log2 domain; finite from the first tile (every row sees a key)
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        p_hi = p.to(v.dtype)  # rounded to bf16 for the tensor cores, as FlashAttention does
        if DOT_IN_FP32:
            v = v.to(tl.float32)
        if exact_p:  # the rounding error of p_hi, itself in bf16: p to ~16 bits
            p_lo = (p - p_hi.to(tl.float32)).to(p_hi.dtype)
            if DOT_IN_FP32:
                p_lo = p_lo.to(tl.float32)
            acc = tl.dot(p_lo, v, acc)
        if DOT_IN_FP32:
            p_hi = p_hi.to(tl.float32)
        acc = tl.dot(p_hi, v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _causal_attention_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    heads, seq, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    # heaviest first: program 0 takes the last query block (the longest causal rows)
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    q_ptr += b * stride_qb + h * stride_qh
    k_ptr += b * stride_kb + h * stride_kh
    v_ptr += b * stride_vb + h * stride_vh
    o_ptr += b * stride_ob + h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    EVEN_D: tl.constexpr = HEAD_DIM == BLOCK_D
    mask_d = offs_d < HEAD_DIM
    mask_m = offs_m < seq

    q = tl.load(q_ptr + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=mask_m[:, None] & mask_d[None, :], other=0.0)
    if DOT_IN_FP32:
        q = q.to(tl.float32)
    k_ptrs = k_ptr + offs_d[:, None] * stride_kd + offs_n[None, :] * stride_ks  # K^T tile [BLOCK_D, BLOCK_N]
    v_ptrs = v_ptr + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd  # V tile [BLOCK_N, BLOCK_D]

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # key tiles entirely below the diagonal: all visible, no mask (rounded down to a whole
    # tile so that any BLOCK_M, BLOCK_N pair splits cleanly); then the tiles straddling the
    # diagonal: causal mask and the sequence bound. Rows with few keys take p in two parts.
    diag_lo = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
    exact_p = start_m * BLOCK_M < EXACT_P_ROWS
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, mask_d,
        0, diag_lo, seq, stride_ks, stride_vs, qk_scale, exact_p,
        DIAGONAL=False, EVEN_D=EVEN_D, BLOCK_N=BLOCK_N, DOT_IN_FP32=DOT_IN_FP32,
    )
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, offs_n, mask_d,
        diag_lo, tl.minimum((start_m + 1) * BLOCK_M, seq), seq, stride_ks, stride_vs, qk_scale, exact_p,
        DIAGONAL=True, EVEN_D=EVEN_D, BLOCK_N=BLOCK_N, DOT_IN_FP32=DOT_IN_FP32,
    )

    out = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        batch, heads, seq, head_dim = q.shape
        out = torch.empty((batch, heads, seq, head_dim), dtype=q.dtype, device=q.device)
        if out.numel() == 0:
            return out
        block_d = triton.next_power_of_2(max(head_dim, 16))  # covers the head (tl.dot needs >= 16): not a knob
        qk_scale = LOG2_E / math.sqrt(head_dim)  # 1/sqrt(D) and log2(e) in one multiplier
        args = (
            q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), heads, seq, qk_scale,
        )
        bh = batch * heads
        if not q.is_cuda:
            # the interpreter: small tiles (they bound the wasted work on padding and masks);
            # no warp or stage settings, it runs each program as numpy arrays
            cpu_m, cpu_n = _interpreter_tiles()
            _causal_attention_fwd[(triton.cdiv(seq, cpu_m), bh)](
                *args, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=cpu_m, BLOCK_N=cpu_n, DOT_IN_FP32=True,
            )
        elif block_d <= 64:
            _causal_attention_fwd[(triton.cdiv(seq, 128), bh)](
                *args, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=128, BLOCK_N=64, DOT_IN_FP32=False,
                num_warps=4, num_stages=3,
            )
        else:
            _causal_attention_fwd[(triton.cdiv(seq, 128), bh)](
                *args, HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=128, BLOCK_N=64, DOT_IN_FP32=False,
                num_warps=8, num_stages=3,
            )
        return out


def _interpreter_tiles():
    """(BLOCK_M, BLOCK_N) for TRITON_INTERPRET runs (not a GPU setting, so not a knob)."""
    return 32, 16
