"""Offline ``kgen solve``: which problems of the suite the library can serve, said before any run.

Without a model kgen writes no kernel; it verifies and tunes kernels its knowledge base already
holds. Before any problem runs, every selected problem is screened
(``agent/spec/library_match.py``: the knowledge base's kernels of the problem itself, or of a
catalog problem whose reference computes the same outputs; a few milliseconds of PyTorch per
problem, no kernel run). The suite says the outcome up front, one line per problem, and starts
runs only for problems with a candidate: a problem the library cannot serve costs no
verification time and has no run folder; its row in the table says why, in its own words.
"""

from __future__ import annotations

from collections.abc import Sequence

from kgen.agent.run_options import RunOptions, local_target
from kgen.agent.spec.library_match import LibraryMatch, match_suite
from kgen.backends.registry import DEFAULT_BACKEND
from kgen.backends.targets import DEFAULT_TARGET
from kgen.core.text import counted
from kgen.errors import KgenError
from kgen.evals.problem.format import ProblemInfo

#: what a person can do about the problems the library cannot serve (said once, not per row)
UNSERVED_HINT = ("a model writes kernels for them: `kgen config`, KGEN_MODELS or --model; "
                 "or verify your own kernel with `kgen eval`")


class LibraryScreenError(KgenError):
    """The knowledge base could not be opened for the screen (the message says why)."""


def screen_suite(infos: Sequence[ProblemInfo], template: RunOptions) -> dict[str, LibraryMatch]:
    """What the library offers each problem, for the run options' backend and first target."""
    from kgen.knowledge_base.errors import KnowledgeBaseError
    from kgen.knowledge_base.seeding import open_knowledge_base

    try:
        kb = open_knowledge_base(template.kb, embedding=template.kb_embedding)
    except KnowledgeBaseError as exc:
        raise LibraryScreenError(str(exc)) from exc
    target = template.targets[0] if template.targets else (local_target() or DEFAULT_TARGET)
    return match_suite(list(infos), kb, backend=template.backend or DEFAULT_BACKEND, target=target)


def screen_lines(matches: dict[str, LibraryMatch]) -> list[str]:
    """The up-front statement: a count, then one line per problem (served ones first)."""
    served = [m for m in matches.values() if m.served]
    unserved = [m for m in matches.values() if not m.served]
    head = (f"offline (no model): the library can serve {len(served)} of {counted(len(matches), 'problem')}; "
            "only those are run")
    lines = [head] + [f"  serves {m.line()}" for m in served]
    if unserved:
        lines.append(f"  not attempted ({UNSERVED_HINT}):")
        lines += [f"  - {m.problem}: {m.reason}" for m in unserved]
    return lines


__all__ = ["LibraryScreenError", "UNSERVED_HINT", "screen_lines", "screen_suite"]
