"""One model reply with what it cost, and the one method every model client has.

The providers make completions, the usage ledger counts them and the recorded client
(``model_calls.py``) saves and reuses them: the type sits below all three, so none of them
has to import another to name it.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel


class Completion(BaseModel):
    """One reply with what it cost.

    ``model`` is the spec's label; ``cost_usd`` is None when the price is unknown; ``seconds``
    is wall time including the SDK's retries; ``finish_reason`` is the provider's own word
    ("stop", "length", "end_turn", "max_tokens", ...), see ``truncated``.
    """

    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    seconds: float
    finish_reason: str | None

    @property
    def truncated(self) -> bool:
        """The reply hit max_tokens, so code in it is probably cut off."""
        return self.finish_reason in ("length", "max_tokens")


class Completer(Protocol):
    """What asks a model: ``providers.LLMClient`` (or a test double standing in for one)."""

    def complete(self, system: str, user: str, *, max_tokens: int, temperature: float,
                 purpose: str = "") -> Completion: ...
