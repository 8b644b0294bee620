"""Log-softmax along one dim (``Model(dim)``), fp32: y = x - max(x) - log(sum(exp(x - max(x)))).

KernelBench's interface (``torch.log_softmax(x, dim=self.dim)``): the axis is an
argument, so a kernel must reduce along any dim, not only the last. Shaped like
the log-probabilities of a classifier or LM head: rows are tokens, columns
classes. Subtracting the max keeps exp() from overflowing; the log is of a sum
>= 1, so no row's result loses digits to cancellation.
"""

import torch
import torch.nn as nn

ROWS = 4096  # batch * tokens
COLS = 8192  # classes
DIM = 1

KGEN_NAME = "log_softmax"
KGEN_ALIASES = ["logsoftmax", "log softmax", "log_softmax dim", "log probabilities", "log softmax forward"]
KGEN_DESCRIPTION = "Log-softmax along dim DIM (an argument) of an fp32 [ROWS, COLS] tensor (fp32 in, fp32 out)"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 in, fp32 math, fp32 out (the reference)"
KGEN_SMALL_SIZES = {"ROWS": 37, "COLS": 96}
KGEN_PROBE_SIZES = {"ROWS": 3, "COLS": 4096}
KGEN_EXTRA_SIZES = [{"ROWS": 999, "COLS": 1531}, {"ROWS": 64, "COLS": 32003}]


class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        # fp32 stays fp32; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        return torch.log_softmax(x.to(acc), dim=self.dim).to(x.dtype)


def get_inputs():
    # logits of a few units
    x = 3.0 * torch.randn(ROWS, COLS, dtype=torch.float32)
    return [x]


def get_init_inputs():
    return [DIM]


def kgen_bytes():
    # read x (fp32); write y (fp32)
    return 2 * ROWS * COLS * 4


def kgen_flops():
    # max, subtract, exp, sum, log, subtract
    return 5 * ROWS * COLS
