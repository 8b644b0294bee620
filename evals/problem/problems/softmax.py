"""Row softmax over the last dim, fp32: y = exp(x - max(x)) / sum(exp(x - max(x))).

Shaped like unfused attention probabilities: rows are (batch * heads *
queries), columns are keys. Subtracting the row max keeps exp() from
overflowing; inputs and outputs are fp32.
"""

import torch
import torch.nn as nn

ROWS = 4096  # batch * heads * queries, e.g. 32 heads x a 128-query chunk
COLS = 8192  # keys

KGEN_NAME = "softmax"
KGEN_ALIASES = ["row softmax", "softmax forward", "softmax fwd", "softmax last dim", "attention softmax"]
KGEN_DESCRIPTION = "Softmax over the last dim of an fp32 [ROWS, COLS] tensor (fp32 in, fp32 out)"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 in, fp32 math, fp32 out (the reference)"
KGEN_SMALL_SIZES = {"ROWS": 37, "COLS": 96}
KGEN_PROBE_SIZES = {"ROWS": 3, "COLS": 4096}
KGEN_EXTRA_SIZES = [{"ROWS": 999, "COLS": 1531}, {"ROWS": 64, "COLS": 32003}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # fp32 stays fp32; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
        return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def get_inputs():
    # scores of a few units, as q.k / sqrt(d) gives
    x = 3.0 * torch.randn(ROWS, COLS, dtype=torch.float32)
    return [x]


def get_init_inputs():
    return []


def kgen_bytes():
    # read x (fp32); write y (fp32)
    return 2 * ROWS * COLS * 4


def kgen_flops():
    # max, subtract, exp, sum, divide
    return 5 * ROWS * COLS
