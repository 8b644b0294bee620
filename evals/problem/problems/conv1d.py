"""Depthwise causal conv1d, as in Mamba-style blocks (causal_conv1d).

x [batch, channels, seq] bf16, weight [channels, kernel_size], bias [channels]:
  out[b, c, t] = bias[c] + sum_j weight[c, j] * x[b, c, t - (kernel_size - 1) + j]
with x taken as zero before t = 0, so out[t] never sees x after t. Each
channel has its own short filter (groups = channels). Memory-bound: every x
element is read by kernel_size outputs but needs to come from memory once.
Math in fp32, output rounded once to bf16.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
CHANNELS = 5120  # Mamba-2.8B inner width: 2 x 2560
SEQ = 2048
KERNEL_SIZE = 4

KGEN_NAME = "conv1d"
KGEN_ALIASES = ["causal conv1d", "depthwise conv1d", "causal_conv1d_fn", "mamba conv1d", "depthwise causal conv"]
KGEN_DESCRIPTION = "Depthwise causal conv1d with bias (bf16 x [B, C, S], kernel size 4), fp32 math, bf16 output"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"BATCH": 2, "CHANNELS": 37, "SEQ": 50}
KGEN_EXTRA_SIZES = [{"BATCH": 3, "CHANNELS": 1000, "SEQ": 1001, "KERNEL_SIZE": 3}, {"BATCH": 4, "CHANNELS": 8192, "SEQ": 4096}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        channels, kernel_size = weight.shape
        out = F.conv1d(
            x.to(acc), weight.to(acc).unsqueeze(1), bias.to(acc),
            padding=kernel_size - 1, groups=channels,
        )
        # padding pads both ends; keeping the first seq outputs makes it causal
        return out[..., : x.shape[-1]].to(x.dtype)


def get_inputs():
    x = torch.randn(BATCH, CHANNELS, SEQ, dtype=torch.bfloat16)
    bound = 1.0 / KERNEL_SIZE**0.5  # nn.Conv1d's default init range for fan_in = kernel_size
    weight = ((2.0 * torch.rand(CHANNELS, KERNEL_SIZE) - 1.0) * bound).to(torch.bfloat16)
    bias = ((2.0 * torch.rand(CHANNELS) - 1.0) * bound).to(torch.bfloat16)
    return [x, weight, bias]


def get_init_inputs():
    return []


def kgen_bytes():
    # read x, weight and bias, write out (all bf16)
    return (2 * BATCH * CHANNELS * SEQ + CHANNELS * KERNEL_SIZE + CHANNELS) * 2


def kgen_flops():
    # kernel_size multiply-adds and the bias add per output
    return (2 * KERNEL_SIZE + 1) * BATCH * CHANNELS * SEQ
