"""The deterministic reader: a request sentence to a :class:`KernelSpec`, no model involved.

The request's words (``request_scan.py``) are matched against every catalog problem's name
and aliases: the most specific phrase wins, a close spelling counts half (and is noted), and
two problems matching equally well is an error that names both. The hardest job is
direction: "rmsnorm grad" and "rmsnorm" share every content word, so the words that say
backward or forward decide, and a request for the backward of an operation the catalog only
has forward is an error rather than a silently wrong kernel. Sizes the request names go onto
the problem's size constants, or are ignored with a note that says why.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from kgen.agent.spec.kernel_spec import Direction, KernelSpec, SpecError
from kgen.agent.spec.request_scan import (
    SIZE_GROUPS,
    TOKEN,
    ShapeHint,
    content_words,
    default_targets,
    read_request,
    request_direction,
)
from kgen.backends.registry import DEFAULT_BACKEND
from kgen.evals.problem.catalog import catalog, nearest_names, normalise_name
from kgen.evals.problem.format import ProblemError, ProblemInfo, read_problem

#: Content words too generic to report as "not used" when they go unmatched.
_FILLER = frozenset({"loss", "function", "activation", "operation", "fused", "layer", "module"})


@dataclass
class _Match:
    info: ProblemInfo
    score: float
    phrase: str
    covered: set[int]
    fuzzy: str = ""


def _phrases(info: ProblemInfo) -> list[tuple[str, ...]]:
    phrases: list[tuple[str, ...]] = []
    for raw in (info.name, info.path.stem, *info.aliases):
        words = tuple(content_words(TOKEN.findall(raw.lower())))
        if words and words not in phrases:
            phrases.append(words)
    return phrases


def _spans(words: list[str], longest: int) -> dict[str, list[int]]:
    """Every run of up to ``longest`` adjacent words, joined: "rms norm" meets "rmsnorm"."""
    spans: dict[str, list[int]] = {}
    for i in range(len(words)):
        for j in range(i + 1, min(len(words), i + longest) + 1):
            spans.setdefault("".join(words[i:j]), list(range(i, j)))
    return spans


def _score(info: ProblemInfo, words: list[str]) -> _Match:
    """Characters of the best phrase the request contains: specific phrases beat short ones.

    A phrase found as adjacent words counts in full, one whose words all occur
    in another order counts 0.9, so "embedding rmsnorm" outranks "rmsnorm".
    """
    every, units = _spans(words, len(words)), _spans(words, 3)
    best = _Match(info, 0.0, "", set())
    for phrase in _phrases(info):
        joined = "".join(phrase)
        if joined in every:
            found = _Match(info, float(len(joined)), " ".join(phrase), set(every[joined]))
        elif all(w in units for w in phrase):
            covered = {i for w in phrase for i in units[w]}
            found = _Match(info, 0.9 * len(joined), " ".join(phrase), covered)
        else:
            continue
        if found.score > best.score:
            best = found
    return best


def _fuzzy_score(info: ProblemInfo, words: list[str]) -> _Match:
    """Typos ("rmsnrom"): a close spelling counts half, and the reading is noted."""
    best = _Match(info, 0.0, "", set())
    for phrase in _phrases(info):
        joined = "".join(phrase)
        if len(joined) < 4:
            continue
        for typed, indices in _spans(words, 3).items():
            if len(typed) >= 4 and difflib.SequenceMatcher(None, typed, joined).ratio() >= 0.85:
                score = 0.5 * len(joined)
                if score > best.score:
                    best = _Match(info, score, " ".join(phrase), set(indices), fuzzy=typed)
    return best


def _no_match(text: str, words: list[str], extra: str = "", near: list[str] | None = None) -> SpecError:
    near = near or nearest_names(" ".join(words) or text, limit=3)
    near_text = ", ".join(near) if near else "none (see `kgen problems list`)"
    return SpecError(
        f"no catalog problem matches '{text.strip()}'{extra}; nearest: {near_text}; "
        "give --problem FILE or configure a model to write a new reference problem"
    )


def _match_problem(text: str, words: list[str], direction: Direction | None) -> tuple[ProblemInfo, list[str]]:
    notes: list[str] = []
    matches = [m for m in (_score(info, words) for info in catalog()) if m.score > 0]
    if not matches:
        matches = [m for m in (_fuzzy_score(info, words) for info in catalog()) if m.score > 0]
    if not matches:
        raise _no_match(text, words)
    preferred: Direction = direction or "forward"
    matches.sort(key=lambda m: (m.score, m.info.kind == preferred), reverse=True)
    top = matches[0].score
    if direction is not None:
        same = [m for m in matches if m.info.kind == direction]
        if not same or same[0].score < top:
            other = [m.info.name for m in matches if m.score == top]
            only = "backward" if direction == "forward" else "forward"
            raise _no_match(
                text, words, f" as a {direction} ({', '.join(other)} is {only} only)", near=other
            )
        matches = same
    best = matches[0]
    rivals = [m.info.name for m in matches[1:] if m.score == best.score and m.info.kind == best.info.kind]
    if rivals:
        names = ", ".join([best.info.name, *rivals])
        raise SpecError(f"'{text.strip()}' matches several catalog problems equally ({names}); name one")
    if best.fuzzy:
        notes.append(f"read '{best.fuzzy}' as '{best.phrase}'")
    if direction is None and best.info.kind == "backward":
        notes.append(f"no direction named and the catalog has {best.info.name} only as a backward")
    unused = [w for i, w in enumerate(words) if i not in best.covered and w not in _FILLER and not w.isdigit()]
    if unused:
        notes.append(f"words not used to choose {best.info.name}: {', '.join(unused)}")
    return best.info, notes


# --------------------------------------------------------------------------------------
# Shapes onto a problem's size constants
# --------------------------------------------------------------------------------------


def _size_for(name: str, sizes: dict[str, int]) -> tuple[str | None, str]:
    """The size constant a typed name means, or (None, why not)."""
    key = normalise_name(name)
    exact = [c for c in sizes if normalise_name(c) == key]
    if len(exact) == 1:
        return exact[0], ""
    group = next((g for g in SIZE_GROUPS if key in g), frozenset())
    found = [c for c in sizes if normalise_name(c) in group]
    if len(found) == 1:
        return found[0], ""
    if found:
        return None, f"it could be {' or '.join(found)}"
    return None, "no size constant has that name"


def apply_shapes(hints: list[ShapeHint], info: ProblemInfo) -> tuple[dict[str, int], list[str]]:
    """The request's sizes on the problem's size constants, and a note for each one that fits
    none (or fits ambiguously); a size that is not positive is an error."""
    shapes: dict[str, int] = {}
    notes: list[str] = []
    sizes = info.sizes
    have = f"{info.name} has {', '.join(sizes) or 'no size constants'}"
    for hint in hints:
        if hint.name is None:
            names = list(sizes)
            if len(hint.values) != len(names):
                notes.append(
                    f"ignored '{hint.text}': {len(hint.values)} numbers, but {info.name} has "
                    f"{len(names)} sizes ({', '.join(names)})"
                )
                continue
            if {normalise_name(n) for n in names} == {"m", "n", "k"}:
                notes.append(f"ignored '{hint.text}': M, N, K order is ambiguous; give M=.. N=.. K=..")
                continue
            shapes.update(zip(names, hint.values, strict=True))
            notes.append(f"read '{hint.text}' as {', '.join(f'{n}={v}' for n, v in zip(names, hint.values, strict=True))}")
            continue
        constant, why = _size_for(hint.name, sizes)
        if constant is None:
            notes.append(f"ignored '{hint.text}': {why} ({have})")
            continue
        shapes[constant] = hint.values[0]
    bad = [k for k, v in shapes.items() if v <= 0]
    if bad:
        raise SpecError(f"sizes must be positive: {', '.join(f'{k}={shapes[k]}' for k in bad)}")
    return shapes, notes


def _read_problem_file(problem_file: str) -> ProblemInfo:
    path = Path(problem_file).expanduser()
    if not path.is_file():
        raise SpecError(f"problem file not found: {problem_file}")
    try:
        return read_problem(path)
    except ProblemError as exc:
        raise SpecError(str(exc)) from exc


def parse_request(
    text: str, *, default_target: str | None = None, problem_file: str | None = None
) -> KernelSpec:
    """The deterministic matcher: a request sentence to a spec, no model involved.

    ``default_target`` is used (and noted) when the request names no GPU; the
    caller passes the local GPU's target, else ``DEFAULT_TARGET`` (backends/targets.py). With
    ``problem_file`` the operation comes from that file and the sentence only
    contributes backend, targets, dtypes and shapes.
    """
    text = text or ""
    if not text.strip() and problem_file is None:
        raise SpecError('empty request: say which kernel to write, e.g. "Triton RMSNorm backward for H100"')
    scan = read_request(text)
    words = content_words(TOKEN.findall(scan.rest))
    notes = list(scan.notes)
    if problem_file is not None:
        info = _read_problem_file(problem_file)
        problem, source = str(info.path), "problem_file"
    else:
        direction = request_direction(scan.rest)
        if not [w for w in words if not w.isdigit()]:
            raise SpecError(
                f"no catalog problem matches '{text.strip()}': it names no operation; say which "
                "kernel, e.g. 'RMSNorm backward' (see `kgen problems list`), give --problem FILE "
                "or configure a model to write a new reference problem"
            )
        info, match_notes = _match_problem(text, words, direction)
        notes += match_notes
        problem, source = info.name, "matcher"
    # a number in the problem file's name is its name (KernelBench's "19_ReLU"), not a size
    named = set(re.findall(r"\d+", Path(problem_file).stem)) if problem_file is not None else set()
    stray = [w for w in words if w.isdigit() and w not in named]
    if stray:
        notes.append(f"ignored the number(s) {', '.join(stray)}: name the size, e.g. HIDDEN=4096")
    shapes, shape_notes = apply_shapes(scan.shapes, info)
    notes += shape_notes
    targets = scan.targets
    if not targets:
        targets, note = default_targets(default_target)
        notes.append(note)
    return KernelSpec(
        request=text,
        problem=problem,
        operation=info.description or info.name,
        backend=scan.backends[0] if scan.backends else DEFAULT_BACKEND,
        targets=targets,
        dtypes=scan.dtypes,
        shapes=shapes,
        source=source,
        notes=notes,
    )


def catalog_entry(name: str) -> ProblemInfo | None:
    """The catalog problem with this exact name, file stem or alias (case and separators aside)."""
    key = normalise_name(name)
    for info in catalog():
        if key in {normalise_name(n) for n in (info.name, info.path.stem, *info.aliases)}:
            return info
    return None

