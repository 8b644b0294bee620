"""Reverse (suffix) cumulative sum along one dim (``Model(dim)``) of an fp32 [ROWS, COLS] tensor.

out[..., j, ...] = x[..., j, ...] + ... + x[..., L-1, ...] along dim: KernelBench's
``torch.cumsum(x.flip(dim), dim).flip(dim)``, the scan of a discounted return
or a suffix sum. Not ``cumsum_dim``: the scan runs from the other end. A long
scan must carry its running total across blocks (fp32 with compensation: the
verifier holds the result to the fp64 suffix sum).
"""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 4096
DIM = 1

KGEN_NAME = "cumsum_reverse"
KGEN_ALIASES = ["reverse cumsum", "suffix sum", "reverse prefix sum", "cumsum reverse dim", "reverse scan"]
KGEN_DESCRIPTION = "Reverse (suffix) cumulative sum along dim DIM (an argument) of an fp32 [ROWS, COLS] tensor"
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
        return torch.cumsum(x.to(acc).flip(self.dim), dim=self.dim).flip(self.dim).to(x.dtype)


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
