"""Fused backward of h = rmsnorm(embedding(ids)) * norm_weight.

Forward: x = emb_weight[ids] (one row per token), rstd = 1 / sqrt(mean(x^2) + eps)
per token, h = x * rstd * norm_weight. This is the input of a pre-norm
(Llama-style) transformer's first block, whose RMSNorm reads the embedding
output directly; the residual stream's own gradient into the embedding is left
out here.

Backward, from grad_out, the saved rstd and the embedding table itself (the
gathered rows are recomputed, not saved):
  x_hat = x * rstd, gw = grad_out * norm_weight
  grad_x = rstd * (gw - x_hat * mean(gw * x_hat))      per token row
  grad_emb_weight[ids[t]] += grad_x[t]                  scattered by id
  grad_norm_weight = sum_t grad_out[t] * x_hat[t]

Fusing keeps grad_x in registers: it is never rounded to bf16 or written out.
Both parameter gradients are fp32 by definition. grad_emb_weight because ids
are Zipf-distributed and a hot row collects thousands of contributions, which
bf16 accumulation silently gets wrong. grad_norm_weight because it is a sum
over every token, and a mixed-precision optimizer keeps fp32 gradients for it
anyway; it is DIM floats, so fp32 costs nothing.
"""

import torch
import torch.nn as nn

N_TOKENS = 8192  # batch * sequence, e.g. 4 x 2048 tokens
DIM = 2048
VOCAB = 32000
EPS = 1e-6
ZIPF_EXPONENT = 1.1

KGEN_NAME = "fused_embedding_rmsnorm_backward"
KGEN_ALIASES = ["embedding rmsnorm backward", "fused embedding norm bwd", "embedding_rmsnorm_bwd", "embed rmsnorm grad", "embedding then rmsnorm backward"]
KGEN_DESCRIPTION = "Fused embedding + RMSNorm backward: bf16 grad_out, Zipf int64 ids -> fp32 grad_emb_weight (scattered) and fp32 grad_norm_weight"
KGEN_KIND = "backward"
KGEN_BASELINE_COMPUTE = "fp32 math on the bf16 rows, fp32 gradients (the reference)"
KGEN_SMALL_SIZES = {"N_TOKENS": 37, "DIM": 100, "VOCAB": 50}
KGEN_PROBE_SIZES = {"N_TOKENS": 2048, "DIM": 16, "VOCAB": 64}
KGEN_EXTRA_SIZES = [{"N_TOKENS": 1000, "DIM": 4095, "VOCAB": 301}, {"N_TOKENS": 4096, "DIM": 4096, "VOCAB": 50257}]
KGEN_INPUT_DISTRIBUTIONS = ["zipf_ids"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, ids, emb_weight, norm_weight, rstd):
        # fp32 arithmetic for bf16 inputs; fp64 stays fp64 for the reference.
        acc = torch.promote_types(grad_out.dtype, torch.float32)
        g, w = grad_out.to(acc), norm_weight.to(acc)
        x = emb_weight[ids].to(acc)
        r = rstd.to(acc).unsqueeze(-1)
        x_hat = x * r
        gw = g * w
        grad_x = r * (gw - x_hat * (gw * x_hat).mean(dim=-1, keepdim=True))
        grad_norm_weight = (g * x_hat).sum(dim=0)
        grad_emb_weight = torch.zeros(emb_weight.shape, dtype=acc, device=emb_weight.device)
        grad_emb_weight.index_add_(0, ids, grad_x)
        return grad_emb_weight, grad_norm_weight


def zipf_ids(n, vocab, exponent=ZIPF_EXPONENT):
    """n token ids in [0, vocab): rank k drawn with p ~ 1 / k^exponent.

    Ranks are then mapped through a random permutation of the vocabulary, so
    the hot ids are spread over the table rather than being 0, 1, 2, ...
    """
    probs = torch.arange(1, vocab + 1, dtype=torch.float64).pow(-exponent)
    ranks = torch.multinomial(probs, n, replacement=True)
    return torch.randperm(vocab)[ranks]


def get_inputs():
    emb_weight = torch.randn(VOCAB, DIM, dtype=torch.bfloat16)
    norm_weight = (1.0 + 0.1 * torch.randn(DIM)).to(torch.bfloat16)
    ids = zipf_ids(N_TOKENS, VOCAB)
    grad_out = torch.randn(N_TOKENS, DIM, dtype=torch.bfloat16)
    rstd = torch.rsqrt(emb_weight[ids].float().pow(2).mean(dim=-1) + EPS)
    return [grad_out, ids, emb_weight, norm_weight, rstd]


def get_init_inputs():
    return []


def _expected_distinct_ids():
    """Expected number of distinct ids among N_TOKENS Zipf draws: rows that must be read."""
    probs = torch.arange(1, VOCAB + 1, dtype=torch.float64).pow(-ZIPF_EXPONENT)
    probs = probs / probs.sum()
    return float((1.0 - (1.0 - probs).pow(N_TOKENS)).sum())


def kgen_bytes():
    # read grad_out (bf16), ids (int64), rstd (fp32), norm_weight (bf16) and only the
    # distinct gathered rows of emb_weight (bf16); write grad_emb_weight and
    # grad_norm_weight (fp32) once
    reads = N_TOKENS * DIM * 2 + N_TOKENS * 8 + N_TOKENS * 4 + DIM * 2
    reads += round(_expected_distinct_ids()) * DIM * 2
    return reads + VOCAB * DIM * 4 + DIM * 4


def kgen_flops():
    # the RMSNorm backward (8 per element) plus the scatter-add
    return 9 * N_TOKENS * DIM
