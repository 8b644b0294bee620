"""LayerNorm forward: y = (x - mean) * rstd * weight + bias over the last dim.

mean and rstd = 1 / sqrt(var + eps) (biased variance) are per-row statistics,
accumulated in fp32 while x, weight, bias and y are bf16. The variance is of
the centred values, as a two-pass kernel computes it; E[x^2] - E[x]^2 in fp32
cancels badly when the mean is large.
"""

import torch
import torch.nn as nn

ROWS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
HIDDEN = 4096
EPS = 1e-5

KGEN_NAME = "layernorm_forward"
KGEN_ALIASES = ["layernorm", "layer norm", "layer norm fwd", "layernorm fwd", "layer norm forward"]
KGEN_DESCRIPTION = "LayerNorm forward (bf16 x, weight and bias, fp32 statistics): y = (x - mean) * rstd * weight + bias"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"ROWS": 37, "HIDDEN": 96}
KGEN_EXTRA_SIZES = [{"ROWS": 1000, "HIDDEN": 4095}, {"ROWS": 3, "HIDDEN": 16384}]


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        centred = xf - xf.mean(dim=-1, keepdim=True)
        rstd = torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        y = centred * rstd * weight.to(acc) + bias.to(acc)
        return y.to(x.dtype)


def get_inputs():
    x = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(HIDDEN)).to(torch.bfloat16)
    bias = (0.1 * torch.randn(HIDDEN)).to(torch.bfloat16)
    return [x, weight, bias]


def get_init_inputs():
    return [EPS]


def kgen_bytes():
    # read x (bf16), weight and bias (bf16); write y (bf16)
    return 2 * ROWS * HIDDEN * 2 + 2 * HIDDEN * 2


def kgen_flops():
    # add (mean), subtract, square, add (var), scale by rstd, scale by weight, add bias
    return 7 * ROWS * HIDDEN
