"""The shipped problem catalog and name resolution (names, aliases, paths)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from kgen.errors import KgenUsageError
from kgen.evals.problem.format import ProblemInfo, read_problem

CATALOG_DIR = Path(__file__).resolve().parent / "problems"
#: the suffixes of a forward problem's name and its backward's: ``rmsnorm_forward`` is paired
#: with ``rmsnorm_backward`` (the one pairing rule; ``paired_backward``)
FORWARD_SUFFIX, BACKWARD_SUFFIX = "_forward", "_backward"
#: the function a backward problem file defines to take its inputs from its forward's
BACKWARD_INPUTS_FUNCTION = "kgen_backward_inputs"


class UnknownProblemError(KgenUsageError, LookupError):
    """A problem name that is neither a catalog entry nor an existing file."""


def normalise_name(text: str) -> str:
    """Fold case, spaces, dashes and underscores so 'RMSNorm bwd' meets 'rmsnorm_bwd'."""
    return re.sub(r"[\s_\-./]+", "", text.lower())


@lru_cache(maxsize=1)
def catalog() -> tuple[ProblemInfo, ...]:
    """Every problem shipped with kgen, sorted by name."""
    infos = [read_problem(p) for p in sorted(CATALOG_DIR.glob("*.py")) if not p.name.startswith("_")]
    return tuple(sorted(infos, key=lambda info: info.name))


def _index() -> dict[str, ProblemInfo]:
    index: dict[str, ProblemInfo] = {}
    for info in catalog():
        for key in (info.name, info.path.stem, *info.aliases):
            index.setdefault(normalise_name(key), info)
    return index


#: how alike a mistyped name and a real one must be (difflib's ratio over the folded names) to be
#: suggested: difflib's default, as kgen's other "did you mean"s use
CLOSE_RATIO = 0.6
#: the shortest typed text that suggests the names containing it ("relu" does, "re" does not)
SHORTEST_PART = 3


def close_names(typed: str, names: Iterable[str], limit: int = 3) -> list[str]:
    """The names someone who typed ``typed`` most likely meant, best first, for "did you mean"
    messages (a problem name, `kgen solve --only`): the one rule for suggesting a name.

    Folded as ``normalise_name`` folds them, a name that is the typed text comes first, then
    names that begin with it (``36_RMSNorm`` and ``36`` mean ``36_RMSNorm_``), then names that
    contain it; only where none does, close spellings (difflib ratio >= ``CLOSE_RATIO``: a typo),
    so that a look-alike (``35_GroupNorm_``) never follows the name meant. A name that shares no
    real part of the spelling is never suggested: listing whatever comes first, or the least
    unlike of unrelated names, reads as if kgen knew better.
    """
    key = normalise_name(typed)
    folded = {name: normalise_name(name) for name in names}
    found: list[str] = []

    def take(matches: Iterable[str]) -> None:
        found.extend(name for name in matches if name not in found)

    if key:
        take(name for name, text in folded.items() if text == key)
        take(name for name, text in folded.items() if text.startswith(key))
    if len(key) >= SHORTEST_PART:
        take(name for name, text in folded.items() if key in text)
    if not found:
        alike = sorted(((difflib.SequenceMatcher(None, key, text).ratio(), name) for name, text in folded.items()),
                       key=lambda pair: -pair[0])
        take(name for ratio, name in alike if ratio >= CLOSE_RATIO)
    return found[:limit]


def nearest_names(text: str, limit: int = 3) -> list[str]:
    """Catalog names loosely nearest to a free-text request (``agent.spec.catalog_matcher``: a
    description, which may share little spelling with any name). A mistyped *name* is answered
    by ``close_names``, which suggests nothing rather than something unrelated."""
    index = _index()
    keys = difflib.get_close_matches(normalise_name(text), list(index), n=limit * 3, cutoff=0.4)
    names: list[str] = []
    for key in keys:
        if index[key].name not in names:
            names.append(index[key].name)
    return names[:limit]


def resolve_problem(name_or_path: str | Path) -> ProblemInfo:
    """A catalog name or alias, or the path of a problem file (KernelBench files welcome)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise UnknownProblemError(f"problem file not found: {text}")
        return read_problem(path)
    found = _index().get(normalise_name(text))
    if found is None:
        spellings = {key: info.name for info in catalog() for key in (info.name, info.path.stem, *info.aliases)}
        hint = list(dict.fromkeys(spellings[key] for key in close_names(text, spellings, limit=6)))[:3]
        suffix = f"; did you mean {', '.join(hint)}?" if hint else ""
        raise UnknownProblemError(f"unknown problem '{text}'{suffix} (see `kgen problems list`)")
    return found


def paired_backward(forward: ProblemInfo) -> ProblemInfo | None:
    """The catalog's backward problem of a forward one, or None.

    One rule: a problem named ``<op>_forward`` (``KGEN_KIND`` "forward") is paired with the
    catalog problem ``<op>_backward`` (kind "backward") when that file defines
    ``kgen_backward_inputs(grad_out, inputs, init_inputs)``, which makes the backward's inputs
    from the forward's gradient, inputs and init inputs. Its outputs are the gradients of the
    forward's floating-point tensor inputs, in their order. ``kgen export`` registers autograd
    through this pair; a forward without one (swiglu, softmax) exports without a backward.
    """
    if forward.kind != "forward" or not forward.name.endswith(FORWARD_SUFFIX):
        return None
    found = _index().get(normalise_name(forward.name.removesuffix(FORWARD_SUFFIX) + BACKWARD_SUFFIX))
    if found is None or found.kind != "backward" or f"def {BACKWARD_INPUTS_FUNCTION}(" not in found.path.read_text():
        return None
    return found
