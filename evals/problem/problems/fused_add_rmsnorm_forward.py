"""Fused residual add + RMSNorm forward: s = x + residual, y = s * rstd * weight.

The seam between two halves of a pre-norm (Llama-style) block: the attention (or
MLP) output x is added to the residual stream, the new stream s is written out for
the next block (``residual_out``), and s is normalised for the next sublayer, rstd =
1 / sqrt(mean(s^2) + eps) per row. A fused kernel reads x and residual once and
writes y and residual_out once, instead of a separate add that writes s and a norm
that reads it back. The row statistics are fp32, as in rmsnorm_forward.

Which s y normalises: the unrounded sum. A fused kernel widens x and residual to
fp32 as it loads them, adds them there and keeps that fp32 sum in registers for both
the sum of squares and the scaling; only the two stores round, s once to bf16 for
residual_out and y once to bf16. Rounding s first and widening it again would be an
extra step that makes y no more accurate (the exact answer is the norm of the exact
sum), and the paired backward (fused_add_rmsnorm_backward) recomputes rstd from the
same fp32 sum. Kernels that normalise the rounded residual_out instead, as an unfused
model does and as some fused kernels (vLLM's, Liger's) do, differ from this by one bf16
rounding of s, well inside bf16's tolerance: both are correct.
"""

import torch
import torch.nn as nn

ROWS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
HIDDEN = 4096
EPS = 1e-6

KGEN_NAME = "fused_add_rmsnorm_forward"
KGEN_ALIASES = ["fused add rmsnorm", "add rmsnorm", "residual add rmsnorm", "fused_add_rms_norm", "add rmsnorm forward"]
KGEN_DESCRIPTION = (
    "Fused residual add + RMSNorm forward (bf16, fp32 statistics): s = x + residual, "
    "written out as the new residual stream, and y = s * rstd * weight"
)
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"ROWS": 37, "HIDDEN": 96}
KGEN_EXTRA_SIZES = [{"ROWS": 1000, "HIDDEN": 4095}, {"ROWS": 3, "HIDDEN": 16384}]


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x, residual, weight):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        s = x.to(acc) + residual.to(acc)
        rstd = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        y = s * rstd * weight.to(acc)
        # y normalises the unrounded sum; residual_out is that sum rounded once
        return y.to(x.dtype), s.to(residual.dtype)


def get_inputs():
    x = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    residual = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(HIDDEN)).to(torch.bfloat16)
    return [x, residual, weight]


def get_init_inputs():
    return [EPS]


def kgen_bytes():
    # read x, residual (bf16), weight (bf16); write y, residual_out (bf16)
    return 4 * ROWS * HIDDEN * 2 + HIDDEN * 2


def kgen_flops():
    # add, square, add (mean), scale by rstd, scale by weight
    return 5 * ROWS * HIDDEN
