"""The Chroma store: an embedded ``PersistentClient`` by default, a Chroma server for a team.

``KnowledgeBase.open(None)`` opens ``$KGEN_HOME/kb``; a directory path opens
that store; ``http://host:8000`` talks to a ``chroma run`` server. Both modes
go through the same methods, so everything above this module (retrieval,
write-back, import/export, the CLI) is mode-blind.

Consistency. Each kernel is one Chroma record (source, metadata and
embedding written in one upsert), so an interrupted write leaves either the
whole record or none. Ids are derived from the code and its slot, so two
processes writing the same kernel converge on one record. Decisions that read
before they write (keep the best per slot) take ``write_lock()``: an OS file
lock beside an embedded store; a server serialises single writes itself.
Embeddings are always computed here, never by Chroma's default embedding
(which would download a model).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, Field

from kgen.core.config import kgen_home
from kgen.knowledge_base.embedding import embedding_function_for, embedding_label
from kgen.knowledge_base.errors import KnowledgeBaseError
from kgen.knowledge_base.schema import (
    GuidanceNote,
    KernelEntry,
    entry_document,
    entry_from_document,
    guidance_metadata,
    note_from_record,
    scalar_metadata,
)

KERNELS_COLLECTION = "kgen_kernels"
GUIDANCE_COLLECTION = "kgen_guidance"
SCHEMA_VERSION = 2
#: Chroma caps one request's batch; writes are split into chunks no larger than this
WRITE_BATCH = 1000
LOCK_FILE = "kgen-write.lock"


class KnowledgeBaseStats(BaseModel):
    location: str
    mode: Literal["embedded", "server"]
    embedding: str
    kernels: int
    guidance: int
    problems: int
    by_backend: dict[str, int] = Field(default_factory=dict)
    by_target: dict[str, int] = Field(default_factory=dict)
    by_role: dict[str, int] = Field(default_factory=dict)
    timed: int = 0


def default_location() -> str:
    return str(kgen_home() / "kb")


def is_server_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def where_equal(**fields: Any) -> dict[str, Any] | None:
    """A Chroma filter requiring every given field to equal its value (None values ignored)."""
    clauses = [{key: value} for key, value in fields.items() if value is not None]
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _chroma_settings():
    from chromadb.config import Settings

    # no usage telemetry: kgen runs offline and must not reach out on its own
    return Settings(anonymized_telemetry=False)


def _open_client(location: str):
    import chromadb

    if is_server_url(location):
        parsed = urlparse(location)
        if not parsed.hostname:
            raise KnowledgeBaseError(f"knowledge base URL {location!r} has no host")
        ssl = parsed.scheme == "https"
        port = parsed.port or (443 if ssl else 8000)
        try:
            client = chromadb.HttpClient(
                host=parsed.hostname, port=port, ssl=ssl, settings=_chroma_settings()
            )
            client.heartbeat()
        except Exception as exc:  # the client raises several types for one cause
            raise KnowledgeBaseError(
                f"cannot reach the Chroma server at {location} ({_short(exc)}); start one with "
                "`chroma run --path DIR --port 8000`, or drop --kb to use the local store"
            ) from exc
        return client
    path = Path(location).expanduser()
    if path.exists() and not path.is_dir():
        raise KnowledgeBaseError(f"knowledge base path {path} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KnowledgeBaseError(f"cannot create the knowledge base at {path}: {exc}") from exc
    try:
        return chromadb.PersistentClient(path=str(path), settings=_chroma_settings())
    except Exception as exc:
        raise KnowledgeBaseError(_unreadable(path, exc)) from exc


@contextlib.contextmanager
def _first_open_lock(location: str) -> Iterator[None]:
    """Processes opening one embedded store at the same moment take turns: Chroma creates its
    tables on first open, and two creators at once fail ("table collections already exists")."""
    if is_server_url(location):
        yield
        return
    import fcntl

    path = Path(location)
    if path.exists() and not path.is_dir():
        raise KnowledgeBaseError(f"knowledge base path {path} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KnowledgeBaseError(f"cannot create the knowledge base at {path}: {exc}") from exc
    with open(path / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


def _unreadable(path: Path, exc: BaseException) -> str:
    return (
        f"the knowledge base at {path} cannot be read ({_short(exc)}); it may be corrupt or "
        "written by another Chroma version: move it aside and run `kgen kb init` "
        "(then `kgen kb import` a previous export), or pass --kb DIR for another store"
    )


class KnowledgeBase:
    """A kernels collection and a guidance collection in one Chroma store."""

    def __init__(self, client: Any, location: str, embedding: str | None) -> None:
        self._client = client
        self.location = location
        self.mode: Literal["embedded", "server"] = (
            "server" if is_server_url(location) else "embedded"
        )
        self._embedding = embedding_function_for(embedding)
        self.embedding = embedding_label(self._embedding)
        self._kernels = self._collection(KERNELS_COLLECTION)
        self._guidance = self._collection(GUIDANCE_COLLECTION)

    @classmethod
    def open(cls, location: str | None = None, *, embedding: str | None = None) -> KnowledgeBase:
        """Open (creating if needed) the store at a directory or server URL; None = $KGEN_HOME/kb."""
        location = location or default_location()
        if not is_server_url(location):
            location = str(Path(location).expanduser().resolve())
        with _first_open_lock(location):
            client = _open_client(location)
            try:
                return cls(client, location, embedding)
            except KnowledgeBaseError:
                raise
            except Exception as exc:
                if is_server_url(location):
                    raise KnowledgeBaseError(
                        f"the Chroma server at {location} refused kgen's collections ({_short(exc)})"
                    ) from exc
                raise KnowledgeBaseError(_unreadable(Path(location), exc)) from exc

    # -- collections -----------------------------------------------------------------

    def _collection(self, name: str):
        metadata = {"kgen_embedding": self.embedding, "kgen_schema": SCHEMA_VERSION}
        collection = self._client.get_or_create_collection(
            name,
            embedding_function=self._embedding,
            metadata=metadata,
            configuration={"hnsw": {"space": "cosine"}},
        )
        schema = (collection.metadata or {}).get("kgen_schema", SCHEMA_VERSION)
        if schema != SCHEMA_VERSION:
            raise KnowledgeBaseError(
                f"the knowledge base at {self.location} has record format {schema}, this kgen "
                f"writes format {SCHEMA_VERSION}: point --kb at a new store and `kgen kb init` it"
            )
        built_with = (collection.metadata or {}).get("kgen_embedding")
        if built_with and built_with != self.embedding:
            raise KnowledgeBaseError(
                f"the knowledge base at {self.location} was built with the embedding "
                f"{built_with!r}, but kgen is configured for {self.embedding!r}: configure "
                f"{built_with!r} again, or export this store and import it into a new one"
            )
        return collection

    def _embed(self, texts: Sequence[str]) -> list[Any]:
        return list(self._embedding(list(texts)))

    # -- kernels ---------------------------------------------------------------------

    def put_kernels(self, entries: Sequence[KernelEntry]) -> None:
        """Upsert whole records; each record lands complete or not at all."""
        for start in range(0, len(entries), WRITE_BATCH):
            batch = entries[start : start + WRITE_BATCH]
            self._kernels.upsert(
                ids=[e.id for e in batch],
                documents=[entry_document(e) for e in batch],
                metadatas=[scalar_metadata(e) for e in batch],
                embeddings=self._embed([e.search_text() for e in batch]),
            )

    def get_kernel(self, kernel_id: str) -> KernelEntry | None:
        found = self._kernels.get(ids=[kernel_id], include=["documents"])
        if not found["ids"]:
            return None
        return entry_from_document(found["documents"][0])

    def find_kernel_by_prefix(self, prefix: str) -> list[KernelEntry]:
        """Ids as typed by a person: a full id or its unambiguous start."""
        exact = self.get_kernel(prefix)
        if exact is not None:
            return [exact]
        return [e for e in self.kernels() if e.id.startswith(prefix)]

    def kernels(self, where: dict[str, Any] | None = None, limit: int | None = None) -> list[KernelEntry]:
        """Kernels matching a metadata filter, read from the store's table (always current)."""
        entries: list[KernelEntry] = []
        offset = 0
        page = WRITE_BATCH if limit is None else min(limit, WRITE_BATCH)
        while limit is None or len(entries) < limit:
            found = self._kernels.get(where=where or None, include=["documents"], limit=page,
                                      offset=offset)
            entries += [entry_from_document(doc) for doc in found["documents"]]
            if len(found["ids"]) < page:
                break
            offset += page
        return entries if limit is None else entries[:limit]

    def query_kernels(
        self, text: str, *, where: dict[str, Any] | None = None, n: int = 10
    ) -> list[tuple[KernelEntry, float]]:
        """Nearest kernels to a text, with cosine similarity (1 = same direction)."""
        return [(entry_from_document(doc), similarity)
                for _, doc, _, similarity in self._nearest(self._kernels, text, n, where)]

    def _nearest(self, collection, text: str, n: int, where: dict[str, Any] | None = None,
                 documents: bool = True) -> list[tuple[str, str, dict[str, Any], float]]:
        """(id, document, metadata, cosine similarity) of the n records nearest to a text; with
        ``documents=False`` the document is "" (cheaper: documents are the bulk of a record)."""
        if n <= 0:
            return []
        include = ["documents", "metadatas", "distances"] if documents else ["metadatas", "distances"]
        found = collection.query(query_embeddings=self._embed([text]), n_results=n,
                                 where=where or None, include=include)
        docs = found["documents"][0] if documents else [""] * len(found["ids"][0])
        return [
            (record_id, doc, meta, 1.0 - float(distance))
            for record_id, doc, meta, distance in zip(
                found["ids"][0], docs, found["metadatas"][0], found["distances"][0], strict=True)
        ]

    def kernel_summaries_near(self, text: str, n: int) -> list[tuple[str, dict[str, Any], float]]:
        """(id, flat metadata, similarity) of the n kernels nearest to a text, from one unfiltered
        query: a Chroma filter costs time in proportion to the records it matches (hundreds of
        ms at 100,000 kernels), an unfiltered nearest-neighbour query a few ms."""
        return [(record_id, meta, similarity) for record_id, _, meta, similarity
                in self._nearest(self._kernels, text, n, documents=False)]

    def best_kernel_summaries(self, problem: str, backends: Sequence[str], text: str
                              ) -> list[tuple[str, dict[str, Any], float]]:
        """(id, flat metadata, similarity to a text) of each slot's best kernel for a problem
        (one per target and dtype)."""
        keys = [f"{problem}|{backend}" for backend in backends]
        where = {"best_of": keys[0]} if len(keys) == 1 else {"best_of": {"$in": keys}}
        return self.kernel_summaries_where(where, text)

    def kernel_summaries_where(self, where: dict[str, Any], text: str, limit: int = 2000
                               ) -> list[tuple[str, dict[str, Any], float]]:
        """(id, flat metadata, similarity to a text) of kernels matching a selective filter, by
        an exact scan of their stored embeddings: an index search under a filter that few
        records pass can miss them."""
        import numpy as np

        found = self._kernels.get(where=where, include=["metadatas", "embeddings"], limit=limit)
        if not found["ids"]:
            return []
        query = np.asarray(self._embed([text])[0], dtype=np.float64)
        stored = np.asarray(found["embeddings"], dtype=np.float64)
        norms = np.linalg.norm(stored, axis=1) * np.linalg.norm(query)
        similarities = stored @ query / np.where(norms == 0, 1.0, norms)
        return [(record_id, meta, float(similarity)) for record_id, meta, similarity
                in zip(found["ids"], found["metadatas"], similarities, strict=True)]

    def kernels_by_id(self, ids: Sequence[str]) -> list[KernelEntry]:
        """Whole entries for ids, in the order given; unknown ids are skipped."""
        if not ids:
            return []
        found = self._kernels.get(ids=list(ids), include=["documents"])
        by_id = {record_id: entry_from_document(doc)
                 for record_id, doc in zip(found["ids"], found["documents"], strict=True)}
        return [by_id[i] for i in ids if i in by_id]

    def delete_kernels(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), WRITE_BATCH):
            self._kernels.delete(ids=list(ids[start : start + WRITE_BATCH]))

    def kernel_count(self) -> int:
        return self._kernels.count()

    # -- guidance --------------------------------------------------------------------

    def put_guidance(self, notes: Sequence[GuidanceNote]) -> None:
        if not notes:
            return
        self._guidance.upsert(
            ids=[n.id for n in notes],
            documents=[n.text for n in notes],
            metadatas=[guidance_metadata(n) for n in notes],
            embeddings=self._embed([f"{n.title}\n{' '.join(n.topics)}\n{n.text}" for n in notes]),
        )

    def guidance(self) -> list[GuidanceNote]:
        found = self._guidance.get(include=["documents", "metadatas"])
        return [
            note_from_record(doc, meta)
            for doc, meta in zip(found["documents"], found["metadatas"], strict=True)
        ]

    def query_guidance(self, text: str, n: int = 50) -> list[tuple[GuidanceNote, float]]:
        return [(note_from_record(doc, meta), similarity)
                for _, doc, meta, similarity in self._nearest(self._guidance, text, n)]

    def delete_guidance(self, ids: Sequence[str]) -> None:
        if ids:
            self._guidance.delete(ids=list(ids))

    # -- whole store -----------------------------------------------------------------

    def stats(self) -> KnowledgeBaseStats:
        entries = self.kernels()
        return KnowledgeBaseStats(
            location=self.location,
            mode=self.mode,
            embedding=self.embedding,
            kernels=len(entries),
            guidance=self._guidance.count(),
            problems=len({e.problem for e in entries}),
            by_backend=dict(Counter(e.backend for e in entries)),
            by_target=dict(Counter(e.target for e in entries)),
            by_role=dict(Counter(e.role for e in entries)),
            timed=sum(1 for e in entries if e.timing.measured),
        )

    @contextlib.contextmanager
    def write_lock(self, timeout_s: float = 60.0) -> Iterator[None]:
        """Serialise read-decide-write sequences across processes sharing an embedded store.

        A server is shared by machines that cannot share a file lock; there, records
        are idempotent by id and `kgen kb prune` reconciles two writers who both
        believed they held the best kernel of a slot.
        """
        if self.mode == "server":
            yield
            return
        import fcntl

        path = Path(self.location) / LOCK_FILE
        with open(path, "a+") as handle:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        handle.seek(0)
                        holder = handle.read().strip() or "unknown"
                        raise KnowledgeBaseError(
                            f"the knowledge base at {self.location} is locked by another kgen "
                            f"process (pid {holder}) for more than {timeout_s:.0f} s; wait for it, "
                            "or end that process"
                        ) from None
                    time.sleep(0.05)
            try:
                handle.seek(0)
                handle.truncate()
                handle.write(str(os.getpid()))
                handle.flush()
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
