"""SwiGLU forward: out = silu(gate) * up, with silu(g) = g * sigmoid(g).

The activation of a Llama-style MLP, between the gate/up projections and the
down projection: gate and up are the two [tokens, intermediate] halves the
projections produced. Elementwise and memory-bound; the math is done in fp32
(bf16 sigmoid of large |g| loses the small tail) and rounded once to bf16.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
INTERMEDIATE = 11008  # Llama-7B MLP width

KGEN_NAME = "swiglu"
KGEN_ALIASES = ["swiglu forward", "silu and mul", "silu_mul", "swish glu", "silu gate times up"]
KGEN_DESCRIPTION = "SwiGLU forward (bf16): silu(gate) * up elementwise, fp32 math inside"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"TOKENS": 37, "INTERMEDIATE": 100}
KGEN_EXTRA_SIZES = [{"TOKENS": 1000, "INTERMEDIATE": 4095}, {"TOKENS": 8192, "INTERMEDIATE": 14336}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate, up):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(gate.dtype, torch.float32)
        out = F.silu(gate.to(acc)) * up.to(acc)
        return out.to(gate.dtype)


def get_inputs():
    gate = torch.randn(TOKENS, INTERMEDIATE, dtype=torch.bfloat16)
    up = torch.randn(TOKENS, INTERMEDIATE, dtype=torch.bfloat16)
    return [gate, up]


def get_init_inputs():
    return []


def kgen_bytes():
    # read gate and up, write out (all bf16)
    return 3 * TOKENS * INTERMEDIATE * 2


def kgen_flops():
    # sigmoid (negate, exp, add, divide), times gate, times up
    return 6 * TOKENS * INTERMEDIATE
