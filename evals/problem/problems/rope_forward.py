"""Rotary position embedding (RoPE) forward, GPT-NeoX / Llama "rotate half" layout.

x [batch, seq, heads, head_dim] bf16 (q or k straight after the QKV projection
is reshaped into heads). Each head vector is split into halves x1, x2 and
rotated by the angle of its position and frequency:
  out1 = x1 * cos - x2 * sin
  out2 = x2 * cos + x1 * sin
cos, sin [seq, head_dim / 2] are the fp32 cache a model precomputes once
(theta = 10000), shared by every batch entry and head. Math in fp32, output
rounded once to bf16.
"""

import torch
import torch.nn as nn

BATCH = 4
SEQ = 4096
HEADS = 32
HEAD_DIM = 128
ROPE_THETA = 10000.0

KGEN_NAME = "rope_forward"
KGEN_ALIASES = ["rope", "rotary embedding", "rotary position embedding", "apply rotary pos emb", "rotary forward"]
KGEN_DESCRIPTION = "Rotary position embedding forward (bf16 x [B, S, H, D], rotate-half layout, fp32 cos/sin cache)"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_FIXED_SIZES = ["HEAD_DIM"]
KGEN_SMALL_SIZES = {"BATCH": 2, "SEQ": 37, "HEADS": 3, "HEAD_DIM": 24}
KGEN_EXTRA_SIZES = [{"BATCH": 3, "SEQ": 1000, "HEADS": 5, "HEAD_DIM": 80}, {"BATCH": 1, "SEQ": 8192, "HEADS": 64, "HEAD_DIM": 128}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, cos, sin):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        half = x.shape[-1] // 2
        x1, x2 = xf[..., :half], xf[..., half:]
        c = cos.to(acc)[None, :, None, :]  # broadcast over batch and heads
        s = sin.to(acc)[None, :, None, :]
        out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
        return out.to(x.dtype)


def rope_cache(seq, head_dim, theta=ROPE_THETA):
    """cos and sin [seq, head_dim / 2], fp32, as a model precomputes them."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def get_inputs():
    x = torch.randn(BATCH, SEQ, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    cos, sin = rope_cache(SEQ, HEAD_DIM)
    return [x, cos, sin]


def get_init_inputs():
    return []


def kgen_bytes():
    # read x, write out (bf16), read the cos and sin cache (fp32) once
    return 2 * BATCH * SEQ * HEADS * HEAD_DIM * 2 + 2 * SEQ * (HEAD_DIM // 2) * 4


def kgen_flops():
    # per pair of elements: 4 multiplies and 2 adds
    return 3 * BATCH * SEQ * HEADS * HEAD_DIM
