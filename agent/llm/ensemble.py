"""A weighted mixture of models: who writes the next candidate.

Different models fail differently, so a generation is spread over several; the weights (from
``PROVIDER:MODEL*WEIGHT``) say how much each is trusted. ``allocate`` is deterministic so a
resumed or repeated run asks the same models for the same number of candidates; ``pick`` is
for one-off requests drawn from the run's seeded random generator.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from fractions import Fraction

from kgen.agent.llm.models import ModelSpec


class Ensemble:
    def __init__(self, specs: Sequence[ModelSpec]):
        if not specs:
            raise ValueError("an ensemble needs at least one model")
        self.specs: tuple[ModelSpec, ...] = tuple(specs)

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(spec.weight for spec in self.specs)

    def pick(self, rng: random.Random) -> ModelSpec:
        """One model, drawn with probability proportional to its weight."""
        return rng.choices(self.specs, weights=self.weights, k=1)[0]

    def allocate(self, n: int) -> list[ModelSpec]:
        """Spread ``n`` requests over the models in proportion to their weights.

        Largest-remainder rounding: each model gets the floor of its exact share, and the
        requests left over go to the largest fractional parts (earlier models win ties). The
        list interleaves the models round-robin, so a run cut short after the first k requests
        still heard from every model it could.
        """
        if n < 0:
            raise ValueError(f"cannot allocate {n} requests")
        weights = [Fraction(w) for w in self.weights]
        total = sum(weights)
        shares = [n * w / total for w in weights]
        counts = [int(share) for share in shares]  # floor: shares are non-negative
        left = n - sum(counts)
        by_remainder = sorted(range(len(shares)), key=lambda i: (-(shares[i] - counts[i]), i))
        for i in by_remainder[:left]:
            counts[i] += 1
        order: list[ModelSpec] = []
        while len(order) < n:
            for i, spec in enumerate(self.specs):
                if counts[i]:
                    order.append(spec)
                    counts[i] -= 1
        return order

    def __len__(self) -> int:
        return len(self.specs)

    def __repr__(self) -> str:
        parts = ", ".join(f"{s.label}*{s.weight:g}" for s in self.specs)
        return f"Ensemble({parts})"
