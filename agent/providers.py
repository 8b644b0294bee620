"""LLM clients on the official ``openai`` and ``anthropic`` SDKs, behind one small interface.

The agent only ever asks "system + user prompt in, text out", so ``LLMClient.complete`` is
that and nothing more; everything provider-specific (parameter names, usage fields, error
classes) stays in here. Retries with exponential backoff on 429 / 5xx / timeouts / connection
errors are the SDKs' own (``max_retries``, ``timeout_s``); what surfaces after them is one
``ProviderError`` whose ``kind`` tells the agent whether to wait, skip the model or stop, and
whose message tells the person what to do.

Keys: ``choose_api_key`` alone decides which key a model's requests carry, whatever the key's
source (kgen's settings: the config file, ``KGEN_OPENAI_API_KEY``, an explicit argument; the
provider's variable ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``; a variable the model names).
A provider's key goes only to that provider's official endpoint, unless the person names a key
for the model (``...@URL#VARIABLE``, see ``kgen.agent.models``); any other server gets a
placeholder (local servers ignore it). A key never appears in a message, repr or log line:
server error text is quoted only after redaction.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr

from kgen.agent.models import ModelSpec
from kgen.agent.usage import cost_usd

log = logging.getLogger(__name__)

ProviderErrorKind = Literal[
    "missing_key", "auth", "unreachable", "rate_limited", "timeout", "bad_reply", "other"
]
TRANSIENT_KINDS: frozenset[str] = frozenset({"unreachable", "rate_limited", "timeout"})

OFFICIAL_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
# Sent to OpenAI-compatible servers that take no key; the SDK refuses to run without one.
PLACEHOLDER_KEY = "kgen-local-no-key"

_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}
_KEY_LIKE = re.compile(r"\b(sk-(?:ant-|proj-)?)[A-Za-z0-9_\-]{6,}")


class ProviderError(Exception):
    """An LLM call that failed after the SDK's retries, classified for the agent."""

    def __init__(self, message: str, *, kind: ProviderErrorKind, model: str | None = None):
        super().__init__(message)
        self.message = message
        self.kind: ProviderErrorKind = kind
        self.model = model

    @property
    def transient(self) -> bool:
        """Worth trying again later (rate limit, timeout, server unreachable)."""
        return self.kind in TRANSIENT_KINDS

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only fields survive pickling (errors cross process boundaries in workers).
        return (_rebuild_provider_error, (self.message, self.kind, self.model))

    def __repr__(self) -> str:
        return f"ProviderError(kind={self.kind!r}, model={self.model!r}, message={self.message!r})"


def _rebuild_provider_error(message: str, kind: ProviderErrorKind, model: str | None):
    return ProviderError(message, kind=kind, model=model)


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


@dataclass(frozen=True)
class RawReply:
    """What a provider's ``_send`` returns; ``LLMClient.complete`` adds timing and cost."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str | None


class LLMClient(ABC):
    """Ask one model for a completion. Subclass ``_send`` to add a provider (or a test double)."""

    def __init__(self, spec: ModelSpec, *, timeout_s: float, max_retries: int):
        self.spec = spec
        self.timeout_s = timeout_s
        self.max_retries = max_retries

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def endpoint(self) -> str:
        """The base URL requests go to."""
        return self.spec.base_url or OFFICIAL_BASE_URLS[self.spec.provider]

    def complete(
        self, system: str, user: str, *, max_tokens: int, temperature: float
    ) -> Completion:
        started = time.perf_counter()
        try:
            raw = self._send(system, user, max_tokens=max_tokens, temperature=temperature)
        except ProviderError:
            raise
        except Exception as err:
            translated = self._translate(err)
            if translated is None:
                raise
            raise translated from None
        seconds = time.perf_counter() - started
        completion = Completion(
            text=raw.text,
            model=self.label,
            input_tokens=raw.input_tokens,
            output_tokens=raw.output_tokens,
            cost_usd=cost_usd(self.spec, raw.input_tokens, raw.output_tokens),
            seconds=seconds,
            finish_reason=raw.finish_reason,
        )
        log.debug(
            "%s: %d in / %d out tokens, %.2fs, finish=%s",
            self.label, raw.input_tokens, raw.output_tokens, seconds, raw.finish_reason,
        )
        return completion

    @abstractmethod
    def _send(self, system: str, user: str, *, max_tokens: int, temperature: float) -> RawReply:
        """One call through the SDK (its retries included)."""

    def _translate(self, err: Exception) -> ProviderError | None:
        """Map an SDK exception to a ProviderError; None for errors that are not the provider's."""
        return None

    def _bad_reply(self, what: str) -> ProviderError:
        return ProviderError(
            f"{self.label} sent a reply kgen could not use ({what}); "
            f"check that {self.endpoint} speaks the {self.spec.provider} protocol",
            kind="bad_reply",
            model=self.label,
        )

    def close(self) -> None:  # noqa: B027 - optional hook; a test double has nothing to close
        """Release the connection pool."""

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.label}, timeout_s={self.timeout_s}, "
            f"max_retries={self.max_retries})"
        )


class _SDKClient(LLMClient):
    """Shared by both providers: the SDKs raise parallel exception hierarchies."""

    def __init__(self, spec: ModelSpec, sdk_client: Any, sdk_module: Any, *, redact: Any,
                 key_hint: str, timeout_s: float, max_retries: int):
        super().__init__(spec, timeout_s=timeout_s, max_retries=max_retries)
        self._sdk = sdk_client
        self._sdk_module = sdk_module
        self._redact = redact
        self._key_hint = key_hint

    def close(self) -> None:
        self._sdk.close()

    def _translate(self, err: Exception) -> ProviderError | None:
        sdk = self._sdk_module
        label, where = self.label, self.endpoint
        at = "" if self.spec.base_url else f" at {where}"  # a custom URL is in the label already
        attempts = self.max_retries + 1
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"

        def error(kind: ProviderErrorKind, message: str) -> ProviderError:
            return ProviderError(self._redact(message), kind=kind, model=label)

        if isinstance(err, sdk.APITimeoutError):
            return error("timeout", f"{label} did not answer within {self.timeout_s:g}s "
                                    f"({tries}): raise the timeout, or check the server{at}")
        if isinstance(err, sdk.APIConnectionError):
            return error("unreachable", f"cannot reach {label}{at} ({tries}): is the server "
                                        f"running, the base URL right and the network up?")
        if isinstance(err, sdk.APIResponseValidationError) or isinstance(err, json.JSONDecodeError):
            return self._bad_reply(f"{type(err).__name__}: {self._redact(str(err))[:200]}")
        if isinstance(err, sdk.APIStatusError):
            status = err.status_code
            said = _server_message(err)
            said = f": {said}" if said else ""
            if status in (401, 403):
                return error("auth", f"{label} refused the API key (HTTP {status}{said}); "
                                     f"check {self._key_hint}")
            if status in (429, 529):
                return error("rate_limited", f"{label} is rate limited or overloaded (HTTP "
                                             f"{status}, {tries}){said}; wait, lower the "
                                             f"parallelism or use another model")
            if status == 404:
                return error("other", f"{label}: not found{at} (HTTP 404{said}); "
                                      f"check the model name and base URL")
            if status >= 500:
                return error("other", f"{label}: server error HTTP {status} ({tries}){said}; "
                                      f"the provider is failing, try again later")
            return error("other", f"{label}: request rejected (HTTP {status}{said})")
        if isinstance(err, sdk.APIError):
            return error("other", f"{label}: {type(err).__name__}: {str(err)[:200]}")
        return None


class _OpenAIChat(_SDKClient):
    def _send(self, system: str, user: str, *, max_tokens: int, temperature: float) -> RawReply:
        messages = [{"role": "user", "content": user}]
        if system:
            messages.insert(0, {"role": "system", "content": system})
        kwargs: dict[str, Any] = {"model": self.spec.model, "messages": messages}
        # The official API renamed the limit for reasoning models and rejects the old name
        # there; OpenAI-compatible servers (vLLM, Ollama, SGLang) all know the old one.
        if self.spec.is_official_api:
            kwargs["max_completion_tokens"] = max_tokens
        else:
            kwargs["max_tokens"] = max_tokens
        if _accepts_temperature(self.spec):
            kwargs["temperature"] = temperature
        response = self._sdk.chat.completions.create(**kwargs)
        choices = getattr(response, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise self._bad_reply("no choices in the reply")
        choice = choices[0]
        text = choice.message.content
        finish = choice.finish_reason
        if text is None and getattr(choice.message, "refusal", None):
            finish = "refusal"
        usage = getattr(response, "usage", None)
        return RawReply(
            text=text or "",
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            finish_reason=finish,
        )


class _AnthropicMessages(_SDKClient):
    def _send(self, system: str, user: str, *, max_tokens: int, temperature: float) -> RawReply:
        # ``temperature`` is not sent: the Messages API of the SDK kgen targets has no sampling
        # temperature (the SDK rejects the argument), so diversity across candidates comes
        # from the prompts and the ensemble, not from sampling noise.
        kwargs: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": user}],
        }
        if system:
            kwargs["system"] = system
        response = self._sdk.messages.create(**kwargs)
        content = getattr(response, "content", None)
        if content is None:
            raise self._bad_reply("no content in the reply")
        text = "".join(
            getattr(block, "text", "") or "" for block in content
            if getattr(block, "type", None) == "text"
        )
        usage = getattr(response, "usage", None)
        input_tokens = sum(
            int(getattr(usage, name, 0) or 0)
            for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        return RawReply(
            text=text,
            input_tokens=input_tokens,
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            finish_reason=getattr(response, "stop_reason", None),
        )


class KeyChoice(BaseModel):
    """The key one model's requests carry, and what a person sets or checks about it.

    ``key`` None: the model needs a key and none is configured where it may come from.
    ``placeholder``: a server other than the provider's, with no key named for it, gets
    ``PLACEHOLDER_KEY`` (the SDKs refuse to run without one; local servers ignore it).
    """

    model_config = ConfigDict(frozen=True)

    key: SecretStr | None
    #: where the key is read from, for "set ..." / "check ..." in messages
    hint: str
    placeholder: bool = False

    def missing_message(self, label: str) -> str:
        return f"no API key for {label}: set {self.hint}"


def is_official_endpoint(spec: ModelSpec) -> bool:
    """Whether requests for ``spec`` go to its provider's own API, the one place its key belongs.

    No base URL, or one on the official host over https at the default port. The path does not
    matter (the key reaches the same server either way); plain http, another port or another
    host (``api.openai.com.example.net``) is someone else's server.
    """
    if spec.base_url is None:
        return True
    url, official = urlsplit(spec.base_url), urlsplit(OFFICIAL_BASE_URLS[spec.provider])
    try:
        port = url.port
    except ValueError:
        return False
    return url.scheme == "https" and url.hostname == official.hostname and port in (None, 443)


def choose_api_key(spec: ModelSpec, configured: str | None = None,
                   environ: Mapping[str, str] | None = None) -> KeyChoice:
    """The one rule for which key (if any) ``spec``'s requests carry, for every key source.

    ``configured`` is the provider's key from kgen's settings (the config file's
    ``openai_api_key``, ``KGEN_OPENAI_API_KEY``, an API argument); ``environ`` defaults to
    ``os.environ``. Why one function: the config file's key once went to a custom base URL
    while the same key from the environment was withheld, because each source had its own
    check. The rule:

    * a key variable named for the model (``#NAME``) is read wherever the model points; when
      it names the provider's own variable (``#OPENAI_API_KEY``), the provider's key from
      kgen's settings counts too (the settings' key wins, as everywhere);
    * else the provider's official endpoint gets the provider's key: kgen's settings, then
      the provider's variable;
    * else (any other server) nothing of the provider's: a placeholder.
    """
    env = os.environ if environ is None else environ
    provider_variable = DEFAULT_KEY_ENV[spec.provider]
    settings_name = f"{spec.provider}_api_key"
    both = f"{provider_variable} or {settings_name} in the config file"
    named = spec.api_key_env
    if named is not None:
        if named == provider_variable:
            return KeyChoice(key=_secret(configured or env.get(named)), hint=both)
        return KeyChoice(key=_secret(env.get(named)), hint=named)
    if is_official_endpoint(spec):
        return KeyChoice(key=_secret(configured or env.get(provider_variable)), hint=both)
    return KeyChoice(
        key=SecretStr(PLACEHOLDER_KEY), placeholder=True,
        hint=(f"the server's key: name the variable that holds it after the URL "
              f"({spec.provider}:{spec.model}@{spec.base_url}#MY_SERVER_KEY, or "
              f"#{provider_variable} to send your {spec.provider} key there; unnamed, it goes "
              f"only to {OFFICIAL_BASE_URLS[spec.provider]})"),
    )


def _secret(value: str | None) -> SecretStr | None:
    value = (value or "").strip()
    return SecretStr(value) if value else None


def make_client(
    spec: ModelSpec,
    *,
    api_key: str | None = None,
    timeout_s: float = 120.0,
    max_retries: int = 3,
) -> LLMClient:
    """Build the client for ``spec``; a missing key fails here, before any network call.

    ``api_key`` is the provider's key from kgen's settings; ``choose_api_key`` decides whether
    it (or any key) goes to ``spec``'s endpoint. The official endpoints are passed to the SDKs
    explicitly, so ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` in the environment cannot send
    a key somewhere the spec does not name; another endpoint is chosen in the spec
    (``@BASE_URL``).
    """
    choice = choose_api_key(spec, api_key)
    if choice.key is None:
        raise ProviderError(choice.missing_message(spec.label), kind="missing_key",
                            model=spec.label)
    key = choice.key.get_secret_value()
    key_hint = choice.hint
    redact = _redactor(key)
    base_url = spec.base_url or OFFICIAL_BASE_URLS[spec.provider]
    common = {"timeout_s": timeout_s, "max_retries": max_retries, "redact": redact,
              "key_hint": key_hint}
    if spec.provider == "openai":
        import openai

        sdk_client = openai.OpenAI(
            api_key=key,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
            http_client=_http_client(openai, base_url),
        )
        return _OpenAIChat(spec, sdk_client, openai, **common)
    import anthropic

    sdk_client = anthropic.Anthropic(
        api_key=key,
        base_url=base_url,
        timeout=timeout_s,
        max_retries=max_retries,
        http_client=_http_client(anthropic, base_url),
    )
    return _AnthropicMessages(spec, sdk_client, anthropic, **common)


def _http_client(sdk: Any, base_url: str) -> Any:
    """For a loopback server, an HTTP client that ignores proxy variables.

    A proxy set for the internet would otherwise also carry requests to 127.0.0.1 and fail
    on a machine with no network. ``trust_env=False`` alone is not enough (some SDK versions
    mount the environment's proxies themselves), so the client gets an explicit direct
    transport. Remote endpoints keep the SDK's default client, so a corporate proxy still
    works for them.
    """
    host = urlsplit(base_url).hostname or ""
    if not (host in _LOOPBACK_HOSTS or host.startswith("127.")):
        return None
    http = _http_library(sdk)
    return sdk.DefaultHttpxClient(trust_env=False, transport=http.HTTPTransport())


def _http_library(sdk: Any) -> Any:
    """The HTTP package the SDK is built on (``httpx`` or its successor ``httpx2``)."""
    for base in sdk.DefaultHttpxClient.__mro__:
        if base.__name__ == "Client" and base.__module__.split(".")[0].startswith("httpx"):
            return sys.modules[base.__module__.split(".")[0]]
    raise RuntimeError(f"cannot tell which HTTP library {sdk.__name__} uses")


def _accepts_temperature(spec: ModelSpec) -> bool:
    """OpenAI's reasoning models (o-series, gpt-5) reject any temperature but the default."""
    if spec.provider != "openai" or not spec.is_official_api:
        return True
    return not re.match(r"^(o\d|gpt-5)", spec.model)


def _redactor(key: str):
    def redact(text: str) -> str:
        if key:
            text = text.replace(key, "***")
        return _KEY_LIKE.sub(r"\1***", text)

    return redact


def _server_message(err: Any) -> str:
    """The server's own explanation from an error body, shortened (redacted by the caller)."""
    body = getattr(err, "body", None)
    message: Any = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
    if not message:
        message = getattr(err, "message", "") or ""
    message = " ".join(str(message).split())
    return message[:200]
