"""LLM clients on the official ``openai`` and ``anthropic`` SDKs, behind one small interface.

The agent only ever asks "system + user prompt in, text out", so ``LLMClient.complete`` is
that and nothing more; everything provider-specific (parameter names, usage fields, error
classes) stays in here. Retries with exponential backoff on 429 / 5xx / connection errors are
the SDKs' own (``max_retries``); what surfaces after them is one ``ProviderError`` whose
``kind`` tells the agent whether to wait, skip the model or stop, and whose message tells the
person what to do.

Deadlines: every call has one, for the whole call — every attempt, the waits between them and
a reply's bytes however slowly they come: ``timeout_s`` (the ``llm_timeout_s`` option) from its
start, or the client's ``not_after`` (a run's time limit) if that comes first. The SDKs' own
timeout is per read, so a server that sends a byte a second never trips it; so the SDK call
runs in a worker thread with its own connections, and at the deadline the caller stops
waiting, closes those connections (the worker then ends at its next read) and raises a
``timeout`` error that names the option to raise. While it waits, the call is on the board of
calls in flight (``kgen.agent.llm.model_calls.IN_FLIGHT``) that the live status line shows.

Keys: ``choose_api_key`` alone decides which key a model's requests carry, whatever the key's
source (kgen's settings: the config file, ``KGEN_OPENAI_API_KEY``, an explicit argument; the
provider's variable ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``; a variable the model names).
A provider's key goes only to that provider's official endpoint, unless the person names a key
for the model (``...@URL#VARIABLE``, see ``kgen.agent.llm.models``); any other server gets a
placeholder (local servers ignore it). A key never appears in a message, repr or log line:
server error text is quoted only after redaction.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr

from kgen.agent.llm.completion import Completion
from kgen.agent.llm.model_calls import IN_FLIGHT, ModelCall
from kgen.agent.llm.models import OFFICIAL_BASE_URLS, ModelSpec
from kgen.agent.llm.usage import cost_usd
from kgen.core.settings import default_of
from kgen.errors import KgenError

log = logging.getLogger(__name__)

ProviderErrorKind = Literal[
    "missing_key", "auth", "unreachable", "rate_limited", "timeout", "bad_reply", "other"
]
TRANSIENT_KINDS: frozenset[str] = frozenset({"unreachable", "rate_limited", "timeout"})

DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
# Sent to OpenAI-compatible servers that take no key; the SDK refuses to run without one.
PLACEHOLDER_KEY = "kgen-local-no-key"

#: a call started as the run's time limit runs out still gets this long, and no call outlives
#: the run's time limit by more (``Runner`` sets ``not_after`` to the limit plus this)
RUN_END_GRACE_S = 5.0
#: the SDK's per-read timeout outlasts the deadline by this much, so the deadline (with its
#: message) is what the caller sees, and a silent server's attempt still ends on its own
_READ_TIMEOUT_MARGIN_S = 1.0

_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}
_KEY_LIKE = re.compile(r"\b(sk-(?:ant-|proj-)?)[A-Za-z0-9_\-]{6,}")


class ProviderError(KgenError):
    """An LLM call that failed after the SDK's retries, classified for the agent."""

    def __init__(self, message: str, *, kind: ProviderErrorKind, model: str | None = None,
                 attempts: int | None = None):
        super().__init__(message)
        self.message = message
        self.kind: ProviderErrorKind = kind
        self.model = model
        #: requests sent before giving up (the SDK's retries included); None where not counted.
        #: A run that stops on this error records it (``agent/runs/run_end.py``)
        self.attempts = attempts

    @property
    def transient(self) -> bool:
        """Worth trying again later (rate limit, timeout, server unreachable)."""
        return self.kind in TRANSIENT_KINDS

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only fields survive pickling (errors cross process boundaries in workers).
        return (_rebuild_provider_error, (self.message, self.kind, self.model, self.attempts))

    def __repr__(self) -> str:
        return f"ProviderError(kind={self.kind!r}, model={self.model!r}, message={self.message!r})"


def _rebuild_provider_error(message: str, kind: ProviderErrorKind, model: str | None,
                            attempts: int | None = None):
    return ProviderError(message, kind=kind, model=model, attempts=attempts)


@dataclass(frozen=True)
class RawReply:
    """What a provider's ``_send`` returns; ``LLMClient.complete`` adds timing and cost."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str | None


class LLMClient(ABC):
    """Ask one model for a completion. Subclass ``_send`` to add a provider (or a test double).

    ``timeout_s`` is the deadline of one call, everything included; ``max_retries`` how often
    a failed attempt is tried again within it; ``not_after`` a ``time.monotonic()`` past which
    no call runs (a run's time limit plus a grace), None for none.
    """

    def __init__(self, spec: ModelSpec, *, timeout_s: float, max_retries: int,
                 not_after: float | None = None):
        self.spec = spec
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.not_after = not_after

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def endpoint(self) -> str:
        """The base URL requests go to."""
        return self.spec.endpoint

    def complete(
        self, system: str, user: str, *, max_tokens: int, temperature: float, purpose: str = ""
    ) -> Completion:
        """The model's reply, or a ProviderError by the call's deadline at the latest.

        ``purpose`` (a candidate id, "spec") is what the live status shows the call is for.
        """
        started = time.monotonic()
        call = self._new_call(purpose, started)
        if call.deadline <= started:
            raise self._deadline_error(call)
        with IN_FLIGHT.track(call):
            try:
                raw = self._within_deadline(call, lambda: self._send(
                    system, user, max_tokens=max_tokens, temperature=temperature, call=call))
            except ProviderError:
                raise
            except Exception as err:
                translated = self._translate(err, call)
                if translated is None:
                    raise
                raise translated from None
        seconds = time.monotonic() - started
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

    def _new_call(self, purpose: str, started: float) -> ModelCall:
        own = started + self.timeout_s
        if self.not_after is not None and self.not_after < own:
            return ModelCall(self.label, purpose, started=started, deadline=self.not_after,
                             bound="run_time", owner=self)
        return ModelCall(self.label, purpose, started=started, deadline=own, bound="llm_timeout",
                         owner=self)

    def _within_deadline(self, call: ModelCall, send: Callable[[], RawReply]) -> RawReply:
        """``send()`` in a worker thread, waited on until the call's deadline and no longer.

        At the deadline (or on Ctrl-C) the call is aborted: its connections are closed, so the
        worker ends at its next read, and whatever it returns later is dropped. The worker is
        a daemon thread: an abandoned call never holds the process open. A call aborted from
        elsewhere (``CallsInFlight.abandon``: the run is stopping) stops the wait at once.
        """
        outcome: dict[str, Any] = {}
        finished = threading.Event()
        call.on_abort(finished.set)

        def work() -> None:
            try:
                outcome["reply"] = send()
            except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = err
            finally:
                finished.set()

        worker = threading.Thread(target=work, name=f"kgen model call: {self.label}", daemon=True)
        try:
            worker.start()
            answered = finished.wait(max(0.0, call.deadline - time.monotonic()))
        except BaseException:
            call.abort()
            raise
        if not answered:
            call.abort()
            raise self._deadline_error(call)
        if call.aborted:
            raise ProviderError(f"{self.label}: the call was abandoned (kgen is stopping)",
                                kind="other", model=self.label)
        if "error" in outcome:
            raise outcome["error"]
        return outcome["reply"]

    def _deadline_error(self, call: ModelCall) -> ProviderError:
        waited = max(0.0, time.monotonic() - call.started)
        if call.bound == "run_time":
            if call.attempts == 0 and waited < 0.5:
                message = (f"the run's time limit had run out before {self.label} was asked: "
                           "raise --time to give the models longer")
            else:
                message = (f"{self.label} had not answered after {waited:.0f} s "
                           f"({_attempts(call.attempts)}) when the run's time limit ran out: "
                           f"raise --time to give the models longer")
        else:
            message = (f"{self.label} did not answer within {self.timeout_s:g} s "
                       f"({_attempts(call.attempts)}): raise --llm-timeout (llm_timeout_s), "
                       f"or check the server{self._at}")
        return ProviderError(message, kind="timeout", model=self.label, attempts=call.attempts)

    @property
    def _at(self) -> str:
        """Where an official endpoint is, for messages (a custom URL is in the label already)."""
        return "" if self.spec.base_url else f" at {self.endpoint}"

    @abstractmethod
    def _send(self, system: str, user: str, *, max_tokens: int, temperature: float,
              call: ModelCall) -> RawReply:
        """One call through the SDK (its retries included). Runs in a worker thread: close
        what it opens through ``call.on_abort`` so an abandoned call lets go of it."""

    def _translate(self, err: Exception, call: ModelCall) -> ProviderError | None:
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
        """Release what the client holds between calls (each call closes its own connections)."""

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.label}, timeout_s={self.timeout_s}, "
            f"max_retries={self.max_retries})"
        )


def _attempts(n: int) -> str:
    return f"{n} attempt{'s' if n != 1 else ''}"


class _SDKClient(LLMClient):
    """Shared by both providers: the SDKs raise parallel exception hierarchies.

    ``connect(on_request)`` makes an SDK client with its own HTTP connections that calls
    ``on_request`` for every request it sends; each call gets a fresh one, so closing an
    abandoned call's connections never touches another call of the same model.
    """

    def __init__(self, spec: ModelSpec, connect: Callable[[Callable[..., object]], Any],
                 sdk_module: Any, *, redact: Any, key_hint: str, timeout_s: float,
                 max_retries: int, not_after: float | None = None):
        super().__init__(spec, timeout_s=timeout_s, max_retries=max_retries, not_after=not_after)
        self._connect = connect
        self._sdk_module = sdk_module
        self._redact = redact
        self._key_hint = key_hint

    def _send(self, system: str, user: str, *, max_tokens: int, temperature: float,
              call: ModelCall) -> RawReply:
        sdk = self._connect(call.attempt_sent)
        call.on_abort(sdk.close)
        try:
            # the SDK's timeout is per read: it cannot end a trickle, the deadline does
            read_timeout = max(0.0, call.deadline - time.monotonic()) + _READ_TIMEOUT_MARGIN_S
            return self._ask(sdk, system, user, max_tokens=max_tokens, temperature=temperature,
                             timeout=read_timeout)
        finally:
            sdk.close()

    @abstractmethod
    def _ask(self, sdk: Any, system: str, user: str, *, max_tokens: int, temperature: float,
             timeout: float) -> RawReply:
        """One request through ``sdk`` (its retries included)."""

    def _translate(self, err: Exception, call: ModelCall) -> ProviderError | None:
        sdk = self._sdk_module
        label, at = self.label, self._at
        tries = _attempts(max(call.attempts, 1))

        def error(kind: ProviderErrorKind, message: str) -> ProviderError:
            return ProviderError(self._redact(message), kind=kind, model=label, attempts=max(call.attempts, 1))

        if isinstance(err, sdk.APITimeoutError):
            return self._deadline_error(call)
        if isinstance(err, sdk.APIConnectionError):
            return error("unreachable", f"cannot reach {label}{at} ({tries}): is the server "
                                        f"running, the base URL right and the network up?")
        if isinstance(err, sdk.APIResponseValidationError) or isinstance(err, json.JSONDecodeError):
            return self._bad_reply(f"{type(err).__name__}: {self._redact(str(err))[:200]}")
        if isinstance(err, sdk.APIStatusError):
            status = err.status_code
            said = server_message(err)
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
                                      f"the provider is failing, try again later (--llm-retries "
                                      f"sets how often a failed call is retried)")
            return error("other", f"{label}: request rejected (HTTP {status}{said})")
        if isinstance(err, sdk.APIError):
            return error("other", f"{label}: {type(err).__name__}: {str(err)[:200]}")
        return None


class _OpenAIChat(_SDKClient):
    def _ask(self, sdk: Any, system: str, user: str, *, max_tokens: int, temperature: float,
             timeout: float) -> RawReply:
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
        response = sdk.chat.completions.create(**kwargs, timeout=timeout)
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
    def _ask(self, sdk: Any, system: str, user: str, *, max_tokens: int, temperature: float,
             timeout: float) -> RawReply:
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
        response = sdk.messages.create(**kwargs, timeout=timeout)
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
    if spec.is_official_api:
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
    timeout_s: float | None = None,
    max_retries: int | None = None,
    not_after: float | None = None,
) -> LLMClient:
    """Build the client for ``spec``; a missing key fails here, before any network call.

    ``api_key`` is the provider's key from kgen's settings; ``choose_api_key`` decides whether
    it (or any key) goes to ``spec``'s endpoint. The official endpoints are passed to the SDKs
    explicitly, so ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` in the environment cannot send
    a key somewhere the spec does not name; another endpoint is chosen in the spec
    (``@BASE_URL``). ``timeout_s`` and ``max_retries`` default to the ``llm_timeout_s`` and
    ``llm_retries`` settings' defaults; ``not_after`` see ``LLMClient``.
    """

    timeout_s = default_of("llm_timeout_s") if timeout_s is None else timeout_s
    max_retries = default_of("llm_retries") if max_retries is None else max_retries
    choice = choose_api_key(spec, api_key)
    if choice.key is None:
        raise ProviderError(choice.missing_message(spec.label), kind="missing_key",
                            model=spec.label)
    key = choice.key.get_secret_value()
    key_hint = choice.hint
    redact = redactor(key)
    base_url = spec.endpoint
    common = {"timeout_s": timeout_s, "max_retries": max_retries, "not_after": not_after,
              "redact": redact, "key_hint": key_hint}
    if spec.provider == "openai":
        import openai

        def connect_openai(on_request: Callable[..., object]) -> Any:
            return openai.OpenAI(
                api_key=key,
                base_url=base_url,
                timeout=timeout_s,
                max_retries=max_retries,
                http_client=_call_http_client(openai, base_url, on_request),
            )

        return _OpenAIChat(spec, connect_openai, openai, **common)
    import anthropic

    def connect_anthropic(on_request: Callable[..., object]) -> Any:
        return anthropic.Anthropic(
            api_key=key,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
            http_client=_call_http_client(anthropic, base_url, on_request),
        )

    return _AnthropicMessages(spec, connect_anthropic, anthropic, **common)


def _call_http_client(sdk: Any, base_url: str, on_request: Callable[..., object]) -> Any:
    """The HTTP client of one call (its own connections), telling ``on_request`` of each
    request it sends (the first and every retry)."""
    http_client = _http_client(sdk, base_url)
    http_client.event_hooks["request"].append(on_request)
    return http_client


def _http_client(sdk: Any, base_url: str) -> Any:
    """An HTTP client for ``base_url``: the SDK's default one.

    For a loopback server it ignores proxy variables: a proxy set for the internet would
    otherwise also carry requests to 127.0.0.1 and fail on a machine with no network.
    ``trust_env=False`` alone is not enough (some SDK versions mount the environment's proxies
    themselves), so the client gets an explicit direct transport. Remote endpoints keep the
    SDK's default transport, so a corporate proxy still works for them.
    """
    host = urlsplit(base_url).hostname or ""
    if not (host in _LOOPBACK_HOSTS or host.startswith("127.")):
        return sdk.DefaultHttpxClient()
    http = http_library(sdk)
    return sdk.DefaultHttpxClient(trust_env=False, transport=http.HTTPTransport())


def http_library(sdk: Any) -> Any:
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


def redactor(key: str):
    def redact(text: str) -> str:
        if key:
            text = text.replace(key, "***")
        return _KEY_LIKE.sub(r"\1***", text)

    return redact


def server_message(err: Any) -> str:
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
