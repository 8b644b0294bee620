"""A Llama-architecture model built locally from a `LlamaConfig`: random init, no download.

Sizes are parameters; `SIZES` names the ones the command offers (tiny for the CPU in CI,
small, 100m and 1b for a GPU). Attention is transformers' eager code up to 100m (the sizes the
earlier measurements used, and the same bits on every run of the CPU) and SDPA at 1b, as
people train a model of that size: eager attention at 2048 tokens keeps a 2048 x 2048 matrix
per head and layer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kgen.errors import KgenUsageError


class ModelSize(BaseModel):
    """The shape of the model and of one batch."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    batch: int
    seq: int
    #: transformers' attention implementation ("eager" or "sdpa")
    attention: str = "eager"


SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(hidden=64, layers=2, heads=4, intermediate=128, vocab=512, batch=8, seq=64),
    "small": ModelSize(hidden=256, layers=4, heads=8, intermediate=688, vocab=4096, batch=16, seq=256),
    "100m": ModelSize(hidden=768, layers=12, heads=12, intermediate=2048, vocab=32000, batch=16, seq=512),
    "1b": ModelSize(hidden=2048, layers=16, heads=16, intermediate=5632, vocab=32000, batch=4, seq=2048,
                    attention="sdpa"),
}


def require_transformers() -> Any:
    """The `transformers` module, or a usage error saying how to get it."""
    try:
        import transformers
    except ImportError as exc:
        raise KgenUsageError("kgen train-check needs transformers: pip install 'kgen[train]' (or pip install transformers)") from exc
    return transformers


def build_model(size: ModelSize, seed: int, device: str) -> Any:
    """A LlamaForCausalLM with bf16 parameters, initialised from ``seed`` (same seed, same bits)."""
    import torch

    transformers = require_transformers()
    config = transformers.LlamaConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.seq, tie_word_embeddings=False, attn_implementation=size.attention,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    return model.to(device=device, dtype=torch.bfloat16)
