"""GELU forward, exact (erf) form, elementwise: gelu(x) = 0.5 * x * (1 + erf(x / sqrt(2))).

``torch.nn.functional.gelu(x)`` with its default ``approximate='none'``: BERT's
and most vision models' activation. Not the tanh approximation of the catalog's
``gelu`` (GPT-2's "gelu_new"): the two differ by up to ~1.5e-4, far more than
fp32 rounding, so a kernel of one is not a kernel of the other. Memory-bound;
math in fp32, rounded once to bf16.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 16384  # batch * sequence, e.g. 8 x 2048 tokens
FFN_DIM = 8192  # 4 x hidden size 2048

KGEN_NAME = "gelu_exact"
KGEN_ALIASES = ["gelu erf", "exact gelu", "gelu none", "erf gelu", "bert gelu"]
KGEN_DESCRIPTION = "GELU forward (bf16), exact erf form (torch's default), fp32 math inside"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"TOKENS": 37, "FFN_DIM": 100}
KGEN_EXTRA_SIZES = [{"TOKENS": 1000, "FFN_DIM": 4095}, {"TOKENS": 4096, "FFN_DIM": 49152}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        return F.gelu(x.to(acc)).to(x.dtype)


def get_inputs():
    x = 2.0 * torch.randn(TOKENS, FFN_DIM)  # pre-activations spread past the knee
    return [x.to(torch.bfloat16)]


def get_init_inputs():
    return []


def kgen_bytes():
    # read x, write out (bf16)
    return 2 * TOKENS * FFN_DIM * 2


def kgen_flops():
    # scale, erf (~10), add, two multiplies
    return 14 * TOKENS * FFN_DIM
