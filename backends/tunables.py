"""What a kernel's tunable knobs are, whatever the backend that found them.

A backend finds the knobs of a kernel source (``Backend.find_tunables``: Triton reads its
launches and ``tl.constexpr`` block sizes in ``backends/triton/tunables.py``); the offline
search (``agent/search/mutation.py``) moves them without knowing which backend wrote the kernel.
These models and the generic choice rules are all the two share, so this module imports
no toolchain.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kgen.backends.targets import HardwareTarget

TunableKind = Literal["num_warps", "num_stages", "block", "group", "count", "programs_per_sm"]


class SourceSpan(BaseModel):
    """Where one rewritable expression sits: ast positions (1-based lines, UTF-8 byte columns)."""

    model_config = ConfigDict(frozen=True)

    lineno: int
    col_offset: int
    end_lineno: int
    end_col_offset: int

    @classmethod
    def of(cls, node: ast.expr) -> SourceSpan:
        assert node.end_lineno is not None and node.end_col_offset is not None
        return cls(
            lineno=node.lineno,
            col_offset=node.col_offset,
            end_lineno=node.end_lineno,
            end_col_offset=node.end_col_offset,
        )

    def overlaps(self, other: SourceSpan) -> bool:
        return (self.lineno, self.col_offset) < (other.end_lineno, other.end_col_offset) and (
            other.lineno,
            other.col_offset,
        ) < (self.end_lineno, self.end_col_offset)


class Tunable(BaseModel):
    """One knob of a kernel source: its current value and every span that must change with it.

    A knob usually has one span. A block size written as the same literal in
    a launch argument and in that launch's grid has two: both move together,
    or the grid would stop covering the data.
    """

    name: str
    kind: TunableKind
    #: the current value: an int, or the source text of the expression it replaces
    value: int | str
    choices: list[int] = Field(default_factory=list)
    spans: list[SourceSpan]
    #: "m", "n" or "k" for a matmul tile dimension; feeds the shared-memory estimate
    axis: Literal["m", "n", "k"] | None = None

    @property
    def line(self) -> int:
        return self.spans[0].lineno


def choices_for(tunable: Tunable, target: HardwareTarget | None = None) -> list[int]:
    """The values worth trying for ``tunable`` on ``target``, ascending.

    num_warps: powers of two up to 16 on NVIDIA, 8 on AMD (a warp there is a
    64-wide wavefront, so 8 already means 512 threads); num_stages 1..5 on
    NVIDIA, 1..2 on AMD (its pipeliner gains nothing deeper); block sizes:
    powers of two from a quarter to four times the current one, at least 16
    (tl.dot's smallest tile side), with one bf16 row of the block fitting the
    target's shared memory; programs per SM 1..8.
    """
    amd = target is not None and target.vendor == "amd"
    if tunable.kind == "num_warps":
        return [1, 2, 4, 8] if amd else [1, 2, 4, 8, 16]
    if tunable.kind == "num_stages":
        return [1, 2] if amd else [1, 2, 3, 4, 5]
    if tunable.kind == "programs_per_sm":
        return list(range(1, 9))
    current = tunable.value
    if not isinstance(current, int):
        return []
    low = max(1, current // 4)
    if tunable.kind == "block" and current >= 16:
        low = max(16, low)
    high = current * 4
    if tunable.kind == "block" and target is not None:
        high = min(high, target.shared_memory_per_sm_kb * 1024 // 2)
    return list(_powers_of_two(low, high))


def _powers_of_two(low: int, high: int) -> Iterator[int]:
    value = 1
    while value <= high:
        if value >= low:
            yield value
        value *= 2
