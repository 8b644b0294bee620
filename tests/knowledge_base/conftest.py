"""Knowledge-base tests run twice: on an embedded store and on a real `chroma run` server
(the session's ``chroma_server`` from tests/conftest.py); each test gets empty kgen
collections on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.knowledge_base.store import GUIDANCE_COLLECTION, KERNELS_COLLECTION


def _empty_server(url: str) -> None:
    import chromadb

    port = int(url.rsplit(":", 1)[1])
    client = chromadb.HttpClient(host="127.0.0.1", port=port)
    for name in (KERNELS_COLLECTION, GUIDANCE_COLLECTION):
        try:
            client.delete_collection(name)
        except Exception:
            pass  # not created yet


@pytest.fixture(params=["embedded", "server"])
def kb_location(request, tmp_path: Path) -> str:
    """An empty store location: a fresh directory, or the loopback server with its kgen collections dropped."""
    if request.param == "embedded":
        return str(tmp_path / "kb")
    url = request.getfixturevalue("chroma_server")
    _empty_server(url)
    return url


@pytest.fixture
def kb(kb_location):
    from kgen.knowledge_base.store import KnowledgeBase

    return KnowledgeBase.open(kb_location)
