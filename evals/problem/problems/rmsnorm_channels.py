"""RMSNorm over the channel dim of a [BATCH, FEATURES, DIM1, DIM2] tensor, no weight.

y = x / sqrt(mean(x^2 over dim 1) + eps): KernelBench's spelling
(``Model(num_features, eps)``), which normalises every pixel's feature vector.
Unlike the catalog's ``rmsnorm_forward`` (last dim, a weight), the reduced dim
is strided: each output position reduces FEATURES values DIM1 * DIM2 apart, so
a kernel reads a [FEATURES, pixels] tile with the contiguous pixels across
lanes. Statistics in fp32 while x and y are bf16.
"""

import torch
import torch.nn as nn

BATCH = 16
FEATURES = 64
DIM1 = 256
DIM2 = 256
EPS = 1e-5

KGEN_NAME = "rmsnorm_channels"
KGEN_ALIASES = ["rms norm channels", "rmsnorm over channels", "channel rmsnorm", "rmsnorm no weight", "rms normalization"]
KGEN_DESCRIPTION = "RMSNorm over dim 1 (features) of a bf16 [BATCH, FEATURES, DIM1, DIM2] tensor, no weight, fp32 statistics"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"BATCH": 3, "FEATURES": 5, "DIM1": 17, "DIM2": 19}
KGEN_EXTRA_SIZES = [{"BATCH": 2, "FEATURES": 1000, "DIM1": 3, "DIM2": 41}, {"BATCH": 5, "FEATURES": 64, "DIM1": 99, "DIM2": 101}]


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        rms = torch.sqrt(torch.mean(xf**2, dim=1, keepdim=True) + self.eps)
        return (xf / rms).to(x.dtype)


def get_inputs():
    x = torch.randn(BATCH, FEATURES, DIM1, DIM2, dtype=torch.bfloat16)
    return [x]


def get_init_inputs():
    return [FEATURES, EPS]


def kgen_bytes():
    # read x (bf16); write y (bf16)
    return 2 * BATCH * FEATURES * DIM1 * DIM2 * 2


def kgen_flops():
    # square, add (mean), divide
    return 3 * BATCH * FEATURES * DIM1 * DIM2
