"""Min over one dim (``Model(dim)``), values only, the dim dropped: torch.min(x, dim)[0].

KernelBench's interface: the axis is an argument, so a kernel must reduce along
any dim of an [BATCH, DIM1, DIM2] tensor (the last: contiguous rows; an inner
one: columns of a [DIM1, DIM2] slab). A min is exact in any dtype: the
kernel's output must equal one of the inputs, bit for bit.
"""

import torch
import torch.nn as nn

BATCH = 32
DIM1 = 1024
DIM2 = 1024
REDUCE_DIM = 1

KGEN_NAME = "min_dim"
KGEN_ALIASES = ["min over a dimension", "min reduction", "reduce min dim", "torch min dim", "amin dim"]
KGEN_DESCRIPTION = "Min over dim REDUCE_DIM (an argument) of an fp32 [BATCH, DIM1, DIM2] tensor, values, the dim dropped"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 in, fp32 out (the reference)"
KGEN_SMALL_SIZES = {"BATCH": 5, "DIM1": 37, "DIM2": 96}
KGEN_PROBE_SIZES = {"BATCH": 2, "DIM1": 4096, "DIM2": 3}
KGEN_EXTRA_SIZES = [{"BATCH": 7, "DIM1": 999, "DIM2": 1531}, {"BATCH": 2, "DIM1": 65537, "DIM2": 5}]


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.min(x, dim=self.dim)[0]


def get_inputs():
    # signed values: a max of torch.rand's positives hides sign handling
    x = torch.randn(BATCH, DIM1, DIM2, dtype=torch.float32)
    return [x]


def get_init_inputs():
    return [REDUCE_DIM]


def kgen_bytes():
    # read x (fp32); write the minima (fp32): one per element of the other two dims
    reduced = (BATCH, DIM1, DIM2)[REDUCE_DIM]
    return BATCH * DIM1 * DIM2 * 4 + BATCH * DIM1 * DIM2 // reduced * 4


def kgen_flops():
    return BATCH * DIM1 * DIM2
