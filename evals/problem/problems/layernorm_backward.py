"""LayerNorm backward: dx, dweight and dbias from (grad_out, x, weight, mean, rstd).

Forward was y = x_hat * weight + bias with x_hat = (x - mean) * rstd,
rstd = 1 / sqrt(var + eps), per row. The gradients are computed explicitly
here, the way a fused backward kernel sees them: from the saved input and the
saved fp32 mean and rstd.

    grad_x      = rstd * (g*w - mean(g*w) - x_hat * mean(g*w * x_hat))   per row
    grad_weight = sum over rows of g * x_hat
    grad_bias   = sum over rows of g
"""

import torch
import torch.nn as nn

ROWS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
HIDDEN = 4096
EPS = 1e-5

KGEN_NAME = "layernorm_backward"
KGEN_ALIASES = ["layernorm bwd", "layer norm backward", "layernorm grad", "layer norm bwd", "layernorm backward pass"]
KGEN_DESCRIPTION = "LayerNorm backward (bf16, fp32 saved mean/rstd): grad_x, grad_weight and grad_bias"
KGEN_KIND = "backward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"ROWS": 37, "HIDDEN": 96}
KGEN_PROBE_SIZES = {"ROWS": 2048, "HIDDEN": 16}
KGEN_EXTRA_SIZES = [{"ROWS": 1000, "HIDDEN": 4095}, {"ROWS": 3, "HIDDEN": 16384}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, x, weight, mean, rstd):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        g, xf, w = grad_out.to(acc), x.to(acc), weight.to(acc)
        mu = mean.to(acc).unsqueeze(-1)
        r = rstd.to(acc).unsqueeze(-1)
        x_hat = (xf - mu) * r
        gw = g * w
        grad_x = r * (
            gw - gw.mean(dim=-1, keepdim=True) - x_hat * (gw * x_hat).mean(dim=-1, keepdim=True)
        )
        grad_weight = (g * x_hat).sum(dim=0)
        grad_bias = g.sum(dim=0)
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), grad_bias.to(weight.dtype)


def get_inputs():
    x = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(HIDDEN)).to(torch.bfloat16)
    grad_out = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    xf = x.float()
    mean = xf.mean(dim=-1)
    rstd = torch.rsqrt(xf.var(dim=-1, unbiased=False) + EPS)
    return [grad_out, x, weight, mean, rstd]


def get_init_inputs():
    return []


def kgen_bytes():
    # read grad_out, x (bf16), weight (bf16), mean and rstd (fp32);
    # write grad_x (bf16), grad_weight and grad_bias (bf16)
    return 3 * ROWS * HIDDEN * 2 + 2 * ROWS * 4 + 3 * HIDDEN * 2


def kgen_flops():
    return 13 * ROWS * HIDDEN


def kgen_backward_inputs(grad_out, inputs, init_inputs):
    """This problem's inputs from layernorm_forward's: (grad_out, x, weight, mean, rstd), the
    statistics recomputed in fp32 from x and the forward's eps, as get_inputs() computes them
    (the forward's bias gets its gradient as this problem's third output)."""
    x, weight, _bias = inputs
    (eps,) = init_inputs
    xf = x.float()
    mean = xf.mean(dim=-1)
    rstd = torch.rsqrt(xf.var(dim=-1, unbiased=False) + eps)
    return [grad_out, x, weight, mean, rstd]
