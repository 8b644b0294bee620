"""Cross-entropy loss, mean over tokens: torch.nn.functional.cross_entropy(logits, targets).

loss = mean_i (logsumexp(logits[i, :]) - logits[i, target[i]]), a scalar:
the loss a training step differentiates, and KernelBench's spelling (the
default reduction='mean'). The catalog's ``cross_entropy_forward`` returns the
per-token losses (reduction='none'); the mean adds one fixed-order reduction
over tokens. The log-sum-exp is computed in fp32 from the bf16 logits and the
loss is fp32. Targets equal to -100 (torch's ignore_index) are left out of the
mean, as torch does.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

N_TOKENS = 8192  # batch * sequence, e.g. 4 x 2048 tokens
VOCAB = 32000  # Llama-2 / Mistral vocabulary

KGEN_NAME = "cross_entropy_mean"
KGEN_ALIASES = ["mean cross entropy", "cross entropy mean", "ce loss mean", "cross entropy mean reduction", "mean ce loss"]
KGEN_DESCRIPTION = "Cross-entropy loss (bf16 logits, int64 targets), mean over tokens: an fp32 scalar via fp32 log-sum-exp"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 log-sum-exp of the bf16 logits, fp32 mean loss (the reference)"
KGEN_SMALL_SIZES = {"N_TOKENS": 37, "VOCAB": 3001}
KGEN_EXTRA_SIZES = [{"N_TOKENS": 257, "VOCAB": 32003}, {"N_TOKENS": 64, "VOCAB": 128256}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        # fp32 arithmetic for bf16 logits; fp64 stays fp64 for the reference.
        acc = torch.promote_types(logits.dtype, torch.float32)
        return F.cross_entropy(logits.to(acc), targets)


def get_inputs():
    logits = (2.0 * torch.randn(N_TOKENS, VOCAB)).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (N_TOKENS,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []


def kgen_bytes():
    # read logits (bf16), targets (int64); write the loss (fp32)
    return N_TOKENS * VOCAB * 2 + N_TOKENS * 8 + 4


def kgen_flops():
    # max, subtract, exp, sum
    return 4 * N_TOKENS * VOCAB
