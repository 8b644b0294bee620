"""A size threshold in a candidate's code: a size past which it may behave differently.

A kernel that takes another path on long rows (``if n_cols > 8192:`` a split reduction,
a bf16 partial sum past 4096 columns, ``grid = (min(rows, 2048),)``) is right at every size
below the threshold and can be wrong above it. The static finder
(``evals/static_rules/size_thresholds.py``) reads the candidate and returns these; the size
planner (``evals/problem/threshold_sets.py``) puts one trial just past each one it can afford.
This module is only the vocabulary the two share, so neither imports the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ThresholdAxis(BaseModel):
    """Which size a threshold is compared with, as far as the finder could trace it.

    ``input`` is the position of a ``forward`` argument (None: some tensor the finder could
    not tie to an input); ``dim`` one of its dims as the code indexes it (``-1``, ``0``;
    None: any of them); ``product``: the value is a product of dims (``numel()``,
    ``rows * cols``), so moving any one of them far enough crosses it.
    """

    model_config = ConfigDict(frozen=True)

    input: int | None = None
    dim: int | None = None
    product: bool = False


class SizeThreshold(BaseModel):
    """One integer the candidate compares a size-derived value with.

    ``axes`` empty means unknown: the value could come from any size (a program id, an
    attribute set in ``__init__``); the planner then tries every size constant it can afford.
    """

    model_config = ConfigDict(frozen=True)

    #: the compared value: behaviour may change between ``value`` and ``value + 1``
    value: int
    #: where it is compared (1-based line of the candidate) and the comparison's text
    line: int
    text: str
    axes: tuple[ThresholdAxis, ...] = ()

    def describe(self) -> str:
        return f"{self.value} (line {self.line} of the candidate: `{self.text}`)"
