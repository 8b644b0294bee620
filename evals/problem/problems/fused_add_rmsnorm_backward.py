"""Fused residual add + RMSNorm backward: grad_x, grad_residual and grad_weight.

Forward (fused_add_rmsnorm_forward) was s = x + residual, written out as
residual_out, and y = s * rstd * weight with rstd = 1 / sqrt(mean(s^2) + eps) per
row. Both outputs carry a gradient back: grad_y from the sublayer that reads y, and
grad_residual_out from the rest of the residual stream. The stream's gradient is

    s_hat  = s * rstd, gw = grad_y * weight
    grad_s = grad_residual_out + rstd * (gw - s_hat * mean(gw * s_hat))   per row
    grad_x = grad_residual = grad_s        (both inputs feed s with weight one)
    grad_weight = sum over rows of grad_y * s_hat

computed explicitly here, the way a fused backward kernel sees it: from the saved x
and residual (s is recomputed, not saved) and the saved fp32 rstd. grad_x and
grad_residual hold the same values but are separate tensors: a caller may write into
one, and a torch custom op (what ``kgen export`` makes of a kernel) may not return two
outputs that share storage. grad_weight sums over every row in fp32 and is rounded
once to weight's dtype, as in rmsnorm_backward.
"""

import torch
import torch.nn as nn

ROWS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
HIDDEN = 4096
EPS = 1e-6

KGEN_NAME = "fused_add_rmsnorm_backward"
KGEN_ALIASES = ["fused add rmsnorm bwd", "add rmsnorm backward", "residual add rmsnorm backward", "fused_add_rms_norm_backward", "add rmsnorm grad"]
KGEN_DESCRIPTION = (
    "Fused residual add + RMSNorm backward (bf16, fp32 saved rstd): grad_x = grad_residual "
    "(the stream's gradient plus the RMSNorm gradient) and grad_weight"
)
KGEN_KIND = "backward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"ROWS": 37, "HIDDEN": 96}
KGEN_PROBE_SIZES = {"ROWS": 2048, "HIDDEN": 16}
KGEN_EXTRA_SIZES = [{"ROWS": 1000, "HIDDEN": 4095}, {"ROWS": 3, "HIDDEN": 8192}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_y, grad_residual_out, x, residual, weight, rstd):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        g, w = grad_y.to(acc), weight.to(acc)
        s = x.to(acc) + residual.to(acc)
        r = rstd.to(acc).unsqueeze(-1)
        s_hat = s * r
        gw = g * w
        grad_s = grad_residual_out.to(acc) + r * (gw - s_hat * (gw * s_hat).mean(dim=-1, keepdim=True))
        grad_weight = (g * s_hat).sum(dim=0)
        # equal values, separate storage (copy=True: no fp64 output is the other's tensor)
        grad_x = grad_s.to(x.dtype, copy=True)
        grad_residual = grad_s.to(residual.dtype, copy=True)
        return grad_x, grad_residual, grad_weight.to(weight.dtype)


def get_inputs():
    x = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    residual = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(HIDDEN)).to(torch.bfloat16)
    grad_y = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    grad_residual_out = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    rstd = torch.rsqrt((x.float() + residual.float()).pow(2).mean(dim=-1) + EPS)
    return [grad_y, grad_residual_out, x, residual, weight, rstd]


def get_init_inputs():
    return []


def kgen_bytes():
    # read grad_y, grad_residual_out, x, residual (bf16), weight (bf16), rstd (fp32);
    # write grad_x, grad_residual (bf16), grad_weight (bf16)
    return 6 * ROWS * HIDDEN * 2 + ROWS * 4 + 2 * HIDDEN * 2


def kgen_flops():
    # recompute s (1), the RMSNorm backward (8), add grad_residual_out (1)
    return 10 * ROWS * HIDDEN


def kgen_backward_inputs(grad_out, inputs, init_inputs):
    """This problem's inputs from fused_add_rmsnorm_forward's: the forward has two outputs, so
    ``grad_out`` is ``[grad_y, grad_residual_out]`` (a missing one, an output nothing used, is
    zeros); rstd is recomputed in fp32 from x + residual and the forward's eps, as get_inputs()
    computes it."""
    x, residual, weight = inputs
    (eps,) = init_inputs
    grad_y, grad_residual_out = grad_out
    grad_y = torch.zeros_like(x) if grad_y is None else grad_y
    grad_residual_out = torch.zeros_like(residual) if grad_residual_out is None else grad_residual_out
    rstd = torch.rsqrt((x.float() + residual.float()).pow(2).mean(dim=-1) + eps)
    return [grad_y, grad_residual_out, x, residual, weight, rstd]
