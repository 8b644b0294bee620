"""The offline embedding: deterministic everywhere, tuned for kernel names, honest about config."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kgen.knowledge_base.embedding import (
    EmbeddingConfigError,
    KernelHashEmbedding,
    embedding_function_for,
    embedding_label,
    hashed_vector,
    tokenize,
)


def test_identifiers_are_split_and_spellings_folded():
    assert tokenize("_rmsnorm_bwd_rows") == ["rmsnorm", "backward", "rows"]
    assert tokenize("RMSNormBackward grad_x") == ["rmsnorm", "backward", "backward"]
    assert tokenize("rms norm backward for H100") == ["rmsnorm", "backward", "hopper"]
    assert tokenize("cross entropy bf16 MI300X") == ["crossentropy", "bfloat16", "cdna"]


def test_vectors_are_unit_length_and_the_same_in_another_process():
    vector = hashed_vector("layer norm forward h100")
    assert abs(np.linalg.norm(vector) - 1.0) < 1e-9
    code = ("from kgen.knowledge_base.embedding import hashed_vector;"
            "print(repr(hashed_vector('layer norm forward h100')))")
    # a new process gets a new string-hash salt: the embedding must not depend on it
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert eval(other.stdout) == vector  # noqa: S307 - our own repr of a list of floats


def test_closer_meaning_means_higher_similarity():
    def sim(a: str, b: str) -> float:
        return float(np.dot(hashed_vector(a), hashed_vector(b)))

    query = "rms norm backward"
    assert sim(query, "RMSNorm backward rmsnorm_backward _rmsnorm_bwd_rows") > sim(
        query, "RMSNorm forward rmsnorm_forward _rmsnorm_fwd")
    assert sim(query, "RMSNorm forward") > sim(query, "softmax rows online max")
    assert sim("rmsnrm bwd", "rmsnorm backward") > sim("rmsnrm bwd", "softmax")  # typos forgiven


def test_empty_text_still_gives_a_valid_vector():
    assert abs(np.linalg.norm(hashed_vector("")) - 1.0) < 1e-9


def test_configured_names():
    assert embedding_label(embedding_function_for(None)) == "kgen-hash/512"
    assert embedding_label(embedding_function_for("kgen-hash/1024")) == "kgen-hash/1024"
    assert len(KernelHashEmbedding(64)(["a b c"])[0]) == 64
    with pytest.raises(EmbeddingConfigError, match="unknown embedding 'bogus'"):
        embedding_function_for("bogus")
