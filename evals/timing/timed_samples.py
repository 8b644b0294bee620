"""Timed calls a candidate cannot predict, and a few of them kept to be checked afterwards.

A candidate can merge or skip work across consecutive timed calls ("super-batching") when it
can tell the calls apart by what it sees: the inputs' addresses repeating in round-robin
order, a version counter, the number of calls so far. Two things take that away:

* **The order of input sets is drawn at random** (:class:`InputOrder`) from a generator of
  its own, seeded from the operating system's entropy: not the order of the calls, not
  torch's or Python's global random state (which a candidate can seed or read). Each call
  gets a set other than the one of the call before it (so no call reuses the last call's
  buffers), chosen uniformly among the others.
* **A random few of the timed calls are checked** (:class:`TimedSampler`): which ones is
  drawn from the same private generator as the calls come, by reservoir sampling, so that
  whenever the timing stops (its length depends on the spread of its samples:
  ``stopping.py``) the kept calls are a uniform draw among the calls that ran. Just before a
  chosen call (before its L2 flush and its start event), its input buffers are overwritten
  in place with values the buffers have not held before (one of the *fresh* input sets,
  which the candidate never sees as buffers of their own); just after the call's end event,
  its outputs are cloned. Neither copy lies inside the timed interval, and both are timed
  by events of their own, so the loop's wall-time check (``loop_wall.py``) does not count
  them as work left behind. A cache keyed on the buffers' addresses, or a batcher that
  computes only every k-th call, then hands back an output from other values; the
  verifier's timing stage compares each kept output with the fp64 reference afterwards.

Where memory allows no fresh sets (a problem too big for its fp64 reference on the device
has one input set), the chosen calls are still kept and checked, on the values their
buffers hold: a wrong output is still caught, a right one taken from a cache is not.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kgen.evals.problem.format import flatten_outputs

#: timed calls whose outputs are kept and checked (fewer when there are fewer trials)
SAMPLED_CALLS = 3


def private_rng() -> random.Random:
    """A generator no candidate code can seed or replay: its seed comes from the OS."""
    return random.Random(secrets.randbits(64))


class InputOrder:
    """Which input set each call gets: at random, never the set of the call just before."""

    def __init__(self, count: int, rng: random.Random | None = None):
        if count < 1:
            raise ValueError(f"need at least one input set, got {count}")
        self.count = count
        self._rng = rng or private_rng()
        self.last: int | None = None

    def next(self) -> int:
        if self.count == 1:
            self.last = 0
        elif self.last is None:
            self.last = self._rng.randrange(self.count)
        else:
            choice = self._rng.randrange(self.count - 1)
            self.last = choice + 1 if choice >= self.last else choice
        return self.last


@dataclass
class TimedSample:
    """One checked timed call: which trial, which buffers, which values they held, what came back."""

    trial: int
    input_set: int
    #: index of the fresh set whose values the buffers held; None: the set's own values
    fresh: int | None
    outputs: list[Any] = field(default_factory=list)


def _tensors(args: Sequence[Any]) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor)]


class TimedSampler:
    """The timed calls checked afterwards, fresh values for their inputs, their outputs kept.

    Which calls: reservoir sampling (Vitter's algorithm R) over the calls as they come. The
    first ``count`` are taken; call ``t`` after them (0-based) is taken with probability
    ``count / (t + 1)`` and its outputs replace one of the kept ones, drawn at random. After
    any number of calls the kept ones are a uniform draw of ``count`` among them, so a timing
    that stops early checks as fairly as one that runs to its cap, and never more than
    ``count`` cloned outputs are held. A call that is taken and later replaced still had its
    buffers given fresh values: one more call on values it could not have cached."""

    def __init__(self, fresh_sets: Sequence[Sequence[Any]] = (), count: int = SAMPLED_CALLS,
                 rng: random.Random | None = None):
        self.fresh_sets = [tuple(s) for s in fresh_sets]
        self.count = count
        self._rng = rng or private_rng()
        #: the kept calls (at most ``count``)
        self.samples: list[TimedSample] = []
        #: input set -> the fresh set whose values its buffers hold now (absent: its own)
        self.holds: dict[int, int] = {}
        self._pending: TimedSample | None = None
        self._next_trial = 0

    @property
    def chosen(self) -> frozenset[int]:
        """The timed calls (0-based trials) whose outputs are kept now."""
        return frozenset(sample.trial for sample in self.samples)

    def wants(self, trial: int) -> bool:
        """Whether call ``trial`` is taken; asked once per timed call, in order (the draw for
        call ``t`` is fair only given one draw for each call before it)."""
        if trial != self._next_trial:
            raise ValueError(f"asked about timed call {trial}, expected call {self._next_trial}")
        self._next_trial += 1
        if trial < self.count:
            return True
        return self.count > 0 and self._rng.randrange(trial + 1) < self.count

    def before(self, trial: int, input_set: int, args: Sequence[Any]) -> None:
        """Values the buffers of ``args`` have not held before, written in place (enqueued on
        the current stream, before the trial's flush)."""
        options = [f for f in range(len(self.fresh_sets)) if f != self.holds.get(input_set)]
        fresh = self._rng.choice(options) if options else self.holds.get(input_set)
        if options:
            sources = _tensors(self.fresh_sets[fresh])
            targets = _tensors(args)
            if len(sources) != len(targets):
                raise ValueError("a fresh input set does not match the timed input sets")
            with torch.no_grad():
                for target, source in zip(targets, sources, strict=True):
                    target.copy_(source)
            self.holds[input_set] = fresh
        self._pending = TimedSample(trial=trial, input_set=input_set, fresh=fresh)

    def after(self, result: Any) -> None:
        """The call's outputs cloned (enqueued after its end event)."""
        if self._pending is None:
            raise RuntimeError("after() without before()")
        with torch.no_grad():
            self._pending.outputs = [o.clone() if isinstance(o, torch.Tensor) else o
                                     for o in flatten_outputs(result)]
        self.samples.append(self._pending)
        self._pending = None
        if len(self.samples) > self.count:  # the new call replaces one kept before it, drawn at random
            del self.samples[self._rng.randrange(len(self.samples) - 1)]

    def inputs_of(self, sample: TimedSample, input_sets: Sequence[Sequence[Any]]) -> Sequence[Any]:
        """The values a sampled call was given: its fresh set, or its input set's own values
        (never overwritten: ``fresh`` is None only for a set never refreshed)."""
        return self.fresh_sets[sample.fresh] if sample.fresh is not None else input_sets[sample.input_set]
