"""Size sets just past the thresholds a candidate's code branches on.

The size plan (``size_sets.py``) moves every size constant, but on the CPU only up to a
few thousand columns and a thousand rows: a kernel that takes another path past 8192
columns (a split reduction that drops its last chunk, a bf16 partial sum) or 2048 rows (a
grid capped without a loop) is never run on that path. The static finder
(``evals/static_rules/size_thresholds.py``) names the integers the candidate compares sizes
with; :func:`threshold_size_sets` puts one trial just past each one the plan does not cross
already:

* the crossed size is an input dim: the finder traces the compared value to ``x.shape[-1]``,
  ``numel()``, a kernel parameter launched with ``n_rows``..., and the problem is run on
  storage-less meta tensors to see which size constant moves that dim (and how fast: a dim
  may be ``2 * C`` or ``C - k + 1``); an untraced value may be any dim;
* the set moves that one constant so the dim is past the threshold by about half of it
  (:func:`past_threshold`: ``8192 -> 12287``, all ones in binary below the top bit): past ``>`` and
  ``>=`` alike, odd, and for every power-of-two block up to ``T / 2`` it leaves a tail of
  almost a whole block, so a path that drops its last partial block loses a third of the row,
  not one element a tolerance would forgive (``T + 1`` leaves a tail of one); a dim that is
  a count of programs (rows, not a long axis) goes only :data:`PROGRAMS_PAST` further, since on
  the CPU each row is one more interpreter program;
  every other movable constant goes down to at most :data:`OTHER_AXES` (three rows, not
  one: a row offset wrong only on the other path needs more than one row to show), so one
  long row costs little; for a product (``numel() > T``) they go down to 1, so the element
  count itself is that odd, tail-heavy value;
* a dim the plan already takes past ``T`` needs no set; a product (``numel() > T``) is
  crossed once any plan set holds more than ``T`` elements in that input;
* the sets are bounded (:data:`MAX_THRESHOLD_SETS`), long axes first (a long row costs loop
  iterations, rows cost interpreter programs), then the smaller thresholds, and capped in
  length (:data:`CPU_LONG_CAP`, :data:`CPU_PROGRAM_CAP` on the CPU; a GPU takes them much
  further): past the caps only a GPU run looks.

They are ``generated`` sets: skipped, not failed, when the reference cannot run them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kgen.backends.device import Device
from kgen.evals.problem.format import ProblemInfo, load_problem
from kgen.evals.problem.size_sets import (
    SizeSet,
    _consistent,
    _same_tuple,
    grown_value,
    long_axes,
    movable_sizes,
)
from kgen.evals.problem.size_threshold import SizeThreshold, ThresholdAxis

#: at most this many threshold sets per evaluation (each is one trial of the plan)
MAX_THRESHOLD_SETS = 4
#: the other movable constants of a threshold set go down to at most this
OTHER_AXES = 3
#: on the CPU, a dim a kernel walks inside one program (a reduction's length, the innermost
#: axis) is taken up to this length, any other dim (rows: interpreter programs) up to the other
CPU_LONG_CAP = 1 << 19
CPU_PROGRAM_CAP = (1 << 12) + 64
#: how far past a threshold a program-count dim (rows) goes: :func:`past_threshold_in_programs`
PROGRAMS_PAST = 16
#: on a GPU the lengths are bounded by the memory plan of the verifier child; these keep a
#: threshold set from being larger than any real problem
GPU_LONG_CAP = 1 << 26
GPU_PROGRAM_CAP = 1 << 24
#: a threshold set's inputs together hold at most this many elements
CPU_ELEMENT_CAP = 1 << 22
GPU_ELEMENT_CAP = 1 << 30

Shapes = list[tuple[int, ...]]


def threshold_size_sets(
    info: ProblemInfo, plan: Sequence[SizeSet], thresholds: Sequence[SizeThreshold], device: Device
) -> list[SizeSet]:
    """A few size sets, each just past one of ``thresholds`` that no set of ``plan`` crosses."""
    if not thresholds or not plan:
        return []
    base = dict(plan[0].sizes)
    movable = [n for n in movable_sizes(info) if n in base]
    base_shapes = input_shapes(info, base)
    if base_shapes is None or not movable:
        return []
    planned = [s for s in (input_shapes(info, p.sizes) for p in plan) if s is not None]
    slopes = dim_slopes(info, base, base_shapes, movable)
    long = long_axes(info, base, movable)
    candidates: list[tuple[tuple[int, int, int], SizeSet]] = []
    for threshold in thresholds:
        for name, product in _constants_to_move(threshold, base_shapes, planned, slopes, long):
            made = _past(info, base, base_shapes, movable, slopes[name], name, threshold, device, name in long, product)
            if made is not None:
                rank = (0 if threshold.axes else 1, 0 if name in long else 1, threshold.value)
                candidates.append((rank, made))
    chosen: list[SizeSet] = []
    seen = {tuple(sorted(p.sizes.items())) for p in plan}
    for _, size_set in sorted(candidates, key=lambda c: c[0]):
        key = tuple(sorted(size_set.sizes.items()))
        if key not in seen and len(chosen) < MAX_THRESHOLD_SETS:
            seen.add(key)
            chosen.append(size_set)
    return chosen


def past_threshold(value: int) -> int:
    """The size a threshold set reaches for a threshold ``value``: about one and a half times it,
    odd (``8192 -> 12287``, ``16 -> 23``)."""
    past = value + max(1, value // 2 - 1)
    return past if past % 2 else past + 1


def past_threshold_in_programs(value: int) -> int:
    """For a dim that is a program count (rows), a few past the threshold is enough (rows a capped
    grid never reaches show as unwritten output) and each one more is an interpreter program."""
    return grown_value(value + PROGRAMS_PAST)


def input_shapes(info: ProblemInfo, sizes: Mapping[str, int]) -> Shapes | None:
    """The shapes of ``get_inputs()`` at ``sizes`` (``()`` for a non-tensor), made on storage-less
    meta tensors; None when the problem cannot make them there."""
    import torch

    try:
        problem = load_problem(info.path, _consistent(info, sizes))
        with torch.device("meta"):
            inputs = problem.get_inputs()
    except Exception:  # noqa: BLE001 - a problem that cannot build meta inputs: no answer
        return None
    return [tuple(v.shape) if isinstance(v, torch.Tensor) else () for v in inputs]


#: (input, dim) -> (length at the base, growth per unit of the constant)
Slopes = dict[tuple[int, int], tuple[int, float]]


def dim_slopes(info: ProblemInfo, base: Mapping[str, int], base_shapes: Shapes, movable: Sequence[str]) -> dict[str, Slopes]:
    """For each movable constant, the input dims it moves and how fast (from doubling it)."""
    found: dict[str, Slopes] = {}
    for name in movable:
        step = max(1, base[name])
        moved = input_shapes(info, {**base, name: base[name] + step})
        slopes: Slopes = {}
        if moved is not None and len(moved) == len(base_shapes):
            for i, (before, after) in enumerate(zip(base_shapes, moved, strict=True)):
                if len(before) != len(after):
                    continue
                for d, (a, b) in enumerate(zip(before, after, strict=True)):
                    if b > a:
                        slopes[(i, d)] = (a, (b - a) / step)
        found[name] = slopes
    return found


def _pairs(axis: ThresholdAxis, shapes: Shapes) -> set[tuple[int, int]]:
    """The (input, dim) pairs an axis may name; every tensor's every dim for an unknown one."""
    inputs = [axis.input] if axis.input is not None and 0 <= axis.input < len(shapes) else range(len(shapes))
    pairs = set()
    for i in inputs:
        rank = len(shapes[i])
        if axis.dim is None or axis.product or axis.input is None:
            pairs |= {(i, d) for d in range(rank)}
        elif -rank <= axis.dim < rank:
            pairs.add((i, axis.dim % rank))
    return pairs


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def _constants_to_move(
    threshold: SizeThreshold, base_shapes: Shapes, planned: list[Shapes], slopes: dict[str, Slopes], long: set[str]
) -> list[tuple[str, bool]]:
    """The constants whose move crosses ``threshold`` where the plan does not: one per dim the
    plan leaves below it, long axes first; one only for a product."""
    value = threshold.value
    order = sorted(slopes, key=lambda n: (n not in long, n))
    wanted: list[tuple[str, bool]] = []
    for axis in threshold.axes or (ThresholdAxis(),):
        pairs = _pairs(axis, base_shapes)
        if axis.product:
            inputs = {i for i, _ in pairs}
            if any(_numel(s[i]) > value for s in planned for i in inputs if i < len(s)):
                continue
            # one constant is enough, but a long one may be past its cap: the next one is kept too
            wanted += [(n, True) for n in order if set(slopes[n]) & pairs][:2]
            continue
        open_pairs = {
            (i, d) for i, d in pairs
            if not any(i < len(s) and d < len(s[i]) and s[i][d] > value for s in planned)
        }
        for name in order:
            if set(slopes[name]) & open_pairs:
                wanted.append((name, False))
                open_pairs -= set(slopes[name])
    return list(dict.fromkeys(wanted))


def _past(
    info: ProblemInfo,
    base: Mapping[str, int],
    base_shapes: Shapes,
    movable: Sequence[str],
    slopes: Slopes,
    name: str,
    threshold: SizeThreshold,
    device: Device,
    is_long: bool,
    product: bool,
) -> SizeSet | None:
    """``base`` with ``name`` moved so the dim it drives (for a ``product``, its input's element
    count) is just past the threshold and the others small; None when that is past the device's
    caps or the reference cannot make the inputs."""
    crossing = past_threshold(threshold.value) if is_long or product else past_threshold_in_programs(threshold.value)
    long_cap, program_cap, element_cap = (
        (GPU_LONG_CAP, GPU_PROGRAM_CAP, GPU_ELEMENT_CAP) if device.is_gpu else (CPU_LONG_CAP, CPU_PROGRAM_CAP, CPU_ELEMENT_CAP)
    )
    if not slopes:
        return None
    # a product is crossed on one long axis alone, the others at 1: its element count is then
    # the odd, tail-heavy value itself (three rows times a column count may be a multiple of a block)
    small_value = 1 if product else OTHER_AXES
    others = {n: min(base[n], small_value) for n in movable if n != name and not _same_tuple(n, name)}
    small = _consistent(info, {**base, **others})
    small_shapes = input_shapes(info, small) or base_shapes
    (i, d), (_, slope) = max(slopes.items(), key=lambda item: item[1][1])
    length = small_shapes[i][d]
    # a product is crossed once the dim times the rest of the input's (small) dims is past it
    rest = max(1, _numel(small_shapes[i]) // max(1, length)) if product else 1
    target = -(-crossing // rest)
    if target > (long_cap if is_long else program_cap) or slope <= 0:
        return None
    value = int(base[name] + max(1, -(-(target - length) // slope)))
    for _ in range(4):
        sizes = _consistent(info, {**small, name: value})
        shapes = input_shapes(info, sizes)
        if shapes is None:
            return None
        reached = _numel(shapes[i]) if product else shapes[i][d]
        if reached > threshold.value:
            break
        value = grown_value(value + max(1, int((target - shapes[i][d]) / slope)))
    else:
        return None
    if sum(_numel(s) for s in shapes) > element_cap:
        return None
    note = f"past the size threshold {threshold.describe()}: {name} = {sizes[name]}"
    return SizeSet(sizes, "threshold", note=note)
