"""Embeddings for the knowledge base that need no model download.

Chroma's default embedding downloads an ONNX model at first use, which fails
offline; kgen must retrieve kernels on a laptop with no network. The default
here is a deterministic feature-hashing embedding tuned for kernel specs and
code: identifiers are split (``_rmsnorm_bwd_rows`` -> rmsnorm, backward, rows),
synonyms are folded (bwd/grad -> backward, bf16 -> bfloat16, H100 -> hopper),
and word pairs are hashed beside single words so "rms norm" meets "rmsnorm".
The hash is blake2b, never Python's salted ``hash()``, so a store built on one
machine answers the same on another.

Semantic embeddings (sentence-transformers, OpenAI) can be configured with
``embedding_function_for("sentence-transformers:all-MiniLM-L6-v2")`` or
``"openai:text-embedding-3-small"``; a collection records the embedding it was
built with and the store refuses a mismatched one (see ``store.py``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from functools import lru_cache
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from kgen.backends.registry import all_kernel_decorators, backend_words
from kgen.knowledge_base.errors import KnowledgeBaseError

DEFAULT_EMBEDDING = "kgen-hash"
DEFAULT_DIMENSION = 512

#: folded spellings: every key becomes its value before hashing
SYNONYMS: dict[str, str] = {
    "bwd": "backward", "grad": "backward", "grads": "backward", "gradient": "backward",
    "gradients": "backward", "backprop": "backward", "fwd": "forward",
    "bf16": "bfloat16", "fp16": "float16", "half": "float16", "f16": "float16",
    "fp32": "float32", "f32": "float32", "float": "float32", "fp8": "float8",
    "rms": "rmsnorm", "layer": "layernorm", "ln": "layernorm",
    "xent": "crossentropy", "ce": "crossentropy", "entropy": "crossentropy",
    "gemm": "matmul", "mm": "matmul", "linear": "matmul", "dot": "matmul",
    "attn": "attention", "sdpa": "attention", "flash": "attention",
    "emb": "embedding", "embed": "embedding",
    # targets fold to their family: the store filters on exact targets, words find the family
    "h100": "hopper", "h200": "hopper", "sm90": "hopper", "b200": "blackwell",
    "sm100": "blackwell", "a100": "ampere", "sm80": "ampere", "l40s": "ada", "sm89": "ada",
    "lovelace": "ada", "mi300x": "cdna", "mi300": "cdna", "gfx942": "cdna", "cdna3": "cdna",
    "amd": "cdna", "rocm": "cdna",
}

#: word pairs that name one thing ("rms norm" is rmsnorm); checked after folding
JOINED_PAIRS: dict[tuple[str, str], str] = {
    ("rmsnorm", "norm"): "rmsnorm", ("layernorm", "norm"): "layernorm",
    ("cross", "crossentropy"): "crossentropy", ("soft", "max"): "softmax",
    ("log", "softmax"): "logsoftmax", ("swi", "glu"): "swiglu",
}

#: words that carry no meaning for retrieval
STOPWORDS = frozenset(
    "a an and the of for in on to with by from into as is it its this that be at or "
    "kernel kernels please make write me need want self def return import torch nn tl "
    "triton language none true false int ptr mask offs program id".split()
)

#: weights per feature kind: whole words dominate, pairs add order, trigrams forgive typos
WORD_WEIGHT, PAIR_WEIGHT, TRIGRAM_WEIGHT = 1.0, 0.6, 0.15

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*|[0-9]+")


def tokenize(text: str) -> list[str]:
    """Words of a spec or of code: identifiers split, lowercased, synonyms folded, joined pairs merged."""
    words: list[str] = []
    for raw in _WORD.findall(text.replace("_", " ")):
        for part in _CAMEL.split(raw):
            word = part.lower()
            if not word or word.isdigit() and len(word) > 6:
                continue
            words.append(SYNONYMS.get(word) or _backend_synonyms().get(word, word))
    merged: list[str] = []
    for word in words:
        if merged and (merged[-1], word) in JOINED_PAIRS:
            merged[-1] = JOINED_PAIRS[(merged[-1], word)]
            continue
        merged.append(word)
    noise = _decorator_words()
    return [w for w in merged if w not in STOPWORDS and w not in noise and len(w) > 1]


@lru_cache(maxsize=1)
def _backend_synonyms() -> dict[str, str]:
    """The one-word spellings of each registered backend ("cutlass", "cutedsl") folded to its
    name, so a request and a stored kernel meet however either spells the backend. From the
    registry: a new backend is found by its words with no edit here."""

    return {word: name for word, name in backend_words().items() if word.isalnum() and word != name}


@lru_cache(maxsize=1)
def _decorator_words() -> frozenset[str]:
    """The last words of the backends' kernel decorators ("jit", "kernel"): on every kernel of
    a backend alike, so they say nothing about which kernel it is."""

    return frozenset(d.rsplit(".", 1)[-1] for d in all_kernel_decorators())


def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimension, (1.0 if value >> 63 else -1.0)


def hashed_vector(text: str, dimension: int = DEFAULT_DIMENSION) -> list[float]:
    """Signed feature hashing of words, word pairs and character trigrams; unit length."""
    words = tokenize(text)
    features: Counter[str] = Counter()
    for word in words:
        features["w:" + word] += WORD_WEIGHT
        padded = f"^{word}$"
        for i in range(len(padded) - 2):
            features["c:" + padded[i : i + 3]] += TRIGRAM_WEIGHT
    for first, second in zip(words, words[1:], strict=False):
        features[f"p:{first} {second}"] += PAIR_WEIGHT
    vector = [0.0] * dimension
    for feature, weight in features.items():
        index, sign = _bucket(feature, dimension)
        # sublinear: a name repeated fifty times in code must not drown the spec's words
        vector[index] += sign * (1.0 + math.log(weight)) if weight >= 1 else sign * weight
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        # an empty text still needs a valid unit vector for cosine distance
        vector[0] = 1.0
        return vector
    return [v / norm for v in vector]


@register_embedding_function
class KernelHashEmbedding(EmbeddingFunction[Documents]):
    """The offline default: deterministic hashed features of kernel specs and code."""

    def __init__(self, dimension: int = DEFAULT_DIMENSION) -> None:
        self.dimension = int(dimension)

    def __call__(self, input: Documents) -> Embeddings:  # noqa: A002 - Chroma's signature
        import numpy as np

        return [np.asarray(hashed_vector(text, self.dimension), dtype=np.float32) for text in input]

    @staticmethod
    def name() -> str:
        return DEFAULT_EMBEDDING

    def get_config(self) -> dict[str, Any]:
        return {"dimension": self.dimension}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> KernelHashEmbedding:
        return KernelHashEmbedding(int(config.get("dimension", DEFAULT_DIMENSION)))

    def default_space(self) -> str:
        return "cosine"

    def supported_spaces(self) -> list[str]:
        return ["cosine"]


class EmbeddingConfigError(KnowledgeBaseError):
    """An embedding name kgen does not know, or one whose package is missing."""


def embedding_label(function: EmbeddingFunction) -> str:
    """What a collection records about its embedding: name and configuration, e.g. 'kgen-hash/512'."""
    if isinstance(function, KernelHashEmbedding):
        return f"{DEFAULT_EMBEDDING}/{function.dimension}"
    config = function.get_config() or {}
    model = config.get("model_name") or config.get("model") or ""
    return f"{function.name()}/{model}" if model else str(function.name())


def embedding_function_for(name: str | None) -> EmbeddingFunction:
    """The embedding for a configured name: 'kgen-hash' (default), 'kgen-hash/1024',
    'sentence-transformers:MODEL' or 'openai:MODEL' (these two need their packages, and
    OpenAI needs OPENAI_API_KEY; neither is used unless configured)."""
    if not name or name == DEFAULT_EMBEDDING:
        return KernelHashEmbedding()
    kind, _, model = name.partition(":")
    if kind.startswith(DEFAULT_EMBEDDING + "/") and kind.split("/", 1)[1].isdigit():
        return KernelHashEmbedding(int(kind.split("/", 1)[1]))
    if kind == "sentence-transformers" and model:
        from chromadb.utils.embedding_functions import SentenceTransformerEmbeddingFunction

        try:
            return SentenceTransformerEmbeddingFunction(model_name=model)
        except (ImportError, ValueError) as exc:
            raise EmbeddingConfigError(f"embedding {name!r}: {exc}") from exc
    if kind == "openai" and model:
        from chromadb.utils.embedding_functions import OpenAIEmbeddingFunction

        try:
            return OpenAIEmbeddingFunction(model_name=model, api_key_env_var="OPENAI_API_KEY")
        except (ImportError, ValueError) as exc:
            raise EmbeddingConfigError(f"embedding {name!r}: {exc}") from exc
    raise EmbeddingConfigError(
        f"unknown embedding {name!r}: use 'kgen-hash' (offline default), "
        "'sentence-transformers:MODEL' or 'openai:MODEL'"
    )
