"""Embedding backward: grad_weight from (grad_out, ids), accumulated in fp32.

Forward was out = weight[ids]. Its weight gradient scatters each token's
gradient row into the row of its id: grad_weight[ids[t]] += grad_out[t].
Token ids follow a Zipf law (as text does), so a few hot ids collect
thousands of contributions each.

grad_weight is fp32 by definition, not bf16: rounding every partial sum of a
hot row to bf16 (8 mantissa bits) loses the small late contributions once the
running sum has grown, and the error grows with the token count. It is silent:
training still runs, the embedding of the most frequent tokens just learns
from a wrong gradient. Frameworks accumulate this gradient in fp32 for that
reason, so a kernel must too.
"""

import torch
import torch.nn as nn

N_TOKENS = 16384  # batch * sequence, e.g. 4 x 4096 tokens
DIM = 4096
VOCAB = 32000
ZIPF_EXPONENT = 1.1

KGEN_NAME = "embedding_backward"
KGEN_ALIASES = ["embedding bwd", "embedding grad", "embedding_dense_backward", "embedding weight gradient", "nn.Embedding backward"]
KGEN_DESCRIPTION = "Embedding backward: bf16 grad_out rows scattered by Zipf-distributed int64 ids into an fp32 grad_weight"
KGEN_KIND = "backward"
KGEN_BASELINE_COMPUTE = "fp32 index_add_ of the bf16 rows into the fp32 table (the reference)"
KGEN_SMALL_SIZES = {"N_TOKENS": 37, "DIM": 100, "VOCAB": 50}
KGEN_PROBE_SIZES = {"N_TOKENS": 2048, "DIM": 16, "VOCAB": 64}
KGEN_EXTRA_SIZES = [{"N_TOKENS": 1000, "DIM": 4095, "VOCAB": 301}, {"N_TOKENS": 8192, "DIM": 768, "VOCAB": 50257}]
KGEN_INPUT_DISTRIBUTIONS = ["zipf_ids"]


class Model(nn.Module):
    def __init__(self, num_embeddings):
        super().__init__()
        self.num_embeddings = num_embeddings

    def forward(self, grad_out, ids):
        # fp32 accumulation for bf16 grad_out; fp64 stays fp64 for the reference.
        acc = torch.promote_types(grad_out.dtype, torch.float32)
        grad_weight = torch.zeros(self.num_embeddings, grad_out.shape[-1], dtype=acc, device=grad_out.device)
        grad_weight.index_add_(0, ids, grad_out.to(acc))
        return grad_weight


def zipf_ids(n, vocab, exponent=ZIPF_EXPONENT):
    """n token ids in [0, vocab): rank k drawn with p ~ 1 / k^exponent.

    Ranks are then mapped through a random permutation of the vocabulary, so
    the hot ids are spread over the table rather than being 0, 1, 2, ...
    """
    probs = torch.arange(1, vocab + 1, dtype=torch.float64).pow(-exponent)
    ranks = torch.multinomial(probs, n, replacement=True)
    return torch.randperm(vocab)[ranks]


def get_inputs():
    grad_out = torch.randn(N_TOKENS, DIM, dtype=torch.bfloat16)
    ids = zipf_ids(N_TOKENS, VOCAB)
    return [grad_out, ids]


def get_init_inputs():
    return [VOCAB]


def kgen_bytes():
    # read grad_out (bf16) and ids (int64); write the whole fp32 grad_weight once
    return N_TOKENS * DIM * 2 + N_TOKENS * 8 + VOCAB * DIM * 4


def kgen_flops():
    return N_TOKENS * DIM
