"""Token and cost accounting for a run's LLM calls.

The ledger is saved in the run directory and restored on resume, so a resumed run reports
what the whole run cost, not only its second half. Costs come from a small table of list
prices and are None when the price is not known — a local or proxied model is never given an
invented cost, and a total over partly-priced calls says so (``unpriced_calls``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel, Field, computed_field

from kgen.agent.llm.models import ModelSpec

if TYPE_CHECKING:
    from kgen.agent.llm.completion import Completion


class Price(NamedTuple):
    """USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float


PRICES_AS_OF = "2025-10"
# Approximate public list prices (USD per million tokens, standard tier, no caching or batch
# discounts) as of PRICES_AS_OF. They drift; check the provider's pricing page before quoting
# a cost. Applied only to the official APIs: ``ModelSpec.is_official_api`` decides, so
# ``openai:gpt-5`` and ``openai:gpt-5@https://api.openai.com/v1`` cost the same, and a proxy or
# local server serving the same name gets no price.
PRICES: dict[tuple[str, str], Price] = {
    ("openai", "gpt-5"): Price(1.25, 10.0),
    ("openai", "gpt-5-mini"): Price(0.25, 2.0),
    ("openai", "gpt-5-nano"): Price(0.05, 0.40),
    ("openai", "gpt-4.1"): Price(2.0, 8.0),
    ("openai", "gpt-4.1-mini"): Price(0.40, 1.60),
    ("openai", "gpt-4o"): Price(2.50, 10.0),
    ("openai", "gpt-4o-mini"): Price(0.15, 0.60),
    ("openai", "o3"): Price(2.0, 8.0),
    ("openai", "o4-mini"): Price(1.10, 4.40),
    ("anthropic", "claude-opus-4-1"): Price(15.0, 75.0),
    ("anthropic", "claude-opus-4-0"): Price(15.0, 75.0),
    ("anthropic", "claude-sonnet-4-5"): Price(3.0, 15.0),
    ("anthropic", "claude-sonnet-4-0"): Price(3.0, 15.0),
    ("anthropic", "claude-haiku-4-5"): Price(1.0, 5.0),
    ("anthropic", "claude-3-5-haiku"): Price(0.80, 4.0),
}

# Dated snapshots and aliases cost what their family costs: gpt-4o-2024-08-06, claude-sonnet-4-5-
# 20250929 and claude-3-5-haiku-latest all price as the undated name (`kgen doctor` also finds
# a model in a server's models list by it).
SNAPSHOT_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")
_ALIASES = {"claude-opus-4": "claude-opus-4-0", "claude-sonnet-4": "claude-sonnet-4-0"}


def price_for(spec: ModelSpec) -> Price | None:
    """The list price of ``spec``'s model, or None when unknown or not the official API."""
    if not spec.is_official_api:
        return None
    name = SNAPSHOT_SUFFIX.sub("", spec.model)
    name = _ALIASES.get(name, name)
    return PRICES.get((spec.provider, name))


def cost_usd(spec: ModelSpec, input_tokens: int, output_tokens: int) -> float | None:
    price = price_for(spec)
    if price is None:
        return None
    return (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok) / 1e6


class ModelUsage(BaseModel):
    """Totals for one model (keyed by its label in the ledger)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    # None until a priced call is seen; calls without a price are counted, not guessed.
    cost_usd: float | None = None
    unpriced_calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class UsageLedger(BaseModel):
    """Per-model totals of a run. Not thread-safe: add completions from one thread.

    ``UsageLedger.model_validate(ledger.model_dump(mode="json"))`` restores it exactly; the
    totals in the dump are derived and ignored on the way back in.
    """

    models: dict[str, ModelUsage] = Field(default_factory=dict)

    def add(self, completion: Completion) -> None:
        usage = self.models.setdefault(completion.model, ModelUsage())
        usage.calls += 1
        usage.input_tokens += completion.input_tokens
        usage.output_tokens += completion.output_tokens
        usage.seconds += completion.seconds
        if completion.cost_usd is None:
            usage.unpriced_calls += 1
        else:
            usage.cost_usd = (usage.cost_usd or 0.0) + completion.cost_usd

    def merge(self, other: UsageLedger) -> None:
        """Fold in another ledger (e.g. one kept by a worker process)."""
        for label, theirs in other.models.items():
            mine = self.models.setdefault(label, ModelUsage())
            mine.calls += theirs.calls
            mine.input_tokens += theirs.input_tokens
            mine.output_tokens += theirs.output_tokens
            mine.seconds += theirs.seconds
            mine.unpriced_calls += theirs.unpriced_calls
            if theirs.cost_usd is not None:
                mine.cost_usd = (mine.cost_usd or 0.0) + theirs.cost_usd

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_calls(self) -> int:
        return sum(u.calls for u in self.models.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_tokens(self) -> int:
        return sum(u.total_tokens for u in self.models.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_cost_usd(self) -> float:
        """Cost of the priced calls only; see ``unpriced_calls`` for what it leaves out."""
        return sum(u.cost_usd or 0.0 for u in self.models.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unpriced_calls(self) -> int:
        return sum(u.unpriced_calls for u in self.models.values())
