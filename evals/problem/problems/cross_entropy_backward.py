"""Cross-entropy backward: grad_logits = (softmax(logits) - onehot(target)) * grad_loss.

The gradient of the per-token loss logsumexp(logits[i]) - logits[i, target[i]]
(reduction='none') with respect to bf16 logits, given an fp32 upstream
gradient per token. The softmax is recomputed from the logits in fp32, as a
fused backward kernel does; grad_logits is bf16.
"""

import torch
import torch.nn as nn

N_TOKENS = 8192  # batch * sequence, e.g. 4 x 2048 tokens
VOCAB = 32000  # Llama-2 / Mistral vocabulary

KGEN_NAME = "cross_entropy_backward"
KGEN_ALIASES = ["cross entropy bwd", "cross entropy grad", "ce backward", "ce bwd", "softmax cross entropy backward"]
KGEN_DESCRIPTION = "Cross-entropy backward (bf16 logits, int64 targets, fp32 grad_loss): bf16 grad_logits"
KGEN_KIND = "backward"
KGEN_BASELINE_COMPUTE = "fp32 softmax of the bf16 logits, bf16 gradient (the reference)"
KGEN_SMALL_SIZES = {"N_TOKENS": 37, "VOCAB": 3001}
KGEN_EXTRA_SIZES = [{"N_TOKENS": 257, "VOCAB": 32003}, {"N_TOKENS": 64, "VOCAB": 128256}]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets, grad_loss):
        # fp32 arithmetic for bf16 logits; fp64 stays fp64 for the reference.
        acc = torch.promote_types(logits.dtype, torch.float32)
        z = logits.to(acc)
        grad = torch.softmax(z, dim=-1)
        rows = torch.arange(z.shape[0], device=z.device)
        grad[rows, targets] -= 1.0
        grad = grad * grad_loss.to(acc).unsqueeze(-1)
        return grad.to(logits.dtype)


def get_inputs():
    logits = (2.0 * torch.randn(N_TOKENS, VOCAB)).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (N_TOKENS,), dtype=torch.int64)
    # per-token upstream gradient; not constant, so a kernel that drops it fails
    grad_loss = torch.rand(N_TOKENS, dtype=torch.float32) + 0.5
    return [logits, targets, grad_loss]


def get_init_inputs():
    return []


def kgen_bytes():
    # read logits (bf16), targets (int64), grad_loss (fp32); write grad_logits (bf16)
    return 2 * N_TOKENS * VOCAB * 2 + N_TOKENS * 8 + N_TOKENS * 4


def kgen_flops():
    # max, subtract, exp, sum, normalise, scale by grad_loss
    return 6 * N_TOKENS * VOCAB


def kgen_backward_inputs(grad_out, inputs, init_inputs):
    """This problem's inputs from cross_entropy_forward's: (logits, targets, grad_loss), the
    per-token loss's gradient as grad_loss."""
    logits, targets = inputs
    return [logits, targets, grad_out]
