"""Row sum: out[i] = sum_j x[i, j] over the last dim of a bf16 [ROWS, COLS] tensor.

The sum is accumulated in fp32 and the output is kept in fp32 (not rounded
back to bf16), as a statistic or loss reduction would keep it: an fp32 output
lets the verifier tell fp32 accumulation from bf16 accumulation, which loses
about two digits over 4096 terms.
"""

import torch
import torch.nn as nn

ROWS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
COLS = 4096  # hidden size

KGEN_NAME = "row_sum"
KGEN_ALIASES = ["row sum", "sum last dim", "row reduction", "reduce sum", "sum over last dim"]
KGEN_DESCRIPTION = "Sum over the last dim of a bf16 [ROWS, COLS] tensor, fp32 accumulation, fp32 output"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 sum of bf16 inputs, fp32 output (the reference)"
KGEN_SMALL_SIZES = {"ROWS": 37, "COLS": 96}
KGEN_PROBE_SIZES = {"ROWS": 3, "COLS": 4096}
KGEN_EXTRA_SIZES = [{"ROWS": 1001, "COLS": 1531}, {"ROWS": 5, "COLS": 262147}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # fp32 accumulation and output for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(x.dtype, torch.float32)
        return x.to(acc).sum(dim=-1)


def get_inputs():
    # a non-zero mean, so row sums are not just cancelling noise
    x = (0.5 + torch.randn(ROWS, COLS)).to(torch.bfloat16)
    return [x]


def get_init_inputs():
    return []


def kgen_bytes():
    # read x (bf16); write the row sums (fp32)
    return ROWS * COLS * 2 + ROWS * 4


def kgen_flops():
    return ROWS * COLS
