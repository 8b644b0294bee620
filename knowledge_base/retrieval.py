"""Retrieval for a spec: the examples and guidance an LLM prompt (or offline tuning) starts from.

Kernels are filtered by backend, then ranked by a score that mixes how close
the text is (cosine similarity of the hashed embedding), whether the kernel
solves the very problem asked for, how close its target is (same target, same
architecture family, other), and how fast it was measured relative to
``torch.compile``. Kernels of the requested target family come first; other
families fill the list only when the family has too few, because a Hopper
kernel is still a better start for an MI300X request than nothing.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from kgen.backends.registry import known_backends
from kgen.knowledge_base.schema import GuidanceNote, KernelEntry, target_family
from kgen.knowledge_base.store import KnowledgeBase

#: score weights: problem match outweighs everything; similarity and speed break ties
PROBLEM_MATCH, SAME_TARGET, SAME_FAMILY, SPEED = 2.0, 0.3, 0.2, 0.1
#: candidates fetched from the vector index before re-ranking
CANDIDATE_POOL = 100


class RetrievedKernel(BaseModel):
    entry: KernelEntry
    similarity: float
    score: float
    why: str


class Retrieval(BaseModel):
    examples: list[RetrievedKernel] = Field(default_factory=list)
    guidance: list[GuidanceNote] = Field(default_factory=list)

    @property
    def best(self) -> KernelEntry | None:
        """The offline starting point: the top example for the exact problem, if any."""
        return self.examples[0].entry if self.examples else None


def _speed_bonus(speedup: float | None) -> float:
    if speedup is None or speedup <= 0:
        return 0.0
    # log scale, capped: 2x over torch.compile is worth a bit, 100x is not worth 50 times more
    return SPEED * max(-1.0, min(1.0, math.log2(speedup) / 2))


def _score(meta: dict[str, Any], similarity: float, problem: str | None, target: str | None,
           family: str | None) -> tuple[float, str]:
    """Rank from a record's flat metadata alone (whole entries are read for the kept few)."""
    score, why = similarity, [f"similarity {similarity:.2f}"]
    if problem and meta.get("problem") == problem:
        score += PROBLEM_MATCH
        why.append("same problem")
    if target and meta.get("target") == target:
        score += SAME_TARGET
        why.append(f"same target {target}")
    elif family and meta.get("target_family") == family:
        score += SAME_FAMILY
        why.append(f"same family {family}")
    if meta.get("role") == "best":
        score += 0.05
    # speed ranks kernels that are about as close; it must not lift an unrelated fast kernel
    speedup = meta.get("speedup_vs_compile")
    bonus = _speed_bonus(speedup) * max(similarity, 0.0)
    if bonus:
        score += bonus
        why.append(f"{speedup:.2f}x vs torch.compile")
    return score, ", ".join(why)


def search_kernels(
    kb: KnowledgeBase,
    text: str,
    *,
    backend: str | None = None,
    target: str | None = None,
    problem: str | None = None,
    dtype: str | None = None,
    n: int = 5,
) -> list[RetrievedKernel]:
    """Ranked kernels for a request: the asked-for problem's first, then the target's family,
    then by score. No Chroma filter is used (see ``KnowledgeBase.kernel_summaries_near``): one
    unfiltered nearest-neighbour query, the backend checked here, and the problem's best kernels
    fetched by one selective key, so they are never missed however the index ranks them."""
    family = target_family(target) if target else None
    pool: dict[str, tuple[dict[str, Any], float]] = {}
    for kernel_id, meta, similarity in kb.kernel_summaries_near(text, CANDIDATE_POOL):
        if backend is None or meta.get("backend") == backend:
            pool[kernel_id] = (meta, similarity)
    if backend and len(pool) < n:
        # the nearest records were all of other backends: scan that backend's kernels (rare)
        for kernel_id, meta, similarity in kb.kernel_summaries_where({"backend": backend}, text):
            pool[kernel_id] = (meta, similarity)
    if problem:
        # a search that names no backend looks up every registered backend's best kernels
        backends = [backend] if backend else known_backends()
        for kernel_id, meta, similarity in kb.best_kernel_summaries(problem, backends, text):
            pool[kernel_id] = (meta, similarity)
    ranked: list[tuple[tuple, str, float, str]] = []
    for kernel_id, (meta, similarity) in pool.items():
        if dtype and meta.get("dtype") != dtype and meta.get("problem") == problem:
            similarity -= 0.1  # a kernel for another dtype of the same problem is a weaker start
        score, why = _score(meta, similarity, problem, target, family)
        key = (bool(problem) and meta.get("problem") == problem,
               family is not None and meta.get("target_family") == family, score)
        ranked.append((key, kernel_id, similarity, why))
    ranked.sort(key=lambda item: item[0], reverse=True)
    top = ranked[:n]
    entries = {e.id: e for e in kb.kernels_by_id([kernel_id for _, kernel_id, _, _ in top])}
    return [
        RetrievedKernel(entry=entries[kernel_id], similarity=similarity, score=key[2], why=why)
        for key, kernel_id, similarity, why in top if kernel_id in entries
    ]


def applicable_guidance(kb: KnowledgeBase, text: str, *, backend: str, target: str,
                        limit: int = 6) -> list[GuidanceNote]:
    """Notes for this backend and target: the verification rules first (they decide what is
    accepted), then the notes written for this very target, then the rest by relevance."""
    scored = [
        (note, similarity) for note, similarity in kb.query_guidance(text)
        if note.applies_to(backend, target)
    ]
    scored.sort(key=lambda pair: (
        "verification" not in pair[0].topics, target not in pair[0].targets, -pair[1]))
    return [note for note, _ in scored[:limit]]


def retrieve(
    kb: KnowledgeBase,
    text: str,
    *,
    backend: str,
    target: str,
    problem: str | None = None,
    dtype: str | None = None,
    n_examples: int = 3,
    n_guidance: int = 6,
) -> Retrieval:
    """What the agent puts in a prompt for one (spec, target)."""
    return Retrieval(
        examples=search_kernels(
            kb, text, backend=backend, target=target, problem=problem, dtype=dtype, n=n_examples
        ),
        guidance=applicable_guidance(kb, text, backend=backend, target=target, limit=n_guidance),
    )
