"""Causal self-attention forward: softmax(Q K^T * scale + causal mask) V.

q, k, v are [batch, heads, seq, head_dim] bf16, as after the QKV projection
and the head split of a decoder layer. Token i attends to tokens 0..i. The
scores, the softmax and the weighted sum are computed in fp32 (a
flash-attention kernel keeps them in fp32 registers too), and the output is
rounded once to bf16. The reference spells the math out rather than calling
scaled_dot_product_attention, so it runs in fp64 as written.
"""

import math

import torch
import torch.nn as nn

BATCH = 4
HEADS = 16
SEQ = 2048
HEAD_DIM = 128

KGEN_NAME = "causal_attention_forward"
KGEN_ALIASES = ["causal attention", "flash attention forward", "causal self attention", "attention fwd", "causal sdpa"]
KGEN_DESCRIPTION = "Causal self-attention forward (bf16 q, k, v [B, H, S, D]), fp32 softmax, bf16 output"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "bf16 scaled_dot_product_attention(is_causal=True): bf16 matmuls accumulated in fp32, fp32 softmax (the Baseline; the fp32 reference is not timed)"
KGEN_FIXED_SIZES = ["HEAD_DIM"]
KGEN_SMALL_SIZES = {"BATCH": 2, "HEADS": 3, "SEQ": 37, "HEAD_DIM": 24}
KGEN_EXTRA_SIZES = [{"BATCH": 1, "HEADS": 5, "SEQ": 1000, "HEAD_DIM": 80}, {"BATCH": 1, "HEADS": 16, "SEQ": 4096, "HEAD_DIM": 64}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        # fp32 scores and softmax for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(q.dtype, torch.float32)
        seq, head_dim = q.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(head_dim)
        scores = torch.matmul(q.to(acc), k.to(acc).transpose(-2, -1)) * scale
        future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v.to(acc))
        return out.to(q.dtype)


class Baseline(nn.Module):
    """What a PyTorch user runs, and what kgen times eager and torch.compile on: bf16
    scaled_dot_product_attention with the causal mask (its flash and cuDNN backends keep the
    softmax statistics in fp32). The reference above spells the math out in fp32 for
    verification; timing it would compare fp32 matmuls with a bf16 kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    q = torch.randn(shape, dtype=torch.bfloat16)
    k = torch.randn(shape, dtype=torch.bfloat16)
    v = torch.randn(shape, dtype=torch.bfloat16)
    return [q, k, v]


def get_init_inputs():
    return []


def kgen_bytes():
    # read q, k, v, write out (all bf16)
    return 4 * BATCH * HEADS * SEQ * HEAD_DIM * 2


def kgen_flops():
    # Q K^T and P V over the causal triangle only (seq * (seq + 1) / 2 pairs), 2 FLOPs per multiply-add
    pairs = SEQ * (SEQ + 1) // 2
    return 4 * BATCH * HEADS * pairs * HEAD_DIM
