"""Typed answers from any LLM: ask for JSON, validate it with pydantic, repair once.

Plain-text JSON, not vendor tool calling, because the OpenAI-compatible local servers kgen
supports differ in whether and how they do tool calls, while all of them can write JSON.
Models wrap JSON in prose, code fences or reasoning blocks; extraction tolerates that, and
when the result still does not validate the model is shown its reply and the exact
validation error — a cheap repair that usually works where a blind retry would not.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kgen.agent.llm.completion import Completion
from kgen.agent.llm.providers import LLMClient, ProviderError
from kgen.agent.llm.usage import UsageLedger
from kgen.errors import KgenError

T = TypeVar("T", bound=BaseModel)

_THINKING = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n(.*?)```", re.DOTALL)
_MAX_ECHO = 4000


class ReplyNotValid(KgenError, ValueError):
    """The reply holds no JSON, or JSON that does not match the schema."""


def complete_json(
    client: LLMClient,
    system: str,
    user: str,
    model_cls: type[T],
    *,
    attempts: int = 2,
    max_tokens: int = 4096,
    temperature: float = 0.0,
    ledger: UsageLedger | None = None,
) -> tuple[T, list[Completion]]:
    """Ask ``client`` for a ``model_cls`` as JSON; return it with every completion it took.

    Each attempt after the first is a repair request quoting the previous reply and its
    validation error. With ``ledger``, every completion is added to it as it arrives, so the
    tokens of a request that never validates are still accounted for. Raises
    ``ProviderError(kind="bad_reply")`` when no attempt validates; other ProviderErrors
    (auth, timeout, ...) pass through unchanged.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    schema = json.dumps(model_cls.model_json_schema(), separators=(",", ":"))
    instructed_system = (
        f"{system}\n\n" if system else ""
    ) + (
        "Answer with a single JSON object that validates against this JSON Schema, and "
        f"nothing else (no prose, no comments):\n{schema}"
    )
    completions: list[Completion] = []
    prompt = user
    problem = ""
    for _ in range(attempts):
        completion = client.complete(
            instructed_system, prompt, max_tokens=max_tokens, temperature=temperature
        )
        completions.append(completion)
        if ledger is not None:
            ledger.add(completion)
        try:
            return parse_reply(completion.text, model_cls), completions
        except ReplyNotValid as err:
            problem = str(err)
            if completion.truncated:
                problem += " (the reply was cut off at the token limit)"
        prompt = _repair_prompt(user, completion.text, problem)
    raise ProviderError(
        f"{client.label} gave no valid {model_cls.__name__} JSON in {attempts} "
        f"attempt{'s' if attempts != 1 else ''}: {problem}",
        kind="bad_reply",
        model=client.label,
    )


def parse_reply(text: str, model_cls: type[T]) -> T:
    """Extract the JSON in ``text`` and validate it as ``model_cls``."""
    data = extract_json(text)
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in err.errors()
        )
        raise ReplyNotValid(f"JSON does not match {model_cls.__name__}: {details}") from None


def extract_json(text: str) -> Any:
    """The first JSON value found: the whole reply, a fenced block, or an embedded object."""
    text = _THINKING.sub("", text).strip()
    if not text:
        raise ReplyNotValid("the reply is empty")
    candidates = [text]
    fenced = _FENCE.findall(text)
    candidates += [body for lang, body in fenced if lang.lower() == "json"]
    candidates += [body for lang, body in fenced if lang.lower() != "json"]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict | list) and value:
            return value
    raise ReplyNotValid("no JSON object found in the reply")


def _repair_prompt(user: str, previous: str, problem: str) -> str:
    if len(previous) > _MAX_ECHO:
        previous = previous[:_MAX_ECHO] + "\n[... cut ...]"
    return (
        f"{user}\n\n"
        f"Your previous answer was:\n<<<\n{previous}\n>>>\n"
        f"It was not accepted: {problem}\n"
        "Reply again with only the corrected JSON object."
    )
