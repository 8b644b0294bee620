"""pydantic's ValidationError in the words a person reads.

pydantic prefixes a validator's own message with ``"Value error, "`` (a ``ValueError``) or
``"Assertion failed, "`` (an ``assert``): noise to someone who typed a bad option, and it
buries the message the validator's author wrote for them. Every user-facing message built
from a ValidationError goes through here, so the prefix is stripped in one place.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails

#: what pydantic puts before the message of an exception raised inside a validator
_PREFIXES: tuple[str, ...] = ("Value error, ", "Assertion failed, ")


def error_message(error: ErrorDetails) -> str:
    """One error's message without pydantic's prefix."""
    message = str(error["msg"])
    for prefix in _PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def error_location(error: ErrorDetails) -> str:
    """Where the error is, as dotted field names (``""`` at the model's root)."""
    return ".".join(str(part) for part in error["loc"])


def validation_message(exc: ValidationError, *, locations: bool = True) -> str:
    """Every error of ``exc`` on one line, ``"field: message; ..."`` (or messages alone)."""
    parts = []
    for error in exc.errors():
        message = error_message(error)
        where = error_location(error) if locations else ""
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
