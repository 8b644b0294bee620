"""Exclusive prefix sum along one dim (``Model(dim)``) of an fp32 [ROWS, COLS] tensor.

out[..., j, ...] = x[..., 0, ...] + ... + x[..., j-1, ...] along dim, 0 at j = 0:
KernelBench's ``cat(zeros, cumsum(x.narrow(dim, 0, L - 1)))``, the offsets a
scatter or a stream compaction writes at. Not ``cumsum_dim``: every element is
the inclusive sum one place earlier. A long scan must carry its running total
across blocks (fp32 with compensation: the verifier holds the result to the
fp64 prefix sum).
"""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 4096
DIM = 1

KGEN_NAME = "cumsum_exclusive"
KGEN_ALIASES = ["exclusive cumsum", "exclusive prefix sum", "exclusive scan", "cumsum exclusive dim", "prescan"]
KGEN_DESCRIPTION = "Exclusive prefix sum along dim DIM (an argument) of an fp32 [ROWS, COLS] tensor (0 first)"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 in, fp32 scan, fp32 out (the reference)"
KGEN_SMALL_SIZES = {"ROWS": 37, "COLS": 96}
KGEN_PROBE_SIZES = {"ROWS": 3, "COLS": 4096}
KGEN_EXTRA_SIZES = [{"ROWS": 999, "COLS": 1531}, {"ROWS": 4, "COLS": 65537}]


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        # fp32 stays fp32; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        cumsum = torch.cumsum(xf.narrow(dim=self.dim, start=0, length=xf.size(self.dim) - 1), dim=self.dim)
        first = torch.zeros_like(xf.select(self.dim, 0).unsqueeze(self.dim))
        return torch.cat((first, cumsum), dim=self.dim).to(x.dtype)


def get_inputs():
    x = torch.randn(ROWS, COLS, dtype=torch.float32)
    return [x]


def get_init_inputs():
    return [DIM]


def kgen_bytes():
    # read x (fp32); write out (fp32)
    return 2 * ROWS * COLS * 4


def kgen_flops():
    return ROWS * COLS
