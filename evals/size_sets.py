"""Which sizes a verifier tries: the defaults, the problem's extra sets, and sets it makes up.

A kernel hard-coded to the verifier's shapes (a grid computed for 4096
columns, ``batch_size = 8`` programs, a grid capped at the default row count,
an online softmax that never rescales because no row was ever longer than one
block) passes every trial at those shapes. So besides the sizes a problem
names, the verifier moves **every** size constant, in at least one set each,
up, down and to 1:

* ``grown``: every constant to a nearby larger odd value (``v -> v + 1`` for even
  ``v``, ``v + 2`` for odd): odd values above one are never powers of two and never
  multiples of a block size, so the last block of every axis holds one or two
  elements, the case an off-by-one grid misses.
* ``shrunk``: every constant above one to a nearby smaller value (``v - 1`` / ``v - 2``).
* ``ones``: every constant set to 1 (a batch of one, a single row, a one-wide
  axis), where the reference allows it.

On the ``cpu`` the Triton interpreter is slow, so the base is the problem's small
set (``ProblemInfo.cpu_sizes()``), grown / shrunk / ones are made from it, and,
so that no size is only ever seen below its default:

* ``beyond_default``: for every constant the small set shrank, one set with that
  constant just past its *default* (grown as above, up to :data:`CPU_BEYOND_CAP`, or
  :data:`CPU_LONG_AXIS_CAP` for an axis a reduction runs along or the innermost one) and the others at
  their small values: a grid capped at the default row count, or an online softmax
  that never rescales, meets a size it was not written for.

On ``cuda`` the base is the default sizes plus every ``KGEN_EXTRA_SIZES`` set.

Never moved: the names in a problem's optional ``KGEN_FIXED_SIZES`` list (a head
dim that must be even for a rotate-half RoPE), and constants that name an axis
rather than a size (``dim = 1``, ``reduce_dim = 2``, ``axis = 0``: moving them asks
a different question). Only constants assigned a literal are moved; constants
derived from others (``N = B * S``) are recomputed from them in every set
returned here, so rebinding keeps them consistent.

A made-up set is the verifier's guess: for a KernelBench file it may break a
relation the file never wrote down (channels divisible by groups). So a
:class:`SizeSet` says where it came from, and the verifier skips a generated set
whose *reference* fails to run (and says so), never rejecting the candidate for
it. A set that moves several constants at once carries ``fallbacks``: the same
move one constant at a time, tried when the combined set cannot run, so one
constant with a hidden relation does not hide every other one's move.
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

#: Constants named like these and no larger than :data:`MAX_AXIS_INDEX` name an axis, not a size.
AXIS_NAMES = frozenset({"dim", "axis", "reduce_dim", "reduction_dim", "reduce_axis", "reduction_axis"})
MAX_AXIS_INDEX = 4

#: On the CPU, a ``beyond_default`` set moves a constant past its default only up to these
#: values: the interpreter runs each program in Python, so a row count of 16384 costs minutes.
#: A long axis (one a reduction runs along, or the innermost one) is taken much further, since
#: its length costs loop iterations inside a program, not programs; past the caps only a GPU looks.
CPU_BEYOND_CAP = 1024
CPU_LONG_AXIS_CAP = 4096

Origin = Literal["default", "extra", "small", "grown", "shrunk", "ones", "beyond_default"]
GENERATED: frozenset[str] = frozenset({"grown", "shrunk", "ones", "beyond_default"})


@dataclass(frozen=True)
class SizeSet:
    """One set of sizes to verify at, and where it came from."""

    sizes: dict[str, int]
    origin: Origin
    #: single-constant versions of a multi-constant move, tried if this set's reference cannot run
    fallbacks: tuple[dict[str, int], ...] = ()

    @property
    def generated(self) -> bool:
        """Made up by kgen rather than named by the problem: skip it if the reference fails."""
        return self.origin in GENERATED


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


def is_axis_index(name: str, value: int) -> bool:
    """``dim = 1`` names the axis a reduction runs over; ``dim = 16384`` is a size."""
    lowered = name.lower()
    named_like_axis = lowered in AXIS_NAMES or lowered.endswith(("_axis",))
    return named_like_axis and 0 <= value <= MAX_AXIS_INDEX


def movable_sizes(info: ProblemInfo) -> list[str]:
    """The free size constants a generated set may move: not fixed, not an axis index."""
    fixed = set(fixed_sizes(info))
    return [n for n in free_size_names(info) if n not in fixed and not is_axis_index(n, info.sizes[n])]


def grown_value(value: int) -> int:
    return value + 1 if value % 2 == 0 else value + 2


def shrunk_value(value: int) -> int:
    if value <= 1:
        return value
    return max(1, value - 1 if value % 2 == 0 else value - 2)


def _moved(base: Mapping[str, int], names: Iterable[str], move) -> dict[str, int]:
    return {**base, **{n: move(base[n]) for n in names}}


def _generated_sets(info: ProblemInfo, base: Mapping[str, int], movable: list[str]) -> list[SizeSet]:
    """grown, shrunk and ones from ``base``, each with one-constant fallbacks."""
    sets = []
    for origin, move in (("grown", grown_value), ("shrunk", shrunk_value), ("ones", lambda v: 1)):
        names = [n for n in movable if move(base[n]) != base[n]]
        if not names:
            continue
        combined = _consistent(info, _moved(base, names, move))
        fallbacks = tuple(_consistent(info, _moved(base, [n], move)) for n in names) if len(names) > 1 else ()
        sets.append(SizeSet(combined, origin, fallbacks))
    return sets


def long_axes(info: ProblemInfo, base: Mapping[str, int], movable: Iterable[str]) -> set[str]:
    """Constants whose length a kernel usually walks inside one program: an axis a reduction
    runs along (doubling it grows the inputs but not the outputs) or the innermost axis of the
    largest input. Found by running the reference on storage-less meta tensors."""
    import torch

    from kgen.evals.compare import flatten_outputs
    from kgen.evals.problem import load_problem

    def shapes(sizes: Mapping[str, int]) -> tuple[int, int, int] | None:
        try:
            problem = load_problem(info.path, _consistent(info, sizes))
            with torch.device("meta"):
                inputs = [v for v in problem.get_inputs() if isinstance(v, torch.Tensor)]
                outputs = flatten_outputs(problem.model_class(*problem.get_init_inputs())(*inputs))
        except Exception:  # noqa: BLE001 - a problem that cannot run on meta tensors: no answer
            return None
        if not inputs:
            return None
        largest = max(inputs, key=lambda v: v.numel())
        inner = largest.shape[-1] if largest.dim() else 1
        return sum(v.numel() for v in inputs), sum(v.numel() for v in outputs if isinstance(v, torch.Tensor)), inner

    found: set[str] = set()
    start = shapes(base)
    if start is None:
        return found
    for name in movable:
        doubled = shapes({**base, name: max(2, 2 * base[name])})
        if doubled is None:
            continue
        reduction = doubled[0] > start[0] and doubled[1] == start[1]
        if reduction or doubled[2] != start[2]:
            found.add(name)
    return found


def verification_size_plan(info: ProblemInfo, device: str) -> list[SizeSet]:
    """Every size set to verify at, first the one the others are compared with.

    Each set is complete and consistent: derived constants (``N = B * S``) are
    recomputed from the free ones, unless a set names them explicitly.
    """
    free = free_size_names(info)
    movable = movable_sizes(info)
    if device == "cpu":
        explicit = dict(info.small_sizes or {})
        halved = info.cpu_sizes()
        base = _consistent(info, {**{k: halved[k] for k in free}, **explicit}, explicit)
        sets = [SizeSet(base, "small")]
        sets += _generated_sets(info, base, movable)
        long = long_axes(info, base, movable)
        for name in movable:
            if base[name] < info.sizes[name]:
                cap = CPU_LONG_AXIS_CAP if name in long else CPU_BEYOND_CAP
                beyond = {**base, name: grown_value(min(info.sizes[name], cap))}
                sets.append(SizeSet(_consistent(info, beyond), "beyond_default"))
    else:
        base = dict(info.sizes)
        sets = [SizeSet(base, "default")]
        sets += [SizeSet(_consistent(info, extra, extra), "extra") for extra in info.extra_sizes]
        sets += _generated_sets(info, base, movable)
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
