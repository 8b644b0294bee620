"""The knobs of a CuTe DSL kernel module, for the offline search to retune.

A CuTe kernel's launch shape is decided in Python at trace time, usually from module-level
constants (``THREADS = 256``, ``ROWS_PER_CTA = 4``, ``TILE_N = 128``, ``STAGES = 4``, the
copy width in bits): the convention kgen's CuTe seeds follow and its prompts ask for. Only
such module-level integer literals with a name that reads as a knob are moved; a value
computed from the problem's sizes is correctness, not speed, and is never touched.
"""

from __future__ import annotations

import ast
import re

from kgen.backends.targets import HardwareTarget
from kgen.backends.tunables import SourceSpan, Tunable, TunableKind, choices_for

#: CUDA's limit on threads per block
MAX_THREADS = 1024
#: copy widths a vectorised global access may have (bits)
COPY_BITS = (32, 64, 128)
_PATTERNS: tuple[tuple[re.Pattern[str], TunableKind], ...] = (
    (re.compile(r"^(NUM_)?STAGES$|_STAGES$"), "num_stages"),
    (re.compile(r"^(NUM_)?THREADS(_PER_(BLOCK|CTA))?$|^BLOCK_THREADS$|^CTA_THREADS$"), "block"),
    (re.compile(r"^(TILE|BLOCK|CTA_TILE)_[MNK]$"), "block"),
    (re.compile(r"^ROWS_PER_(BLOCK|CTA|PROGRAM)$|^THREADS_PER_ROW$|^COLS_PER_THREAD$"), "count"),
    (re.compile(r"^(COPY|VECTOR|VEC)_BITS$|_COPY_BITS$"), "block"),
)


def _kind(name: str) -> TunableKind | None:
    for pattern, kind in _PATTERNS:
        if pattern.search(name):
            return kind
    return None


def _axis(name: str):
    return {"M": "m", "N": "n", "K": "k"}.get(name[-1]) if re.search(r"_[MNK]$", name) else None


def _choices(name: str, tunable: Tunable, target: HardwareTarget | None) -> list[int]:
    current = tunable.value
    if "BITS" in name:
        return [b for b in COPY_BITS if isinstance(current, int) and b <= max(current, 128)]
    values = choices_for(tunable, target)
    if "THREADS" in name and "ROW" not in name:
        minimum = target.warp_size if target is not None else 32
        values = [v for v in values if minimum <= v <= MAX_THREADS]
    return values


def find_tunables(source: str, target: HardwareTarget | None = None) -> list[Tunable]:
    """Every module-level knob constant in source order, with its choices for ``target``;
    an empty list for source that does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[Tunable] = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        value = node.value
        if not (name.isupper() and isinstance(value, ast.Constant) and type(value.value) is int and value.value > 0):
            continue
        kind = _kind(name)
        if kind is None:
            continue
        tunable = Tunable(name=name, kind=kind, value=value.value, spans=[SourceSpan.of(value)], axis=_axis(name))
        tunable.choices = _choices(name, tunable, target)
        if len(tunable.choices) > 1:
            found.append(tunable)
    return found
