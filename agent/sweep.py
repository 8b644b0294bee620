"""The ``sweep`` operator: systematic points of a kernel's tunable space, no model needed.

When every untried point of the parent's space fits in the slots given, the sweep
is exhaustive: the search then knows the space's best for certain. Otherwise it is
a coordinate search: one knob's whole line (every value, the others held) before
the next knob's, so a generation measures each knob's effect cleanly and the next
generation continues from the new best. On smooth spaces such as launch
parameters this reaches the best region in a small share of an exhaustive sweep
(``scripts/search_vs_sweep.py`` measures how small).
"""

from __future__ import annotations

from kgen.agent.mutation import Variant, apply_values, find_tunables, parameter_space, source_key
from kgen.backends.targets import HardwareTarget

#: enumerate spaces up to this many points (building a point's source takes about a millisecond)
MAX_ENUMERATED = 4096


def _point_variant(source: str, current: dict[str, int | str], values: dict[str, int],
                   target: HardwareTarget) -> Variant:
    changes = {name: (str(current[name]), str(value)) for name, value in values.items()
               if str(current[name]) != str(value)}
    new_source = apply_values(source, {name: values[name] for name in changes}, target)
    description = "sweep: " + "; ".join(f"{name} {old} -> {new}" for name, (old, new) in changes.items())
    return Variant(source=new_source, changes=changes, description=description, key=source_key(new_source))


def sweep_points(source: str, target: HardwareTarget, *, n: int, exclude: set[str] | frozenset[str] = frozenset()
                 ) -> list[Variant]:
    """Up to ``n`` untried points: the whole remaining space when it fits in ``n``, else the
    parent's knob lines in order (each knob through all its values, the others held)."""
    tunables = find_tunables(source, target)
    if not tunables or n <= 0:
        return []
    current = {t.name: t.value for t in tunables}
    seen = {source_key(source), *exclude}
    space: list[dict[str, int]] | None = None
    size = 1
    for tunable in tunables:
        size *= max(len(tunable.choices), 1)
    if size <= MAX_ENUMERATED:
        space = parameter_space(source, target)
        remaining = []
        for point in space:
            if any(str(point[name]) != str(current[name]) for name in point):
                variant = _point_variant(source, current, point, target)
                if variant.key not in seen:
                    remaining.append(variant)
        if len(remaining) <= n:
            return remaining
    keys = set(space[0]) if space else set()
    allowed = {tuple(sorted(p.items())) for p in space or []}
    variants: list[Variant] = []
    for tunable in tunables:
        for value in tunable.choices:
            if str(value) == str(tunable.value):
                continue
            if tunable.name in keys:
                point = {k: (value if k == tunable.name else current[k]) for k in keys}
                # a knob whose current value is an expression is on no grid point; a move of
                # another knob is then allowed as long as the space has a point like it
                if all(isinstance(v, int) for v in point.values()) and tuple(sorted(point.items())) not in allowed:
                    continue
            variant = _point_variant(source, current, {tunable.name: value}, target)
            if variant.key in seen:
                continue
            seen.add(variant.key)
            variants.append(variant)
            if len(variants) >= n:
                return variants
    return variants
