"""RMSNorm backward: dx and dweight from (grad_out, x, weight, rstd).

Forward was y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps),
computed per row. The gradients are computed explicitly here, the way a fused
backward kernel sees them: from the saved input and the saved rstd.
"""

import torch
import torch.nn as nn

ROWS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
HIDDEN = 4096
EPS = 1e-6

KGEN_NAME = "rmsnorm_backward"
KGEN_ALIASES = ["rmsnorm bwd", "rms norm backward", "rmsnorm grad", "rms_norm_backward", "rmsnorm backward pass"]
KGEN_DESCRIPTION = "RMSNorm backward (bf16): grad_x and grad_weight from grad_out, x, weight and saved rstd"
KGEN_KIND = "backward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"ROWS": 37, "HIDDEN": 96}
KGEN_PROBE_SIZES = {"ROWS": 2048, "HIDDEN": 16}
KGEN_EXTRA_SIZES = [{"ROWS": 1000, "HIDDEN": 4095}, {"ROWS": 3, "HIDDEN": 8192}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, x, weight, rstd):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        g, xf, w = grad_out.to(acc), x.to(acc), weight.to(acc)
        r = rstd.to(acc).unsqueeze(-1)
        x_hat = xf * r
        gw = g * w
        grad_x = r * (gw - x_hat * (gw * x_hat).mean(dim=-1, keepdim=True))
        grad_weight = (g * x_hat).sum(dim=0)
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype)


def get_inputs():
    x = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(HIDDEN)).to(torch.bfloat16)
    grad_out = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=-1) + EPS)
    return [grad_out, x, weight, rstd]


def get_init_inputs():
    return []


def kgen_bytes():
    # read grad_out, x (bf16), weight (bf16), rstd (fp32); write grad_x (bf16), grad_weight (bf16)
    return 3 * ROWS * HIDDEN * 2 + ROWS * 4 + 2 * HIDDEN * 2


def kgen_flops():
    return 8 * ROWS * HIDDEN


def kgen_backward_inputs(grad_out, inputs, init_inputs):
    """This problem's inputs from rmsnorm_forward's: (grad_out, x, weight, rstd), rstd
    recomputed in fp32 from x and the forward's eps, as get_inputs() computes it."""
    x, weight = inputs
    (eps,) = init_inputs
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=-1) + eps)
    return [grad_out, x, weight, rstd]
