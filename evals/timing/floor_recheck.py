"""A time under the speed-of-light floor, measured once more before it is judged.

A kernel that times faster than the hardware can move its bytes or do its FLOPs is a
measurement being fooled (``sol.faster_than_light``), but the first suspect is the
measurement's own state, not the candidate: inputs left in a persisting L2 window, buffers
the L2 still held from a neighbour's run. So a first time under the floor is measured again,
with the persisting L2 state reset (``l2_state.py``), fresh input sets (new values in new
buffers: nothing a cache or L2 kept applies) and the L2 flushed before every trial as always,
and the candidate is rejected only when the second time is still under the floor. The report
keeps both measurements either way; when the second is possible, it is the one reported.

The decision (:func:`recheck_floor`) is a pure function of the floor and the measured times,
given the re-measurement as a callable: tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

from kgen.evals.timing.sol import SpeedOfLight, faster_than_light
from kgen.evals.verdict import ResultModel

#: the share of the floor a time must be under to count as faster than light (``sol.py``'s slack)
FLOOR_SLACK = 0.9


class FloorRecheck(ResultModel):
    """A first time under the floor and its re-measurement."""

    #: the time a measurement had to stay above: slack x the lower of the two floors (ms)
    limit_ms: float
    first_ms: float
    remeasured_ms: float
    #: what the reset of the persisting L2 state did before the re-measurement
    l2_reset: str
    #: still under the floor after the reset: the candidate is rejected
    impossible: bool

    def describe(self) -> str:
        verdict = "still under it: impossible" if self.impossible else "above it: the first time is discarded"
        return (
            f"first measured {self.first_ms:.4f} ms, under the speed-of-light limit of {self.limit_ms:.4f} ms; "
            f"re-measured with fresh inputs, L2 flushed and its persisting state reset ({self.l2_reset}): "
            f"{self.remeasured_ms:.4f} ms, {verdict}"
        )


def floor_limit_ms(sol: SpeedOfLight, slack: float = FLOOR_SLACK) -> float:
    """The time under which a measurement is faster than light (``sol.faster_than_light``)."""
    return slack * min(sol.floor_ms, sol.vendor_floor_ms)


def recheck_floor(sol: SpeedOfLight, first_ms: float,
                  remeasure: Callable[[], tuple[float, str]]) -> FloorRecheck | None:
    """None when ``first_ms`` is possible; else ``remeasure()`` (the new median in ms and what
    the L2 reset did) is called once and both times are judged."""
    if not faster_than_light(sol, first_ms, FLOOR_SLACK):
        return None
    second_ms, l2_reset = remeasure()
    return FloorRecheck(limit_ms=floor_limit_ms(sol), first_ms=first_ms, remeasured_ms=second_ms,
                        l2_reset=l2_reset, impossible=faster_than_light(sol, second_ms, FLOOR_SLACK))
