"""Linear layer with bias and GELU epilogue: y = gelu(x @ W^T + b).

The up projection of a GPT-style MLP: x [M tokens, K hidden], W [N, K] in
nn.Linear's layout, b [N]. The product is accumulated in fp32, the bias is
added and GELU (tanh approximation, GPT-2) applied to the fp32 value, and the
result is rounded once to bf16. W and b are inputs so that every candidate
sees the same values.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

M = 8192  # tokens, e.g. 4 x 2048
K = 4096  # hidden size
N = 16384  # 4 x hidden size

KGEN_NAME = "gemm_bias_gelu"
KGEN_ALIASES = ["linear gelu", "gemm gelu", "matmul bias gelu", "fused linear bias gelu", "addmm gelu"]
KGEN_DESCRIPTION = "bf16 GEMM x @ W^T + b with fp32 accumulation and a GELU (tanh) epilogue, bf16 output"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "bf16 GEMM accumulated in fp32 (cuBLAS) with the bias, GELU in fp32, bf16 output (the Baseline; the fp32 reference is not timed)"
KGEN_SMALL_SIZES = {"M": 37, "K": 72, "N": 50}
KGEN_PROBE_SIZES = {"M": 16, "K": 2048, "N": 16}
KGEN_EXTRA_SIZES = [{"M": 333, "K": 1000, "N": 257}, {"M": 2048, "K": 4096, "N": 11008}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        # fp32 accumulation for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        y = x.to(acc) @ weight.to(acc).t() + bias.to(acc)
        return F.gelu(y, approximate="tanh").to(x.dtype)


class Baseline(nn.Module):
    """What a PyTorch user runs for this layer, and what kgen times eager and torch.compile on:
    a bf16 GEMM with the bias (cuBLAS accumulates in fp32 and rounds once to bf16), then the
    GELU in fp32. The fp32 reference above is for verification; timing it would compare an
    fp32 GEMM with a bf16 kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        y = F.linear(x, weight, bias)
        return F.gelu(y.float(), approximate="tanh").to(x.dtype)


def get_inputs():
    x = torch.randn(M, K, dtype=torch.bfloat16)
    weight = (torch.randn(N, K) / K**0.5).to(torch.bfloat16)  # unit-variance outputs
    bias = (0.1 * torch.randn(N)).to(torch.bfloat16)
    return [x, weight, bias]


def get_init_inputs():
    return []


def kgen_bytes():
    # read x, W and b, write y (all bf16)
    return (M * K + N * K + N + M * N) * 2


def kgen_flops():
    return 2 * M * N * K + 10 * M * N
