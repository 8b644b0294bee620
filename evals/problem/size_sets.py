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
set (``ProblemInfo.cpu_sizes()``; for a KernelBench file, batch-like constants halved
further to :data:`CPU_TRIAL_BUDGET` while the axis a kernel walks keeps its length),
grown / shrunk / ones are made from it, and,
so that no size is only ever seen below its default:

* ``beyond_default``: for every constant the small set shrank, one set with that
  constant just past its *default* (grown as above, up to :data:`CPU_BEYOND_CAP`, or
  :data:`CPU_LONG_AXIS_CAP` for an axis a reduction runs along or the innermost one) and the others at
  their small values: a grid capped at the default row count, or an online softmax
  that never rescales, meets a size it was not written for.

On ``cuda`` the base is the default sizes plus every ``KGEN_EXTRA_SIZES`` set.

On either device the harness adds ``threshold`` sets made from the candidate's own code
(``evals/problem/threshold_sets.py``): one size just past each threshold it branches on.

Every size constant ``evals/problem/size_constants.py`` reads is a key here: a name
(``batch_size``, ``height`` of ``height = width = 256``) or one element of a
tuple or list (``input_shape[0]``, ``kernel_size[1]``). Never moved:

* the names in a problem's optional ``KGEN_FIXED_SIZES`` list (a head dim that
  must be even for a rotate-half RoPE); a tuple's name there fixes all its elements;
* constants that name an axis rather than a size (``dim = 1``, ``reduce_dim = 2``,
  ``sum_dim = 1``, ``axis = 0``, ``dim = [1, 2]``, ``dims = (0, 2)``: moving them
  asks a different question);
* a bound on values rather than a size (``hardtanh_max = 1``, ``clamp_min``);
* a 1 inside a tuple (``bias_shape = (out_channels, 1, 1)``, ``stride = (1, 1)``):
  a broadcast axis or a unit step, which a larger value turns into another problem;
* derived constants (``N = B * S``, ``groups = in_channels``, ``bias_shape[0]``
  above): recomputed from the free ones in every set returned here, so each set
  keeps the file's relations. A set that names a derived constant explicitly
  (``KGEN_EXTRA_SIZES``) overrides its expression.

The elements of one tuple move together (``kernel_size = (3, 3)`` grows to
``(5, 5)``, never ``(5, 3)``), as the one constant the file wrote; a fallback
moves one name, all its elements at once.

A made-up set is the verifier's guess: for a KernelBench file it may break a
relation the file never wrote down (channels divisible by groups). So a
:class:`SizeSet` says where it came from, and the verifier skips a generated set
whose *reference* fails to run (and says so), never rejecting the candidate for
it. A set that moves several constants at once carries ``fallbacks``: the same
move one constant at a time, tried when the combined set cannot run, so one
constant with a hidden relation does not hide every other one's move.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from kgen.backends.device import Device
from kgen.evals.problem.constant_names import MAX_AXIS_INDEX, is_axis_name, is_value_bound
from kgen.evals.problem.format import (
    ProblemError,
    ProblemInfo,
    consistent_sizes,
    flatten_outputs,
    load_problem,
)
from kgen.evals.problem.size_constants import base_name

#: On the CPU, a ``beyond_default`` set moves a constant past its default only up to these
#: values: the interpreter runs each program in Python, so a row count of 16384 costs minutes.
#: A long axis (one a reduction runs along, or the innermost one) is taken much further, since
#: its length costs loop iterations inside a program, not programs; past the caps only a GPU looks.
CPU_BEYOND_CAP = 1024
CPU_LONG_AXIS_CAP = 4096
#: On the CPU, a ``beyond_default`` set's inputs and outputs together hold at most this many
#: elements (the other constants give way; see :func:`within_cpu_budget`).
CPU_ELEMENT_BUDGET = 1 << 16
#: On the CPU, the small set of a KernelBench file without ``KGEN_SMALL_SIZES`` holds at most
#: this many input and output elements. Most of a verification's calls run at the small set
#: (every input distribution, the ghost check, the call sequence, the cache probe: about thirty),
#: and the interpreter's cost grows with the programs a launch starts and the steps each walks:
#: a scan written as one scalar step per element takes about 0.2 ms an element per call, so a
#: 128x128 small set made such a correct kernel outlast the time limit. Batch-like constants give
#: way first (:func:`within_cpu_budget`): the axis a kernel walks keeps its length, and the sets
#: that grow each constant past its default still meet capped grids and short rows.
CPU_TRIAL_BUDGET = 1 << 13
#: When constants are halved to fit a budget, an axis a kernel walks inside one program (a
#: reduction's, the innermost) is kept up to this many times longer than a batch-like one.
LONG_AXIS_PREFERENCE = 4

Origin = Literal["default", "extra", "small", "grown", "shrunk", "ones", "beyond_default", "threshold"]
GENERATED: frozenset[str] = frozenset({"grown", "shrunk", "ones", "beyond_default", "threshold"})


@dataclass(frozen=True)
class SizeSet:
    """One set of sizes to verify at, and where it came from."""

    sizes: dict[str, int]
    origin: Origin
    #: single-constant versions of a multi-constant move, tried if this set's reference cannot run
    fallbacks: tuple[dict[str, int], ...] = ()
    #: why this set is tried, told with a failure at it (a ``threshold`` set names the
    #: candidate's comparison it crosses)
    note: str = ""

    @property
    def generated(self) -> bool:
        """Made up by kgen rather than named by the problem: skip it if the reference fails."""
        return self.origin in GENERATED


def fixed_sizes(info: ProblemInfo) -> list[str]:
    """The problem's ``KGEN_FIXED_SIZES``: size keys a generated set must not move.

    A tuple's name stands for all its elements (``"kernel_size"`` fixes
    ``kernel_size[0]`` and ``kernel_size[1]``). A name that is neither a size
    constant nor a tuple of them is a ProblemError (a typo would silently fix nothing).
    """
    declared = info.fixed_sizes
    if not isinstance(declared, (list, tuple)) or not all(isinstance(n, str) for n in declared):
        raise ProblemError(f"{info.path}: KGEN_FIXED_SIZES must be a list of size constant names")
    unknown = sorted(n for n in declared if n not in info.sizes and not _elements(info, n))
    if unknown:
        raise ProblemError(
            f"{info.path}: KGEN_FIXED_SIZES names {', '.join(unknown)}, which are not size constants "
            f"(it has: {', '.join(info.sizes) or 'none'})"
        )
    return [k for n in declared for k in ([n] if n in info.sizes else _elements(info, n))]


def _elements(info: ProblemInfo, name: str) -> list[str]:
    """The keys of a tuple constant's elements (``input_shape[0]``, ...); empty for a plain name."""
    return [k for k in info.sizes if k != name and base_name(k) == name]


def free_size_names(info: ProblemInfo) -> list[str]:
    """Size constants assigned a literal (``SEQ = 2048``, ``HIDDEN = 4 * 1024``, ``input_shape[0]``
    of ``(32768,)``), not derived from another name (``N = B * S``): the ones a generated set may move."""
    derived = set(info.derived_sizes)
    return [k for k in info.sizes if k not in derived]


def is_axis_index(name: str, value: int, length: int = 1) -> bool:
    """``dim = 1`` names the axis a reduction runs over; ``dim = 16384`` is a size.

    ``name`` may be an element's key (``dims[1]``); an axis tuple of ``length``
    elements may name axes up to ``length - 1`` (a permutation of six axes).
    """
    return is_axis_name(base_name(name)) and 0 <= value <= max(MAX_AXIS_INDEX, length - 1)


def unmovable_reasons(info: ProblemInfo) -> dict[str, str]:
    """Why each size key a generated set leaves alone is left alone; keys absent here move."""
    fixed = set(fixed_sizes(info))
    derived = set(info.derived_sizes)
    reasons: dict[str, str] = {}
    for key, value in info.sizes.items():
        name = base_name(key)
        length = len(_elements(info, name)) if key != name else 1
        if key in fixed:
            reasons[key] = "fixed (KGEN_FIXED_SIZES)"
        elif key in derived:
            reasons[key] = "derived: follows the constants it is computed from"
        elif is_axis_index(key, value, length):
            reasons[key] = "axis index"
        elif is_value_bound(name):
            reasons[key] = "a bound on values, not a size"
        elif key != name and value == 1:
            reasons[key] = "a 1 in a tuple: broadcast axis or unit step"
    return reasons


def movable_sizes(info: ProblemInfo) -> list[str]:
    """The free size keys a generated set may move: not fixed, not an axis index, not a tuple's 1."""
    reasons = unmovable_reasons(info)
    return [k for k in free_size_names(info) if k not in reasons]


def grown_value(value: int) -> int:
    return value + 1 if value % 2 == 0 else value + 2


def shrunk_value(value: int) -> int:
    if value <= 1:
        return value
    return max(1, value - 1 if value % 2 == 0 else value - 2)


def _moved(base: Mapping[str, int], names: Iterable[str], move) -> dict[str, int]:
    return {**base, **{n: move(base[n]) for n in names}}


def _by_name(keys: Iterable[str]) -> list[list[str]]:
    """Keys grouped by the constant they belong to: a tuple's elements move as one."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(base_name(key), []).append(key)
    return list(groups.values())


def _generated_sets(info: ProblemInfo, base: Mapping[str, int], movable: list[str]) -> list[SizeSet]:
    """grown, shrunk and ones from ``base``, each with one-constant fallbacks."""
    sets = []
    for origin, move in (("grown", grown_value), ("shrunk", shrunk_value), ("ones", lambda v: 1)):
        names = [n for n in movable if move(base[n]) != base[n]]
        if not names:
            continue
        combined = _consistent(info, _moved(base, names, move))
        groups = _by_name(names)
        fallbacks = tuple(_consistent(info, _moved(base, g, move)) for g in groups) if len(groups) > 1 else ()
        sets.append(SizeSet(combined, origin, fallbacks))
    return sets


def _meta_shapes(info: ProblemInfo, sizes: Mapping[str, int]) -> tuple[int, int, int] | None:
    """(input elements, output elements, innermost length of the largest input) at ``sizes``,
    from the reference run on storage-less meta tensors; None when it cannot run there."""
    import torch

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


def within_cpu_budget(
    info: ProblemInfo, base: dict[str, int], movable: Iterable[str], budget: int = CPU_ELEMENT_BUDGET,
    long: set[str] | frozenset[str] = frozenset(),
) -> dict[str, int]:
    """``base`` with its movable constants halved until the inputs and outputs hold at most
    ``budget`` elements: capping each constant does not cap their product (a 3-D pooling
    problem at 128 per axis is a billion elements, hours in the interpreter).

    Each step halves the constant that is largest once the ``long`` axes count
    :data:`LONG_AXIS_PREFERENCE` times shorter (a tie goes to a batch-like one): a row keeps
    its length while the number of rows gives way, and no constant is driven to 1 while
    another is far longer."""
    names = [n for n in movable if n in base]
    for _ in range(64):
        shapes = _meta_shapes(info, base)
        if shapes is None or shapes[0] + shapes[1] <= budget:
            return base
        shrinkable = [n for n in names if base[n] > 1]
        if not shrinkable:
            return base
        largest = max(shrinkable, key=lambda n: (base[n] / (LONG_AXIS_PREFERENCE if n in long else 1), n not in long))
        base = _consistent(info, {**base, largest: base[largest] // 2})
    return base


def scaled_to_fit(info: ProblemInfo, base: Mapping[str, int], fits: Callable[[dict[str, int]], bool]) -> dict[str, int] | None:
    """``base`` with its movable constants halved until ``fits`` says yes; None when ``base``
    fits already or no halving does.

    Batch-like constants give way first: an axis a kernel walks inside one program (a
    reduction's length, the innermost axis) keeps its length, and with it the accumulation and
    the tiling a trial at the full size exercises; only when no other constant is left to
    halve do those shrink too."""
    sizes = dict(base)
    if fits(sizes):
        return None
    movable = [n for n in movable_sizes(info) if n in sizes]
    long = long_axes(info, sizes, movable)
    for _ in range(64):
        shrinkable = [n for n in movable if n not in long and sizes[n] > 1] or [n for n in movable if sizes[n] > 1]
        if not shrinkable:
            return None
        largest = max(shrinkable, key=lambda n: sizes[n])
        sizes = _consistent(info, {**sizes, largest: sizes[largest] // 2})
        if fits(sizes):
            return sizes
    return None


def _beyond_default(
    info: ProblemInfo, base: dict[str, int], name: str, cap: int, movable: list[str], long: set[str],
) -> dict[str, int]:
    """``base`` with ``name`` just past its default (up to ``cap``); the other constants give way
    (down to 1) to stay within :data:`CPU_ELEMENT_BUDGET`, and when that is not enough (sizes the
    file fixes in ``get_inputs()``: a 224x224 image), ``name`` itself stops short of the cap."""
    others = [n for n in movable if n != name and not _same_tuple(n, name)]
    value = grown_value(min(info.sizes[name], cap))
    while True:
        sizes = within_cpu_budget(info, _consistent(info, {**base, name: value}), others, long=long)
        shapes = _meta_shapes(info, sizes)
        if shapes is None or shapes[0] + shapes[1] <= CPU_ELEMENT_BUDGET or value // 2 <= base[name]:
            return sizes
        value = grown_value(value // 2)


def _same_tuple(a: str, b: str) -> bool:
    """Whether two keys are elements of one tuple constant (``shape[0]``, ``shape[1]``)."""
    return "[" in a and a.split("[", 1)[0] == b.split("[", 1)[0]


def long_axes(info: ProblemInfo, base: Mapping[str, int], movable: Iterable[str]) -> set[str]:
    """Constants whose length a kernel usually walks inside one program: an axis a reduction
    runs along (doubling it grows the inputs but not the outputs) or the innermost axis of the
    largest input. Found by running the reference on storage-less meta tensors."""

    def shapes(sizes: Mapping[str, int]) -> tuple[int, int, int] | None:
        return _meta_shapes(info, sizes)

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


def cpu_small_set(info: ProblemInfo) -> dict[str, int]:
    """The sizes a CPU verification compares every other set with (what `kgen problems show`
    calls the CPU sizes): the problem's own small set, or for a KernelBench file its sizes
    scaled down to :data:`CPU_TRIAL_BUDGET`."""
    return _cpu_small_set(info, movable_sizes(info))[0]


def _cpu_small_set(info: ProblemInfo, movable: list[str]) -> tuple[dict[str, int], set[str]]:
    """The CPU's small set and the axes a kernel walks at it (they keep their length)."""
    explicit = dict(info.small_sizes or {})
    halved = info.cpu_sizes()
    base = _consistent(info, {**{k: halved[k] for k in free_size_names(info)}, **explicit}, explicit)
    long = long_axes(info, base, movable)
    if not explicit:
        base = within_cpu_budget(info, base, movable, CPU_TRIAL_BUDGET, long)
    return base, long


def verification_size_plan(info: ProblemInfo, device: Device) -> list[SizeSet]:
    """Every size set to verify at, first the one the others are compared with.

    Each set is complete and consistent: derived constants (``N = B * S``) are
    recomputed from the free ones, unless a set names them explicitly.
    """
    movable = movable_sizes(info)
    if not device.is_gpu:
        explicit = bool(info.small_sizes)
        base, long = _cpu_small_set(info, movable)
        sets = [SizeSet(base, "small")]
        sets += _generated_sets(info, base, movable)
        for name in movable:
            if base[name] < info.sizes[name]:
                cap = CPU_LONG_AXIS_CAP if name in long else CPU_BEYOND_CAP
                grown = {**base, name: grown_value(min(info.sizes[name], cap))}
                # A problem's own small set is its author's budget; a KernelBench file's is kgen's.
                beyond = _consistent(info, grown) if explicit else _beyond_default(info, base, name, cap, movable, long)
                sets.append(SizeSet(beyond, "beyond_default"))
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


def verification_size_sets(info: ProblemInfo, device: Device) -> list[dict[str, int]]:
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
    kept = {k: v for k, v in rebound.items() if k in free or k in explicit}
    return {**consistent_sizes(info.path, {**kept, **explicit}), **explicit}
