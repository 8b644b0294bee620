"""The ``sweep`` operator: systematic points of a kernel's tunable space, no model needed.

When every untried point of the parent's space fits in the slots given, the sweep
is exhaustive: the search then knows the space's best for certain. Otherwise it is
a pattern search: single-knob moves, every knob in turn, its values 1, 2, 4, ...
choices away first, so a generation measures each knob's direction and range and the
next generation refines around the new best. On smooth spaces such as launch
parameters this reaches the best region in a small share of an exhaustive sweep
(``scripts/search_vs_sweep.py`` measures how small).
"""

from __future__ import annotations

from kgen.agent.search.mutation import (
    Tunable,
    Variant,
    apply_values,
    find_tunables,
    parameter_space,
    source_key,
)
from kgen.backends.registry import DEFAULT_BACKEND
from kgen.backends.targets import HardwareTarget

#: enumerate spaces up to this many points (building a point's source takes about a millisecond)
MAX_ENUMERATED = 4096


def _point_variant(source: str, current: dict[str, int | str], values: dict[str, int],
                   target: HardwareTarget, backend: str) -> Variant:
    changes = {name: (str(current[name]), str(value)) for name, value in values.items()
               if str(current[name]) != str(value)}
    new_source = apply_values(source, {name: values[name] for name in changes}, target, backend)
    description = "sweep: " + "; ".join(f"{name} {old} -> {new}" for name, (old, new) in changes.items())
    return Variant(source=new_source, changes=changes, description=description, key=source_key(new_source))


def sweep_points(source: str, target: HardwareTarget, *, n: int, exclude: set[str] | frozenset[str] = frozenset(),
                 measured: dict[str, float] | None = None, backend: str = DEFAULT_BACKEND) -> list[Variant]:
    """Up to ``n`` untried points: the whole remaining space when it fits in ``n``, else the
    combination of each knob's best value measured so far (``measured``: source -> time on the
    target, for kernels of this family), then single-knob moves of the parent, every knob in
    turn, 1, 2, 4, ... choices away first. ``backend``: the one that wrote ``source``."""
    tunables = find_tunables(source, target, backend)
    if not tunables or n <= 0:
        return []
    current = {t.name: t.value for t in tunables}
    seen = {source_key(source), *exclude}
    space = _space(source, tunables, target, backend)
    family = _family(tunables, measured or {}, target, backend)
    combined = _best_per_knob(family, space)
    first: list[Variant] = []
    for point in ([combined] if combined is not None else []) + _extensions(tunables, family, space):
        if len(first) >= n or not any(str(point[k]) != str(current[k]) for k in point):
            continue
        variant = _point_variant(source, current, point, target, backend)
        if variant.key not in seen:
            seen.add(variant.key)
            first.append(variant)
    return first + _moves(source, tunables, current, target, space, n=n - len(first), seen=seen,
                          backend=backend)


def _family(tunables: list[Tunable], measured: dict[str, float], target: HardwareTarget, backend: str
            ) -> list[tuple[dict[str, int], float]]:
    """The measured kernels with the parent's knobs: (their integer knob values, time)."""
    names = [t.name for t in tunables]
    rows = []
    for other, time in measured.items():
        values = {t.name: t.value for t in find_tunables(other, target, backend)}
        if list(values) == names and time > 0:
            rows.append(({k: v for k, v in values.items() if isinstance(v, int)}, time))
    return rows


def _extensions(tunables: list[Tunable], rows: list[tuple[dict[str, int], float]],
                space: list[dict[str, int]] | None) -> list[dict[str, int]]:
    """Pattern search's expansion step: where the fastest kernel so far sits at the edge of the
    values tried for a knob, the next value beyond it (the others as in that kernel). A model
    fitted on tried values cannot say anything about untried ones; a trend at the edge can."""
    if not rows:
        return []
    best, _ = min(rows, key=lambda row: row[1])
    allowed = None if space is None else {tuple(sorted(p.items())) for p in space}
    points = []
    for tunable in tunables:
        value = best.get(tunable.name)
        if value is None or value not in tunable.choices:
            continue
        tried = sorted({row[tunable.name] for row, _ in rows if tunable.name in row})
        index = tunable.choices.index(value)
        steps = ([1] if value == tried[-1] else []) + ([-1] if value == tried[0] else [])
        for step in steps:
            if 0 <= index + step < len(tunable.choices):
                point = {**best, tunable.name: tunable.choices[index + step]}
                if allowed is None or tuple(sorted(point.items())) in allowed:
                    points.append(point)
    return points


def _space(source: str, tunables: list[Tunable], target: HardwareTarget, backend: str
           ) -> list[dict[str, int]] | None:
    """The parent's whole space when it is small enough to enumerate, else None."""
    size = 1
    for tunable in tunables:
        size *= max(len(tunable.choices), 1)
    return parameter_space(source, target, backend) if size <= MAX_ENUMERATED else None


def _best_per_knob(family: list[tuple[dict[str, int], float]], space: list[dict[str, int]] | None
                   ) -> dict[str, int] | None:
    """The untried point an additive model of the measured times predicts fastest.

    Launch knobs interact little, so log(time) is close to a sum of one term per knob value;
    a ridge least-squares fit over the kernels of this family measured so far (those with the
    parent's knobs) predicts every point of the space, and the best prediction is tried first:
    after one round of single-knob moves it combines each knob's best value (a crossover of
    tunables, no model needed), and later rounds correct it with what was measured.
    """
    import numpy as np

    rows = [values for values, _ in family]
    times = [time for _, time in family]
    columns = sorted({(k, v) for row in rows for k, v in row.items()})
    if not space or len(rows) < 3 or len({k for k, _ in columns}) < 2:
        return None  # too little to fit, or one knob: its line is the search already
    index = {c: i for i, c in enumerate(columns)}

    def features(point: dict[str, int]) -> np.ndarray:
        x = np.zeros(len(columns) + 1)
        x[-1] = 1.0
        for item in point.items():
            if item in index:
                x[index[item]] = 1.0
        return x

    x = np.stack([features(r) for r in rows])
    y = np.log(np.asarray(times))
    weights = np.linalg.solve(x.T @ x + 1e-3 * np.eye(x.shape[1]), x.T @ y)
    # only the knobs the measurements say something about move; the others keep the parent's
    observed = sorted({k for k, _ in columns})
    tried = {tuple(sorted(r.items())) for r in rows}
    candidates = {tuple((k, p[k]) for k in observed if k in p) for p in space}
    candidates = {c for c in candidates if c not in tried and len(c) == len(observed)}
    if not candidates:
        return None
    return dict(min(sorted(candidates), key=lambda c: float(features(dict(c)) @ weights)))


def _moves(source: str, tunables: list[Tunable], current: dict[str, int | str], target: HardwareTarget,
           space: list[dict[str, int]] | None, *, n: int, seen: set[str], backend: str) -> list[Variant]:
    if n <= 0:
        return []
    if space is not None:
        remaining = []
        for point in space:
            if any(str(point[name]) != str(current[name]) for name in point):
                variant = _point_variant(source, current, point, target, backend)
                if variant.key not in seen:
                    remaining.append(variant)
        if len(remaining) <= n:
            return remaining
    keys = set(space[0]) if space else set()
    allowed = {tuple(sorted(p.items())) for p in space or []}
    variants: list[Variant] = []
    for tunable, value in _pattern_moves(tunables):
        if tunable.name in keys:
            point = {k: (value if k == tunable.name else current[k]) for k in keys}
            # a knob whose current value is an expression is on no grid point; a move of
            # another knob is then allowed as long as the space has a point like it
            if all(isinstance(v, int) for v in point.values()) and tuple(sorted(point.items())) not in allowed:
                continue
        variant = _point_variant(source, current, {tunable.name: value}, target, backend)
        if variant.key in seen:
            continue
        seen.add(variant.key)
        variants.append(variant)
        if len(variants) >= n:
            break
    return variants


def _pattern_moves(tunables: list[Tunable]) -> list[tuple[Tunable, int]]:
    """Single-knob moves, every knob in turn: each knob's values 1, 2, 4, ... choices away
    (nearer first), then the ones between (a pattern search). A few evaluations show every
    knob's direction and range, and the next generation, from the new best, refines."""
    def distance_order(tunable: Tunable) -> list[int]:
        values = list(tunable.choices)
        here = values.index(tunable.value) if tunable.value in values else None
        if here is None:  # an expression: no position on the line, try values middle-out
            middle = len(values) // 2
            return sorted(values, key=lambda v: abs(values.index(v) - middle))
        others = [v for v in values if v != tunable.value]
        # geometric steps first (1, 2, 4, ... choices away, nearer first): a few evaluations
        # span the whole line; the next generation refines around the best of them
        geometric = sorted((v for v in others if abs(values.index(v) - here) & (abs(values.index(v) - here) - 1) == 0),
                           key=lambda v: (abs(values.index(v) - here), values.index(v) < here))
        return geometric + sorted((v for v in others if v not in geometric), key=lambda v: abs(values.index(v) - here))

    lines = [[(t, v) for v in distance_order(t)] for t in tunables]
    return [move for step in range(max((len(line) for line in lines), default=0))
            for line in lines if step < len(line) for move in [line[step]]]
