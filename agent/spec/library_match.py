"""Which knowledge-base kernels may serve a problem the library has no kernel of its own for.

Offline, kgen's main job tunes a kernel it already knows. A KernelBench file (``23_Softmax``)
is not a catalog problem, so the knowledge base holds no kernel under its name, though it may
hold one for the same operation under the catalog's name (``softmax``). This module finds those:

1. candidates by the knowledge base's own metadata and similarity: the backend's kernels,
   grouped by the catalog problem they were verified for, nearest to the problem's text first;
2. by reference semantics: a catalog problem whose reference, built and called the way this
   problem's is, gives this problem's outputs (``evals/problem/same_reference.py``: a few
   milliseconds of PyTorch, no kernel run).

What passes is a *candidate*: the run verifies each one against the problem's own reference
(dtypes, sizes, distributions; a seed written for bf16 that is dtype-generic may pass on an fp32
problem, one that is not is rejected) and tunes the one that passes. The screen is what lets
``kgen solve`` say up front which problems the library can serve, at no verification cost for
those it cannot.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from kgen.evals.problem.catalog import UnknownProblemError, catalog
from kgen.evals.problem.format import ProblemError, ProblemInfo, model_method, parse_problem
from kgen.evals.problem.same_reference import ProblemReference
from kgen.knowledge_base import UNVERIFIED_SEEDS_DIR

if TYPE_CHECKING:
    from kgen.knowledge_base.store import KnowledgeBase

#: library kernels verified as candidates for one problem (the best few)
LIBRARY_CANDIDATES = 3
#: catalog problems whose references are run against the problem's, nearest first
TWINS_CHECKED = 4


class LibraryKernel(BaseModel):
    """A knowledge-base kernel that may serve the problem, and the problem it was verified for."""

    kb_id: str
    problem: str
    target: str
    dtype: str
    source: str

    def description(self) -> str:
        return f"the library's {self.problem} kernel {self.kb_id} ({self.target}, {self.dtype})"


class LibraryMatch(BaseModel):
    """What the library offers one problem: its own kernels, kernels of an operation with the
    same reference, or nothing, with a one-line reason."""

    problem: str
    #: "own": kernels under the problem's own name; "twin": another problem's, same reference
    how: str = ""
    kernels: list[LibraryKernel] = Field(default_factory=list)
    #: the catalog problems whose references compute this one's
    twins: list[str] = Field(default_factory=list)
    reason: str = ""

    @property
    def served(self) -> bool:
        return bool(self.kernels)

    def line(self) -> str:
        """One line for the up-front table: what will be verified, or why nothing can be."""
        if not self.served:
            return f"{self.problem}: cannot serve offline: {self.reason}"
        if self.how == "own":
            return f"{self.problem}: its own kernel {self.kernels[0].kb_id}"
        ids = ", ".join(k.kb_id for k in self.kernels)
        return f"{self.problem}: same reference as {', '.join(self.twins)}; to try: {ids}"


def problem_text(info: ProblemInfo) -> str:
    """What the similarity search sees: the problem's names and its reference's forward."""
    tree = parse_problem(info.path)
    forward = model_method(tree, "forward")
    return "\n".join([info.name.replace("_", " "), info.description, ast.unparse(forward) if forward else ""])


def _rank(meta: dict[str, Any], similarity: float, target: str | None, dtype: str | None) -> tuple:
    return (meta.get("target") == target, meta.get("dtype") == dtype, meta.get("role") == "best", similarity)


def match_library(info: ProblemInfo, kb: KnowledgeBase, *, backend: str, target: str | None = None,
                  dtype: str | None = None) -> LibraryMatch:
    """The knowledge-base kernels that may serve ``info`` (see the module docstring), best
    first, at most ``LIBRARY_CANDIDATES``; none with the reason why. ``target`` and ``dtype``
    only rank kernels of one problem (a kernel for another target or dtype is still a
    candidate: the verifier decides). A problem whose own reference cannot run is a
    ProblemError."""

    text = problem_text(info)
    own = kb.best_kernel_summaries(info.operation, [backend], text)
    if own:
        own.sort(key=lambda item: _rank(item[1], item[2], target, dtype), reverse=True)
        kernels = _entries(kb, [kernel_id for kernel_id, _, _ in own[:LIBRARY_CANDIDATES]])
        return LibraryMatch(problem=info.name, how="own", kernels=kernels, twins=[info.operation])
    summaries = kb.kernel_summaries_where({"backend": backend}, text)
    if not summaries:
        return LibraryMatch(problem=info.name, reason=f"the knowledge base has no {backend} kernel at all")
    by_problem: dict[str, list[tuple[str, dict[str, Any], float]]] = {}
    for kernel_id, meta, similarity in summaries:
        by_problem.setdefault(str(meta.get("problem", "")), []).append((kernel_id, meta, similarity))
    known = {c.name: c for c in catalog()}
    nearest = sorted((p for p in by_problem if p in known and p != info.name),
                     key=lambda p: max(s for _, _, s in by_problem[p]), reverse=True)
    reference = ProblemReference(info)
    checked: list[str] = []
    twins: list[str] = []
    other_interface = ""
    for name in nearest:
        if len(checked) >= TWINS_CHECKED:
            break
        why = reference.difference(known[name])
        if why.startswith("takes "):  # another interface: not worth a place among those checked
            other_interface = other_interface or f"{name} {why}"
            continue
        checked.append(name)
        if not why:
            twins.append(name)
    if not twins:
        reason = _no_twin_reason(backend, checked, other_interface)
        waiting = _waiting_twins(reference, backend, known, exclude=info.name)
        if waiting:
            files = ", ".join(f"knowledge_base/seed_kernels_unverified/{backend}/{name}.py" for name in waiting)
            reason += (f"; the catalog's {' and '.join(waiting)} computes it, but its seed waits for a GPU run "
                       f"({files}: `kgen eval` it on a GPU)")
        return LibraryMatch(problem=info.name, reason=reason)
    picks: list[str] = []
    ranked = {p: sorted(by_problem[p], key=lambda item: _rank(item[1], item[2], target, dtype), reverse=True)
              for p in twins}
    while len(picks) < LIBRARY_CANDIDATES and any(ranked.values()):
        for name in twins:  # the best of each twin first, then the next of each
            if ranked[name] and len(picks) < LIBRARY_CANDIDATES:
                picks.append(ranked[name].pop(0)[0])
    return LibraryMatch(problem=info.name, how="twin", kernels=_entries(kb, picks), twins=twins)


def _waiting_twins(reference: ProblemReference, backend: str, known: dict[str, Any], *, exclude: str) -> list[str]:
    """Catalog problems whose reference computes this one's and whose seed is written but not
    yet verified on a GPU (so not in the knowledge base): the user is told the operation is
    covered and what one GPU run would unlock, rather than only that nothing matched."""
    folder = UNVERIFIED_SEEDS_DIR / backend
    names = sorted(p.stem for p in folder.glob("*.py")) if folder.is_dir() else []
    return [name for name in names if name in known and name != exclude and not reference.difference(known[name])]


def _no_twin_reason(backend: str, checked: list[str], other_interface: str) -> str:
    if not checked:
        return (f"no {backend} kernel in the library takes this problem's arguments"
                + (f" (nearest: {other_interface})" if other_interface else ""))
    return f"no {backend} kernel in the library computes this reference (checked: {', '.join(checked)})"


def _entries(kb: KnowledgeBase, ids: list[str]) -> list[LibraryKernel]:
    return [LibraryKernel(kb_id=e.id, problem=e.problem, target=e.target, dtype=e.dtype, source=e.source)
            for e in kb.kernels_by_id(ids)]


def match_suite(infos: list[ProblemInfo], kb: KnowledgeBase, *, backend: str,
                target: str | None = None) -> dict[str, LibraryMatch]:
    """``match_library`` for every problem of a suite; a problem whose reference fails to run
    is unserved with that reason (the run itself would fail the same way)."""

    found: dict[str, LibraryMatch] = {}
    for info in infos:
        try:
            found[info.name] = match_library(info, kb, backend=backend, target=target)
        except (ProblemError, UnknownProblemError) as exc:
            found[info.name] = LibraryMatch(problem=info.name, reason=str(exc))
    return found


__all__ = ["LIBRARY_CANDIDATES", "LibraryKernel", "LibraryMatch", "match_library", "match_suite",
           "problem_text"]
