"""Zipf-distributed token batches from a seeded generator.

Zipf because real text is: a few ids take a large share of the tokens, which is what makes an
embedding backward that accumulates in low precision go wrong (a hot row sums hundreds of
contributions)."""

from __future__ import annotations

from typing import Any


def zipf_probabilities(vocab: int, exponent: float = 1.1) -> Any:
    """p(rank k) proportional to 1 / k^exponent over the vocabulary."""
    import torch

    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64) ** exponent
    return weights / weights.sum()


def token_batches(vocab: int, batch: int, seq: int, steps: int, seed: int, device: str) -> list[Any]:
    """``steps`` batches of int64 ids, shape (batch, seq); the same seed gives the same ids."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    probs = zipf_probabilities(vocab)
    return [
        torch.multinomial(probs, batch * seq, replacement=True, generator=generator).view(batch, seq).to(device)
        for _ in range(steps)
    ]
