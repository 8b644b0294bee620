"""RMSNorm forward: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) per row.

The normalisation in front of every attention and MLP block of Llama-style
models. The row statistics are accumulated in fp32 even though x, weight and y
are bf16: a bf16 sum of 4096 squares loses most of its digits.
"""

import torch
import torch.nn as nn

ROWS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
HIDDEN = 4096
EPS = 1e-6

KGEN_NAME = "rmsnorm_forward"
KGEN_ALIASES = ["rmsnorm", "rms norm", "rmsnorm fwd", "rms norm forward", "rmsnorm forward pass"]
KGEN_DESCRIPTION = "RMSNorm forward (bf16 x and weight, fp32 statistics): y = x * rstd * weight"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"ROWS": 37, "HIDDEN": 96}
KGEN_EXTRA_SIZES = [{"ROWS": 1000, "HIDDEN": 4095}, {"ROWS": 3, "HIDDEN": 16384}]


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        y = xf * rstd * weight.to(acc)
        return y.to(x.dtype)


def get_inputs():
    x = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(HIDDEN)).to(torch.bfloat16)
    return [x, weight]


def get_init_inputs():
    return [EPS]


def kgen_bytes():
    # read x (bf16), weight (bf16); write y (bf16)
    return 2 * ROWS * HIDDEN * 2 + HIDDEN * 2


def kgen_flops():
    # square, add (mean), scale by rstd, scale by weight
    return 4 * ROWS * HIDDEN
