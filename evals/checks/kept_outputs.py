"""Outputs of earlier calls, kept to see whether a later call overwrote them (``stale_output``).

A caller keeps the result of one call while it makes the next; a candidate that hands out a
buffer it writes again (one of two buffers in turn, a persistent output) overwrites it. So every
output is kept beside an exact copy, and compared with it bit for bit after the later calls.

Kept on the device, six calls' outputs and their copies are twelve outputs: for a problem whose
output is gigabytes, four times what the problem itself holds. So the copies live on the host,
and where the memory plan puts the reference on the host too (the device has no room), only the
last :data:`HELD_CALLS` calls' outputs are held as a caller holds them, and older ones by weak
reference, compared after every call: a buffer a later call writes is one the candidate keeps
alive itself (one of two in turn, a persistent output), so it is still there to compare. What
that misses is a candidate that keeps a result for two calls or more, then writes it and drops
it within one call: the write has no purpose but to spoil the caller's copy, and the holding
mode (the device has room) sees it too. Where the device has room, every output is held.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

from kgen.evals.checks.candidate_call import same_values

#: Calls whose outputs stay held when the rest are kept weakly: the call that overwrites a
#: result is most often the next, and the memory plan has room for two calls' outputs.
HELD_CALLS = 2


@dataclass
class _Kept:
    what: str
    call: int
    index: int
    copy: torch.Tensor
    held: torch.Tensor | None
    weak: Any  # a weak reference to the output

    def output(self) -> torch.Tensor | None:
        return self.held if self.held is not None else self.weak()


class KeptOutputs:
    """``copies_on``: where the exact copies live; ``hold_all``: keep every output alive (else
    the last :data:`HELD_CALLS` calls' outputs, the older ones weakly, compared after each call)."""

    def __init__(self, copies_on: torch.device, hold_all: bool):
        self.copies_on, self.hold_all = copies_on, hold_all
        self.kept: list[_Kept] = []
        self.calls = 0
        self._seen: tuple[str, int] | None = None

    def add(self, what: str, outputs: list[Any], skip: set[int] | frozenset[int] = frozenset()) -> None:
        """Keeps ``outputs`` of one call (``skip``: indices the reference also returns as views of
        inputs, which change with those inputs by design)."""
        if not self.hold_all:
            self._seen = self._seen or self._scan()  # before older outputs are let go
        for i, out in enumerate(outputs):
            if i in skip or not isinstance(out, torch.Tensor):
                continue
            copy = out.detach().to(self.copies_on, copy=True)
            self.kept.append(_Kept(what, self.calls, i, copy, out, weakref.ref(out)))
        self.calls += 1
        if not self.hold_all:
            for kept in self.kept:
                if kept.call < self.calls - HELD_CALLS:
                    kept.held = None

    def _scan(self) -> tuple[str, int] | None:
        for kept in self.kept:
            out = kept.output()
            if out is not None and not same_values(out.detach(), kept.copy):
                return kept.what, kept.index
        return None

    def first_changed(self) -> tuple[str, int] | None:
        """(call, output index) of a kept output that no longer equals its copy: the first in call
        order when every output is held, else the first seen."""
        return self._seen or self._scan()

    def repeats_last_call(self, outputs: list[Any]) -> bool:
        """Whether some output of this call equals, bit for bit, the same output of the call kept
        last (its copy, taken when it returned): the evidence of a cache, which hands back what
        it computed before. A fresh output, however wrong, is not that."""
        last = {k.index: k.copy for k in self.kept if k.call == self.calls - 1}
        return any(
            isinstance(out, torch.Tensor) and i in last and same_values(out.detach(), last[i])
            for i, out in enumerate(outputs)
        )
