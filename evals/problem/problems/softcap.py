"""Logit softcap (Gemma 2): cap * tanh(logits / cap), bf16 logits, fp32 math.

Near-zero logits make the softcap look like the identity (the error of
omitting it is x^3 / (3 cap^2)); the verifier's large-magnitude inputs are
what tell a real softcap from a copy.
"""

import torch
import torch.nn as nn

N_TOKENS = 8192
VOCAB = 32000
CAP = 30.0

KGEN_NAME = "softcap"
KGEN_ALIASES = ["logit softcap", "soft cap", "softcapping", "tanh softcap", "logit soft capping"]
KGEN_DESCRIPTION = "Logit softcap cap * tanh(x / cap) (bf16 logits, fp32 math), as in Gemma 2's final logits"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 math on bf16 inputs, bf16 outputs (the reference, as a fused kernel computes)"
KGEN_SMALL_SIZES = {"N_TOKENS": 37, "VOCAB": 515}
KGEN_EXTRA_SIZES = [{"N_TOKENS": 1001, "VOCAB": 32003}, {"N_TOKENS": 3, "VOCAB": 256000}]


class Model(nn.Module):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def forward(self, logits):
        acc = torch.promote_types(logits.dtype, torch.float32)
        x = logits.to(acc)
        return (self.cap * torch.tanh(x / self.cap)).to(logits.dtype)


def get_inputs():
    return [torch.randn(N_TOKENS, VOCAB, dtype=torch.bfloat16)]


def get_init_inputs():
    return [CAP]


def kgen_bytes():
    return 2 * N_TOKENS * VOCAB * 2


def kgen_flops():
    return 4 * N_TOKENS * VOCAB
