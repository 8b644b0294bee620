"""Fused linear cross-entropy: a language model's LM head and its mean loss in one op, with the
gradients of that loss in the same call.

logits = hidden @ weight.T ([N tokens, H] x [V, H] -> [N, V]), then the mean token
cross-entropy against int64 targets:

  loss        = mean_i (logsumexp(logits[i, :]) - logits[i, target[i]])      an fp32 scalar
  G           = (softmax(logits) - onehot(targets)) / N                       d loss / d logits
  grad_hidden = G @ weight                                                    [N, H], hidden's dtype
  grad_weight = G.T @ hidden                                                  [V, H], weight's dtype

It is one forward problem that returns the loss and both gradients, as a fused op (Liger-Kernel's
FusedLinearCrossEntropy, Apple's Cut Cross-Entropy) computes them: in chunks of tokens, so the
[N, V] logits (0.5 GB in bf16 at 8192 x 32000, 1 GB in fp32, and their gradient as much again)
never exist at once; the op's backward then only scales the two gradients by the incoming
scalar gradient. There is no separate backward problem, hence no ``_forward`` in the name.

Precision: the logits, the log-sum-exp and the softmax are fp32 arithmetic on the bf16 inputs
(the products of two bf16 numbers are exact in fp32), so the logits are *not* rounded to bf16 on
the way; the loss is fp32, the gradients are rounded once, to the inputs' dtypes. grad_weight is
a sum over all N tokens: a kernel that accumulates it chunk by chunk must keep the running sum
in fp32 (a bf16 running sum over many chunks is the classic silent bug: it passes a few chunks
and drifts over many). No ignore_index: every target is in [0, VOCAB).

What that asks of a kernel, measured against this reference at the CPU sizes: logits rounded to
bf16 (a bf16 cuBLAS product, as an unfused bf16 model computes them) move the fp32 loss by
~2e-4 relative over 37 tokens and ~1e-3 over one, beyond fp32's tolerance; G rounded to bf16
before a gradient GEMM (or each chunk's bf16 product added into an fp32 sum) leaves errors of a
few percent of the output's RMS on the rows of grad_weight the targets hit, where two tokens
share a target and their terms cancel, and on grad_hidden when weight has a component common to
all rows (each row of the exact G sums to zero; a rounded one does not). Keep the logits in
fp32, and G to ~16 bits (two bf16 halves, or fp32) up to the fp32 accumulators of the GEMMs.

Torch ops policy ``library``: a fused LM-head loss is three GEMMs of 2 N H V flops each (6 N H V,
3.2 TFLOP at the default sizes against ~0.3 GB of unavoidable traffic), and a vendor GEMM
(cuBLAS through ``torch.mm``) is the fair way to do them; the softmax, the loss, the gradient of
the logits, the cross-chunk accumulation and every cast must still be in the candidate's own
kernels, with the policy's small glue budget for the rest (``evals/problem/policies.py``).

Sizes: a 1B Llama-style head (HIDDEN 2048, a 32000 vocabulary) over 4 x 2048 tokens. The extra
sets have a vocabulary that is a multiple of no block and token counts that are a multiple of
no chunk. ``KGEN_PROBE_SIZES`` (the CPU's precision probes: ``accumulation_probe``,
``zipf_ids``, ``repeated_id``) is 8192 tokens over a 16-entry vocabulary and an 8-wide head:
every row of grad_weight sums ~500 tokens, so a kernel that keeps a bf16 running sum over
chunks of a few dozen tokens adds a hundred or more parts, and drifts past the tolerance, in a
trial the interpreter runs in a second or two.
"""

import torch
import torch.nn as nn

N_TOKENS = 8192  # batch * sequence, e.g. 4 x 2048 tokens
HIDDEN = 2048  # a 1B Llama's hidden size
VOCAB = 32000  # Llama-2 / Mistral vocabulary

KGEN_NAME = "fused_linear_cross_entropy"
KGEN_ALIASES = [
    "fused linear cross entropy", "flce", "lm head cross entropy", "fused lm head loss",
    "linear cross entropy", "fused_linear_ce", "lm head loss",
]
KGEN_DESCRIPTION = (
    "LM head + mean cross-entropy in one op (bf16 hidden and weight, int64 targets): the fp32 loss "
    "and its bf16 gradients w.r.t. hidden and weight, logits never materialised in full"
)
KGEN_KIND = "forward"
KGEN_TORCH_OPS = "library"
KGEN_BASELINE_COMPUTE = (
    "the reference: hidden and weight upcast to fp32, fp32 logits [N, V] materialised, fp32 "
    "softmax and GEMMs, fp32 loss, gradients rounded to bf16"
)
KGEN_SMALL_SIZES = {"N_TOKENS": 37, "HIDDEN": 64, "VOCAB": 301}
KGEN_PROBE_SIZES = {"N_TOKENS": 8192, "HIDDEN": 8, "VOCAB": 16}
KGEN_EXTRA_SIZES = [
    {"N_TOKENS": 1000, "HIDDEN": 2048, "VOCAB": 32003},
    {"N_TOKENS": 3, "HIDDEN": 4096, "VOCAB": 128256},
    {"N_TOKENS": 4097, "HIDDEN": 1000, "VOCAB": 50257},
]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, hidden, weight, targets):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(hidden.dtype, torch.float32)
        h, w = hidden.to(acc), weight.to(acc)
        logits = h @ w.t()
        n_tokens = logits.shape[0]
        rows = torch.arange(n_tokens, device=logits.device)
        lse = torch.logsumexp(logits, dim=-1)
        loss = (lse - logits[rows, targets]).mean()  # fp32 (fp64 for the reference) by definition
        grad_logits = torch.exp(logits - lse.unsqueeze(-1))  # softmax, from the same log-sum-exp
        grad_logits[rows, targets] -= 1.0
        grad_logits /= n_tokens
        grad_hidden = grad_logits @ w
        grad_weight = grad_logits.t() @ h
        return loss, grad_hidden.to(hidden.dtype), grad_weight.to(weight.dtype)


def get_inputs():
    # hidden: the final RMSNorm's output, unit RMS; weight: std 2 / sqrt(HIDDEN) (0.044 at 2048,
    # a 0.02-ish init), so the logits have a standard deviation of about 2 at every HIDDEN and
    # the largest of a 32000 vocabulary sits near 8: a trained LM head's spread.
    hidden = torch.randn(N_TOKENS, HIDDEN, dtype=torch.bfloat16)
    weight = (torch.randn(VOCAB, HIDDEN) * (2.0 / HIDDEN**0.5)).to(torch.bfloat16)
    targets = torch.randint(0, VOCAB, (N_TOKENS,), dtype=torch.int64)
    return [hidden, weight, targets]


def get_init_inputs():
    return []


def kgen_bytes():
    # read hidden, weight (bf16) and targets (int64); write grad_hidden, grad_weight (bf16) and
    # the loss (fp32). The logits and their gradient are never written: that is the point.
    return 2 * (N_TOKENS * HIDDEN + VOCAB * HIDDEN) * 2 + N_TOKENS * 8 + 4


def kgen_flops():
    # the three GEMMs: logits, grad_hidden and grad_weight, 2 N H V each
    return 6 * N_TOKENS * HIDDEN * VOCAB
