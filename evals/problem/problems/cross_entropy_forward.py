"""Cross-entropy forward: per-token loss from bf16 logits and int64 targets.

loss[i] = logsumexp(logits[i, :]) - logits[i, target[i]], reduction='none',
the LM-head loss of a language model (one row per token, one column per
vocabulary entry). The log-sum-exp is computed in fp32 from the bf16 logits
and the loss is fp32.
"""

import torch
import torch.nn as nn

N_TOKENS = 8192  # batch * sequence, e.g. 4 x 2048 tokens
VOCAB = 32000  # Llama-2 / Mistral vocabulary

KGEN_NAME = "cross_entropy_forward"
KGEN_ALIASES = ["cross entropy", "cross entropy fwd", "ce forward", "ce loss", "softmax cross entropy"]
KGEN_DESCRIPTION = "Cross-entropy forward (bf16 logits, int64 targets): per-token fp32 loss via fp32 log-sum-exp"
KGEN_KIND = "forward"
KGEN_BASELINE_COMPUTE = "fp32 log-sum-exp of the bf16 logits, fp32 loss (the reference)"
KGEN_SMALL_SIZES = {"N_TOKENS": 37, "VOCAB": 3001}
KGEN_EXTRA_SIZES = [{"N_TOKENS": 257, "VOCAB": 32003}, {"N_TOKENS": 64, "VOCAB": 128256}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        # fp32 arithmetic for bf16 logits; fp64 stays fp64 for the reference.
        # The loss is fp32 by definition, so it stays in `acc` (fp64 for the reference).
        acc = torch.promote_types(logits.dtype, torch.float32)
        z = logits.to(acc)
        lse = torch.logsumexp(z, dim=-1)
        target_logit = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return lse - target_logit


def get_inputs():
    logits = (2.0 * torch.randn(N_TOKENS, VOCAB)).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (N_TOKENS,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []


def kgen_bytes():
    # read logits (bf16), targets (int64); write loss (fp32)
    return N_TOKENS * VOCAB * 2 + N_TOKENS * 8 + N_TOKENS * 4


def kgen_flops():
    # max, subtract, exp, sum
    return 4 * N_TOKENS * VOCAB
