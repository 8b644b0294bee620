"""Which sizes a verifier tries: the defaults, the problem's extra sets, and a generated odd set.

A kernel hard-coded to the verifier's shapes (a grid computed for 4096
columns, a ``BLOCK`` that must divide the row) passes every trial at those
shapes. So besides the sizes a problem names, the verifier runs one set it
has never seen: every size constant of 16 or more moved to a nearby odd
value. Odd values above one are never powers of two and never multiples of
a block size, so the last block of every axis is partial and must be masked.

* ``cuda``: the default sizes, every ``KGEN_EXTRA_SIZES`` set (merged over the
  defaults), and the odd set generated from the defaults. Constants grow
  (``v -> v + 1`` for even ``v``, ``v + 2`` for odd): the tail block holds one or
  two elements, the case an off-by-one grid misses.
* ``cpu``: the small set (``ProblemInfo.cpu_sizes()``) and two odd sets generated
  from it: one shrunk (``v -> v - 1`` for even ``v``, ``v - 2`` for odd) and one
  grown by one or two, so the interpreter pays little more than for the small set
  and a launch sized for the small set is caught both ways.

Constants below 16 (kernel sizes, head counts, batch of 2) are left alone,
and so is every name in a problem's optional ``KGEN_FIXED_SIZES`` list (a
head dim that must be even for a rotate-half RoPE, or that real models only
use in multiples of 16). Only constants assigned a literal are moved;
constants derived from others (``N = B * S``) are recomputed from them in
every set returned here, so rebinding keeps them consistent (a plain
``{**info.sizes, **extra}`` would rebind ``N`` to its default while ``S`` changes).

A generated set is the verifier's guess: for a KernelBench file it may break
a relation the file never wrote down (channels divisible by groups). So a
:class:`SizeSet` says where it came from, and the verifier should skip a
generated set whose *reference* fails to run (and say so), never reject the
candidate for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from kgen.evals.problem import (
    _METADATA_PREFIX,
    ProblemError,
    ProblemInfo,
    _parse,
    _RebindSizes,
    _single_target,
    size_constants,
)

#: Size constants below this are structural (kernel sizes, head counts) and never moved.
MIN_PERTURBED = 16

Origin = Literal["default", "extra", "small", "odd"]


@dataclass(frozen=True)
class SizeSet:
    """One set of sizes to verify at, and where it came from."""

    sizes: dict[str, int]
    origin: Origin

    @property
    def generated(self) -> bool:
        """Made up by kgen rather than named by the problem: skip it if the reference fails."""
        return self.origin == "odd"


def fixed_sizes(info: ProblemInfo) -> list[str]:
    """The problem's ``KGEN_FIXED_SIZES``: size names a generated set must not move.

    A name that is not one of the problem's size constants is a ProblemError
    (a typo would silently fix nothing).
    """
    declared = info.fixed_sizes
    if not isinstance(declared, (list, tuple)) or not all(isinstance(n, str) for n in declared):
        raise ProblemError(f"{info.path}: KGEN_FIXED_SIZES must be a list of size constant names")
    unknown = sorted(set(declared) - set(info.sizes))
    if unknown:
        raise ProblemError(
            f"{info.path}: KGEN_FIXED_SIZES names {', '.join(unknown)}, which are not size constants "
            f"(it has: {', '.join(info.sizes) or 'none'})"
        )
    return list(declared)


def free_size_names(info: ProblemInfo) -> list[str]:
    """Size constants assigned a literal (``SEQ = 2048``, ``HIDDEN = 4 * 1024``), not
    derived from another name (``N = B * S``): the ones a generated set may move."""
    free = []
    for node in _parse(info.path).body:
        assigned = _single_target(node)
        if assigned is None or assigned[0].startswith(_METADATA_PREFIX) or assigned[0] not in info.sizes:
            continue
        if not any(isinstance(n, ast.Name) for n in ast.walk(assigned[1])):
            free.append(assigned[0])
    return free


def _odd_value(value: int, grow: bool) -> int:
    if grow:
        return value + 1 if value % 2 == 0 else value + 2
    return value - 1 if value % 2 == 0 else value - 2


def odd_sizes(
    base: Mapping[str, int],
    free: Iterable[str],
    fixed: Iterable[str] = (),
    grow: bool = True,
) -> dict[str, int]:
    """The free constants of ``base``, each of at least ``MIN_PERTURBED`` and not in
    ``fixed`` moved to a nearby odd value (growing or shrinking); the others as in
    ``base``. Derived constants are left out: recompute them (``_consistent``)."""
    fixed = set(fixed)
    out = {}
    for name in free:
        value = base[name]
        if value >= MIN_PERTURBED and name not in fixed:
            value = _odd_value(value, grow)
        out[name] = value
    return out


def verification_size_plan(info: ProblemInfo, device: str) -> list[SizeSet]:
    """Every size set to verify at, first the one the others are compared with.

    Each set is complete and consistent: derived constants (``N = B * S``) are
    recomputed from the free ones, unless a set names them explicitly.
    """
    free = free_size_names(info)
    if device == "cpu":
        explicit = dict(info.small_sizes or {})
        halved = info.cpu_sizes()
        base = _consistent(info, {**{k: halved[k] for k in free}, **explicit}, explicit)
        sets = [SizeSet(base, "small")]
    else:
        base = dict(info.sizes)
        sets = [SizeSet(base, "default")]
        sets += [SizeSet(_consistent(info, extra, extra), "extra") for extra in info.extra_sizes]
    odd = odd_sizes(base, free, fixed_sizes(info), grow=device != "cpu")
    sets.append(SizeSet(_consistent(info, odd), "odd"))
    if device == "cpu":
        # Also one element past the small sizes: a launch sized for the small set then
        # misses the tail (a shrunk set alone lets it write out of bounds unseen on a GPU).
        grown = odd_sizes(base, free, fixed_sizes(info), grow=True)
        sets.append(SizeSet(_consistent(info, grown), "odd"))
    unique: list[SizeSet] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for size_set in sets:
        key = tuple(sorted(size_set.sizes.items()))
        if key not in seen:
            seen.add(key)
            unique.append(size_set)
    return unique


def verification_size_sets(info: ProblemInfo, device: str) -> list[dict[str, int]]:
    """The sizes of :func:`verification_size_plan`, as ``load_problem`` takes them."""
    return [size_set.sizes for size_set in verification_size_plan(info, device)]


def _consistent(
    info: ProblemInfo, rebound: Mapping[str, int], explicit: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Every size constant after rebinding ``rebound``: derived constants recomputed
    from the rebound free ones (what ``load_problem`` will see), except the names a
    set gives explicitly."""
    explicit = dict(explicit or {})
    free = set(free_size_names(info))
    tree = _parse(info.path)
    _RebindSizes({k: v for k, v in rebound.items() if k in free or k in explicit}).visit(tree)
    return {**size_constants(tree), **explicit}
