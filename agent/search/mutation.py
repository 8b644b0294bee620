"""Offline mutation: retune a known-good kernel's launch and tiling knobs for a target.

Without an LLM, kgen still improves on the knowledge base's best kernel by
moving the numbers a person would tune by hand: ``num_warps``, ``num_stages``,
block sizes, group sizes, rows per program, programs per SM. The kernel's
backend finds them (``Backend.find_tunables``; Triton's finder is
``backends/triton/tunables.py``) on the syntax tree, never by pattern-matching
text; every function here takes the ``backend`` that wrote the source. A change
replaces exactly the source span of one literal (or one launch argument), so
the variant keeps the parent's comments and layout and its diff reads as the
tuning step it is.

Only literals and knobs move. A block size computed from the problem's sizes
(``triton.next_power_of_2(n_cols)`` for a kernel that keeps a whole row in
registers) is part of the kernel's correctness, not its speed, so it is never
touched; the verifier would reject such a variant anyway, but each candidate
costs a verification run. ``num_warps`` and ``num_stages`` only change how a
kernel is scheduled, never what it computes, so they may replace whatever
expression the parent used.
"""

from __future__ import annotations

import ast
import hashlib
import random
from collections.abc import Iterable

from pydantic import BaseModel

from kgen.backends.registry import DEFAULT_BACKEND, get_backend
from kgen.backends.targets import HardwareTarget
from kgen.backends.tunables import SourceSpan, Tunable, TunableKind, choices_for
from kgen.errors import KgenError

__all__ = [
    "MutationError", "SourceSpan", "Tunable", "TunableKind", "Variant", "apply_values", "choices_for",
    "describe_tunables", "find_tunables", "mutate", "parameter_space", "source_key", "space_size",
]

#: share of moves that change two knobs at once; most moves change one, so a
#: measured gain can be credited to a single knob
TWO_KNOB_MOVE_RATE = 0.25
#: a thread's registers: an fp32 matmul accumulator larger than this per thread spills
MAX_ACCUMULATOR_REGS_PER_THREAD = 256
#: Triton's default software-pipelining depth when a launch names none
DEFAULT_NUM_STAGES = {"nvidia": 3, "amd": 2}


class MutationError(KgenError, RuntimeError):
    """A rewrite produced source that no longer parses: a bug here, never the parent's fault."""


class Variant(BaseModel):
    """A mutated kernel source and what changed, for logs, prompts and the archive."""

    source: str
    #: tunable name -> (old value, new value), as source text
    changes: dict[str, tuple[str, str]]
    description: str
    #: ``source_key(source)``: what callers put in ``exclude`` once a variant is evaluated
    key: str


def source_key(source: str) -> str:
    """A hash of the source's syntax tree: equal for sources that differ only in
    comments or layout, so a variant is never evaluated twice under two spellings."""
    try:
        text = ast.dump(ast.parse(source))
    except SyntaxError:
        text = source
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------
# Finding the knobs
# --------------------------------------------------------------------------------------


def find_tunables(
    source: str, target: HardwareTarget | None = None, backend: str = DEFAULT_BACKEND
) -> list[Tunable]:
    """Every knob of ``source`` in source order, with its choices for ``target``
    (no target: the widest choices any target allows), as ``backend`` finds them. No
    knobs, or source that does not parse: an empty list."""
    return get_backend(backend).find_tunables(source, target)


def describe_tunables(
    source: str, target: HardwareTarget | None = None, backend: str = DEFAULT_BACKEND
) -> str:
    """One line per knob: name, current value, line, choices; for logs and prompts."""
    tunables = find_tunables(source, target, backend)
    if not tunables:
        return "no tunable launch or tiling parameters found"
    lines = []
    for t in tunables:
        choices = ", ".join(str(c) for c in t.choices)
        lines.append(f"{t.name} = {t.value} (line {t.line}; try {choices})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Rewriting and mutating
# --------------------------------------------------------------------------------------


def apply_values(
    source: str,
    values: dict[str, int],
    target: HardwareTarget | None = None,
    backend: str = DEFAULT_BACKEND,
) -> str:
    """``source`` with the named knobs set to ``values``; an unknown name raises KeyError."""
    by_name = {t.name: t for t in find_tunables(source, target, backend)}
    edits = [(span, str(value)) for name, value in values.items() for span in by_name[name].spans]
    return _rewrite(source, edits)


def _rewrite(source: str, edits: Iterable[tuple[SourceSpan, str]]) -> str:
    """Replace exact spans (ast's UTF-8 byte columns), last first so earlier offsets hold."""
    data = source.encode()
    line_starts = [0]
    for line in data.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    ordered = sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True)
    for span, text in ordered:
        start = line_starts[span.lineno - 1] + span.col_offset
        end = line_starts[span.end_lineno - 1] + span.end_col_offset
        data = data[:start] + text.encode() + data[end:]
    result = data.decode()
    try:
        ast.parse(result)
    except SyntaxError as exc:
        raise MutationError(f"rewritten source no longer parses: {exc}") from exc
    return result


def mutate(
    source: str,
    target: HardwareTarget,
    *,
    n: int,
    rng: random.Random,
    exclude: set[str] | frozenset[str] = frozenset(),
    backend: str = DEFAULT_BACKEND,
) -> list[Variant]:
    """Up to ``n`` distinct variants of ``source`` retuned for ``target``.

    Most variants move one knob, so a timing difference names its cause; about
    one in four moves two, to step across knobs that only pay together (bigger
    tiles with more warps). Variants are distinct by :func:`source_key`, never
    the parent, never a key in ``exclude``, and never a matmul tiling that
    overflows the target's shared memory or a thread's registers. The same
    ``rng`` seed gives the same variants.
    """
    tunables = find_tunables(source, target, backend)
    if not tunables or n <= 0:
        return []
    seen = {source_key(source), *exclude}
    singles = [(t, v) for t in tunables for v in t.choices if v != t.value]
    rng.shuffle(singles)
    variants: list[Variant] = []
    budget = len(singles) + 8 * n + 16
    while len(variants) < n and budget > 0:
        budget -= 1
        move = _next_move(tunables, singles, rng)
        if move is None:
            break
        if _overlaps(move) or not _fits(tunables, move, target):
            continue
        variant = _variant(source, move)
        if variant.key in seen:
            continue
        seen.add(variant.key)
        variants.append(variant)
    return variants


def _next_move(
    tunables: list[Tunable], singles: list[tuple[Tunable, int]], rng: random.Random
) -> dict[str, tuple[Tunable, int]] | None:
    movable = [t for t in tunables if any(c != t.value for c in t.choices)]
    two_knob = len(movable) >= 2 and (rng.random() < TWO_KNOB_MOVE_RATE or not singles)
    if two_knob:
        pair = rng.sample(movable, 2)
        return {t.name: (t, rng.choice([c for c in t.choices if c != t.value])) for t in pair}
    if singles:
        tunable, value = singles.pop()
        return {tunable.name: (tunable, value)}
    return None


def _variant(source: str, move: dict[str, tuple[Tunable, int]]) -> Variant:
    edits = [(span, str(value)) for tunable, value in move.values() for span in tunable.spans]
    new_source = _rewrite(source, edits)
    changes = {name: (str(t.value), str(value)) for name, (t, value) in move.items()}
    description = "; ".join(f"{name} {old} -> {new}" for name, (old, new) in changes.items())
    return Variant(source=new_source, changes=changes, description=description, key=source_key(new_source))


def _overlaps(move: dict[str, tuple[Tunable, int]]) -> bool:
    """Two knobs whose spans nest (a literal inside a replaced expression) cannot move together."""
    spans = [span for tunable, _ in move.values() for span in tunable.spans]
    return any(a.overlaps(b) for i, a in enumerate(spans) for b in spans[i + 1 :])


def _fits(tunables: list[Tunable], move: dict[str, tuple[Tunable, int]], target: HardwareTarget) -> bool:
    """False for a matmul tiling that cannot run well on ``target``: its pipelined
    bf16 operand tiles overflow shared memory, or its fp32 accumulator overflows
    a thread's registers. Kernels without an M/N/K tiling always fit."""
    values = {t.name: t.value for t in tunables}
    values.update({name: value for name, (_, value) in move.items()})
    tiles: dict[str, int] = {}
    for t in tunables:
        value = values[t.name]
        if t.kind == "block" and t.axis and isinstance(value, int):
            if t.axis in tiles:
                return True  # two tilings in one source: no single estimate applies
            tiles[t.axis] = value
    if set(tiles) != {"m", "n", "k"}:
        return True
    stages = _first_int(values[t.name] for t in tunables if t.kind == "num_stages")
    warps = _first_int(values[t.name] for t in tunables if t.kind == "num_warps")
    stages = stages or DEFAULT_NUM_STAGES[target.vendor]
    warps = warps or 4
    shared_bytes = stages * (tiles["m"] * tiles["k"] + tiles["k"] * tiles["n"]) * 2
    if shared_bytes > target.shared_memory_per_sm_kb * 1024:
        return False
    accumulator_per_thread = tiles["m"] * tiles["n"] // (warps * target.warp_size)
    return accumulator_per_thread <= MAX_ACCUMULATOR_REGS_PER_THREAD


def _first_int(values: Iterable[int | str]) -> int | None:
    return next((v for v in values if isinstance(v, int)), None)


# --------------------------------------------------------------------------------------
# The whole parameter space (an exhaustive sweep's, to compare a search with)
# --------------------------------------------------------------------------------------


def parameter_space(
    source: str, target: HardwareTarget, backend: str = DEFAULT_BACKEND
) -> list[dict[str, int]]:
    """Every combination of ``source``'s knob choices for ``target`` that :func:`mutate`
    could also produce: the product of each knob's choices, in source order and ascending
    values (the last knob moving fastest), without the matmul tilings that overflow the
    target's shared memory or a thread's registers (the rule ``mutate`` applies).

    Each point names every knob and goes straight to :func:`apply_values`. A knob whose
    source span nests inside an earlier knob's (so the two cannot both be rewritten) stays
    out of the space at its current value. Block-size choices are relative to the current
    value (a quarter to four times it), so the space is the one around ``source``: a search
    that moves on from a variant can reach values outside it. No knobs: an empty list.
    """
    from itertools import product

    tunables: list[Tunable] = []
    for tunable in find_tunables(source, target, backend):
        spans = [span for kept in tunables for span in kept.spans]
        if not any(a.overlaps(b) for a in tunable.spans for b in spans):
            tunables.append(tunable)
    if not tunables:
        return []
    points = []
    for values in product(*(t.choices for t in tunables)):
        move = {t.name: (t, value) for t, value in zip(tunables, values, strict=True)}
        if _fits(tunables, move, target):
            points.append({t.name: value for t, value in zip(tunables, values, strict=True)})
    return points


def space_size(source: str, target: HardwareTarget, backend: str = DEFAULT_BACKEND) -> int:
    """How many configurations :func:`parameter_space` holds for ``source`` on ``target``."""
    return len(parameter_space(source, target, backend))
