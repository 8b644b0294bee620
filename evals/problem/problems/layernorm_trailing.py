"""LayerNorm over the trailing dims named by ``normalized_shape``: ``nn.LayerNorm`` itself.

y = (x - mean) / sqrt(var + eps) * weight + bias, the statistics over the last
three dims of a [BATCH, FEATURES, DIM1, DIM2] tensor, weight and bias of shape
normalized_shape (nn.LayerNorm's parameters, fp32). KernelBench's spelling
(``Model(normalized_shape)``): unlike the catalog's ``layernorm_forward`` (a
[ROWS, HIDDEN] row at a time, weight and bias as inputs), a row here is
FEATURES * DIM1 * DIM2 values long (a million at the default size) and there are
few rows, so a kernel must split each row across programs and combine their
statistics. The variance is of the centred values (biased), in fp32.
"""

import torch
import torch.nn as nn

BATCH = 32
FEATURES = 64
DIM1 = 128
DIM2 = 128

KGEN_NAME = "layernorm_trailing"
KGEN_ALIASES = ["nn.LayerNorm", "layer norm normalized_shape", "layernorm trailing dims", "layernorm module",
                "layernorm over features"]
KGEN_DESCRIPTION = "nn.LayerNorm over the last three dims of an fp32 [BATCH, FEATURES, DIM1, DIM2] tensor (its weight and bias)"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 in, fp32 statistics, fp32 out (the reference)"
KGEN_SMALL_SIZES = {"BATCH": 3, "FEATURES": 5, "DIM1": 17, "DIM2": 19}
KGEN_EXTRA_SIZES = [{"BATCH": 2, "FEATURES": 7, "DIM1": 99, "DIM2": 101}, {"BATCH": 5, "FEATURES": 1, "DIM1": 1, "DIM2": 3}]


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    # an offset mean, so a kernel that skips centring loses digits
    x = 1.0 + torch.randn(BATCH, FEATURES, DIM1, DIM2, dtype=torch.float32)
    return [x]


def get_init_inputs():
    return [(FEATURES, DIM1, DIM2)]


def kgen_bytes():
    # read x (fp32), weight and bias (fp32); write y (fp32)
    return 2 * BATCH * FEATURES * DIM1 * DIM2 * 4 + 2 * FEATURES * DIM1 * DIM2 * 4


def kgen_flops():
    # add (mean), subtract, square, add (var), scale by rstd, scale by weight, add bias
    return 7 * BATCH * FEATURES * DIM1 * DIM2
