"""Inclusive prefix sum along the last dim of an fp32 [ROWS, COLS] tensor.

out[i, j] = x[i, 0] + ... + x[i, j], accumulated in fp32 (fp32 in, fp32 out),
as the scans of MoE token routing and chunked linear-attention/SSM kernels do.
A long row must carry its running total across column blocks.
"""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 4096

KGEN_NAME = "cumsum"
KGEN_ALIASES = ["prefix sum", "cumulative sum", "inclusive scan", "scan", "cumsum last dim"]
KGEN_DESCRIPTION = "Inclusive prefix sum (cumsum) along the last dim of an fp32 [ROWS, COLS] tensor, fp32 accumulation"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 in, fp32 scan, fp32 out (the reference)"
KGEN_SMALL_SIZES = {"ROWS": 37, "COLS": 96}
KGEN_PROBE_SIZES = {"ROWS": 3, "COLS": 4096}
KGEN_EXTRA_SIZES = [{"ROWS": 999, "COLS": 1531}, {"ROWS": 4, "COLS": 65537}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # fp32 stays fp32; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        return torch.cumsum(x.to(acc), dim=-1).to(x.dtype)


def get_inputs():
    x = torch.randn(ROWS, COLS, dtype=torch.float32)
    return [x]


def get_init_inputs():
    return []


def kgen_bytes():
    # read x (fp32); write out (fp32)
    return 2 * ROWS * COLS * 4


def kgen_flops():
    return ROWS * COLS
