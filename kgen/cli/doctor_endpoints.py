"""`kgen doctor`'s model endpoint checks: can a run use each configured model?

Unless told to stay offline, doctor asks each configured model's endpoint, through the real
SDK and with a short deadline (``ENDPOINT_DEADLINE_S``, all endpoints at once), for its
models list, or for a one-token completion when the server has no list (or does not list the
model). Each model's line says whether the server is reachable (and if not, why: connection
refused, a host name that does not resolve, no answer in time), whether the key was accepted
(naming where that key comes from, by ``choose_api_key``, the rule a run uses), whether the
server serves the model, and how long it took. Like every probe of doctor's, a check never
raises: what breaks is a finding (``safe``, ``one_line`` here serve ``kgen.cli.doctor`` too).
"""

from __future__ import annotations

import errno
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel

from kgen.agent.llm.models import ModelSpecError, parse_model
from kgen.agent.llm.providers import (
    DEFAULT_KEY_ENV,
    choose_api_key,
    http_library,
    redactor,
    server_message,
)
from kgen.agent.llm.usage import SNAPSHOT_SUFFIX
from kgen.api import api_keys
from kgen.core.settings import Settings

if TYPE_CHECKING:
    from kgen.agent.llm.models import ModelSpec
    from kgen.agent.llm.providers import KeyChoice

T = TypeVar("T")

#: how long each model endpoint gets to answer `kgen doctor`, all requests to it included
ENDPOINT_DEADLINE_S = 5.0
EndpointStatus = Literal[
    "ok", "unreachable", "timeout", "key rejected", "model not found", "error", "no key",
    "bad model", "not checked",
]


class EndpointCheck(BaseModel):
    """What one configured model's endpoint answered `kgen doctor` (never the key)."""

    #: the model as configured (``openai:gpt-5*2``)
    model: str
    #: the base URL its requests go to; None when the model string does not parse
    endpoint: str | None = None
    status: EndpointStatus
    #: False: a run cannot use this model; None: not known (not checked, offline)
    usable: bool | None
    #: milliseconds until the server answered the request that decided, when it answered
    latency_ms: float | None = None
    #: whether the server's models list names the model; None when it has no list or was not asked
    listed: bool | None = None
    #: the finding in plain words
    detail: str


def safe(probe: Callable[[], T], fallback: T) -> T:
    """``probe()``, or ``fallback`` when it raises: for what doctor would rather not know than crash on."""
    try:
        return probe()
    except Exception:
        return fallback


def one_line(exc: BaseException) -> str:
    """An exception's first line, as a report line quotes it."""
    text = str(exc).strip().splitlines()
    return text[0] if text else ""



# --------------------------------------------------------------------------------------
# Model endpoints: can a run use each configured model?
# --------------------------------------------------------------------------------------


def check_models(settings: Settings, *, offline: bool = False,
                 deadline_s: float = ENDPOINT_DEADLINE_S) -> list[EndpointCheck]:
    """One ``EndpointCheck`` per configured model, in the configured order.

    Endpoints are asked in parallel, each within ``deadline_s``; a server that has not
    answered by then (however slowly it sends bytes) is reported as not answering in time,
    and doctor does not wait for it.
    """

    configured = api_keys(settings)
    checks: dict[str, EndpointCheck] = {}
    asks: dict[str, tuple[str, Callable[[list[Any]], EndpointCheck]]] = {}
    labels: dict[str, str] = {}
    for text in settings.models:
        try:
            spec = parse_model(text)
        except ModelSpecError as exc:
            checks[text] = EndpointCheck(model=text, status="bad model", usable=False, detail=one_line(exc))
            continue
        endpoint = spec.endpoint
        # the run's own rule: the doctor sends exactly the key a run would send, or none
        choice = choose_api_key(spec, configured.get(spec.provider))
        if choice.key is None:
            checks[text] = EndpointCheck(model=text, endpoint=endpoint, status="no key", usable=False,
                                         detail=f"not asked: no API key; set {choice.hint}")
        elif offline:
            checks[text] = EndpointCheck(model=text, endpoint=endpoint, status="not checked", usable=None,
                                         detail=f"{endpoint}: not checked (offline)")
        else:
            labels[text] = spec.label  # weights aside, one request per endpoint and model
            asks.setdefault(spec.label, (endpoint, _asker(
                spec, endpoint, choice, _key_source(settings, spec, choice), deadline_s)))
    for provider in {parse_model(label).provider for label in asks}:
        # before the clocks start: an SDK's import time is no endpoint's slowness (and an
        # SDK that fails to import is reported by each of its models' checks)
        safe(lambda provider=provider: __import__(provider), None)
    answers = _ask_in_parallel(asks, deadline_s)
    for text, label in labels.items():
        checks[text] = answers[label].model_copy(update={"model": text})
    return [checks[text] for text in settings.models if text in checks]


def _key_source(settings: Settings, spec: ModelSpec, choice: KeyChoice) -> str:
    """Where the key ``choose_api_key`` picked comes from, in its own order (never the key)."""

    if choice.placeholder:
        return "kgen's placeholder (no key)"
    provider_variable = DEFAULT_KEY_ENV[spec.provider]
    if spec.api_key_env is not None and spec.api_key_env != provider_variable:
        return f"the one in ${spec.api_key_env}"
    field = f"{spec.provider}_api_key"
    if getattr(settings, field, None) is not None:
        source = settings.sources.get(field, "")
        if source.startswith("config file "):
            return f"{field} in the config file {source.removeprefix('config file ')}"
        if source.startswith("env "):
            return f"the one in ${source.removeprefix('env ')}"
        return f"the {spec.provider} key given to kgen"
    return f"the one in ${provider_variable}"


def _ask_in_parallel(asks: dict[str, tuple[str, Callable[[list[Any]], EndpointCheck]]],
                     deadline_s: float) -> dict[str, EndpointCheck]:
    """Run every ask in its own daemon thread; whatever has not answered by the deadline (plus
    a little for the SDK to give up on its own) is reported as not answering in time."""
    answers: dict[str, EndpointCheck] = {}
    clients: dict[str, list[Any]] = {label: [] for label in asks}
    lock = threading.Lock()

    def run(label: str, ask: Callable[[list[Any]], EndpointCheck]) -> None:
        answer = ask(clients[label])
        with lock:
            answers[label] = answer

    threads = [threading.Thread(target=run, args=(label, ask), daemon=True, name=f"kgen doctor: {label}")
               for label, (_, ask) in asks.items()]
    for thread in threads:
        thread.start()
    hard_end = time.monotonic() + deadline_s + 0.5
    for thread in threads:
        thread.join(max(0.0, hard_end - time.monotonic()))
    with lock:
        done = dict(answers)
    for label, (endpoint, _) in asks.items():
        if label not in done:
            done[label] = EndpointCheck(model=label, endpoint=endpoint, status="timeout", usable=False,
                                        detail=f"unreachable: no answer from {endpoint} within "
                                               f"{deadline_s:g} s (timed out)")
            for client in clients[label]:  # let go of its connections; the thread ends on its own
                safe(client.close, None)
    return done


def _asker(spec: ModelSpec, endpoint: str, choice: KeyChoice, key_source: str,
           deadline_s: float) -> Callable[[list[Any]], EndpointCheck]:
    def ask(clients: list[Any]) -> EndpointCheck:
        try:
            return _ask_endpoint(spec, endpoint, choice, key_source, deadline_s, clients)
        except Exception as exc:  # a check that breaks is a finding, never a crash
            return EndpointCheck(model=spec.label, endpoint=endpoint, status="error", usable=False,
                                 detail=f"check failed: {type(exc).__name__}: {one_line(exc)}")

    return ask


def _ask_endpoint(spec: ModelSpec, endpoint: str, choice: KeyChoice, key_source: str,
                  deadline_s: float, clients: list[Any]) -> EndpointCheck:
    """The models list, then (no list, or the model not on it) a one-token completion."""

    assert choice.key is not None
    key = choice.key.get_secret_value()
    redact = redactor(key)  # never a key in a report line, even one a server quoted back
    end = time.monotonic() + deadline_s
    sdk, client = _sdk_client(spec.provider, endpoint, key, deadline_s)
    clients.append(client)

    def left() -> float:
        return max(0.05, end - time.monotonic())

    def latency_ms(latency: float) -> float:
        return round(latency * 1000, 1)

    def reachable(latency: float) -> str:
        """The text is written from the recorded figure, so the two never disagree by a rounding."""
        return f"reachable in {latency_ms(latency):.0f} ms"

    def result(status: EndpointStatus, usable: bool, detail: str, latency: float | None = None,
               listed: bool | None = None) -> EndpointCheck:
        return EndpointCheck(model=spec.label, endpoint=endpoint, status=status, usable=usable,
                             latency_ms=None if latency is None else latency_ms(latency),
                             listed=listed, detail=redact(detail))

    def rejected(err: Any, latency: float) -> EndpointCheck:
        said = f"key rejected (HTTP {err.status_code}{server_said(err)}) by {endpoint}"
        if choice.placeholder:
            return result("key rejected", False, f"{said}: kgen sent it no key, only a placeholder; "
                          f"give it {choice.hint}", latency)
        return result("key rejected", False, f"{said}; the key sent is {key_source}", latency)

    def server_said(err: Any) -> str:
        said = server_message(err)
        return f": {said}" if said else ""

    try:
        started = time.perf_counter()
        names: list[str] | None
        try:
            names = _model_names(spec, client, left)
        except sdk.APIStatusError as err:
            if err.status_code == 401:  # 403 may only forbid listing (a restricted key): ask below
                return rejected(err, time.perf_counter() - started)
            names = None
        except (sdk.APIResponseValidationError, ValueError, TypeError, AttributeError):
            names = None  # a "list" kgen cannot read: the completion tells
        list_latency = time.perf_counter() - started
        if names is not None and _listed(spec.model, names):
            return result("ok", True, f"{reachable(list_latency)}; the server lists {spec.model}",
                          list_latency, listed=True)
        started = time.perf_counter()
        try:
            _one_token(spec, client, official=spec.is_official_api, timeout=left())
        except sdk.APIStatusError as err:
            latency = time.perf_counter() - started
            if err.status_code in (401, 403):
                return rejected(err, latency)
            if err.status_code == 404 and names is not None:
                return result("model not found", False,
                              f"{reachable(latency)}, but the server does not serve {spec.model}: "
                              f"its models list names {_some(names)}, not {spec.model}, and a completion for "
                              f"it got HTTP 404{server_said(err)}", latency, listed=False)
            if err.status_code == 404:
                return result("model not found", False,
                              f"{reachable(latency)}, but a completion for {spec.model} got "
                              f"HTTP 404{server_said(err)}: check the model name and the base URL", latency)
            return result("error", False, f"{reachable(latency)}, but a completion for "
                          f"{spec.model} got HTTP {err.status_code}{server_said(err)}", latency,
                          listed=None if names is None else False)
        except sdk.APIResponseValidationError as err:
            latency = time.perf_counter() - started
            return result("error", False, f"reachable, but {endpoint} does not answer in the {spec.provider} "
                          f"protocol ({type(err).__name__}): check the base URL", latency)
        latency = time.perf_counter() - started
        if names is None:
            return result("ok", True, f"{reachable(latency)}; answered a one-token completion "
                          "(the server has no models list)", latency)
        return result("ok", True, f"{reachable(latency)}; {spec.model} is not in the server's "
                      "models list, but it answered a one-token completion", latency, listed=False)
    except sdk.APITimeoutError:
        return result("timeout", False,
                      f"unreachable: no answer from {endpoint} within {deadline_s:g} s (timed out)")
    except sdk.APIConnectionError as err:
        return result("unreachable", False, f"unreachable: {_connection_words(err, endpoint)}")
    finally:
        safe(client.close, None)


def _sdk_client(provider: str, endpoint: str, key: str, timeout_s: float) -> tuple[Any, Any]:
    """The provider's SDK module and a client for ``endpoint``: no retries, a short timeout.

    The base URL is always explicit (``OPENAI_BASE_URL`` in the environment cannot redirect
    the key), and a loopback server is reached directly, never through a proxy meant for
    the internet (as the run's clients do).
    """
    if provider == "openai":
        import openai as sdk

        make = sdk.OpenAI
    else:
        import anthropic as sdk

        make = sdk.Anthropic

    host = urlsplit(endpoint).hostname or ""
    http_client = None
    if host in ("localhost", "::1") or host.startswith("127."):
        http_client = sdk.DefaultHttpxClient(trust_env=False, transport=http_library(sdk).HTTPTransport())
    client = make(api_key=key, base_url=endpoint, timeout=timeout_s, max_retries=0, http_client=http_client)
    return sdk, client


#: how many names of a models list doctor reads (a page or two)
_MAX_LISTED = 2000


def _model_names(spec: ModelSpec, client: Any, left: Callable[[], float]) -> list[str]:
    extra = {"limit": 1000} if spec.provider == "anthropic" else {}
    names: list[str] = []
    for model in client.models.list(timeout=left(), **extra):
        names.append(str(model.id))
        if len(names) >= _MAX_LISTED:
            break
    return names


def _listed(model: str, names: list[str]) -> bool:
    """Whether a models list names ``model``: exactly, as a dated snapshot or alias of it
    (``claude-sonnet-4-5`` is listed as ``claude-sonnet-4-5-20250929``), or as Ollama's
    ``NAME:latest``."""

    wanted = {model, SNAPSHOT_SUFFIX.sub("", model)}
    if ":" not in model:
        wanted.add(f"{model}:latest")
    return any(name in wanted or SNAPSHOT_SUFFIX.sub("", name.removeprefix("models/")) in wanted
               for name in names)


def _one_token(spec: ModelSpec, client: Any, *, official: bool, timeout: float) -> None:
    messages = [{"role": "user", "content": "Reply with OK."}]
    if spec.provider == "anthropic":
        client.messages.create(model=spec.model, max_tokens=1, messages=messages, timeout=timeout)
        return
    # the official API renamed the limit (reasoning models refuse the old name); other
    # OpenAI-compatible servers know the old one
    limit = {"max_completion_tokens": 1} if official else {"max_tokens": 1}
    client.chat.completions.create(model=spec.model, messages=messages, timeout=timeout, **limit)


def _some(names: list[str], shown: int = 5) -> str:
    if not names:
        return "no models"
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _connection_words(err: BaseException, endpoint: str) -> str:
    """Why a connection failed, in plain words, from the exceptions under the SDK's own."""
    url = urlsplit(endpoint)
    host = url.hostname or endpoint
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        port = "?"
    chain: list[BaseException] = []
    seen: BaseException | None = err
    while seen is not None and seen not in chain and len(chain) < 12:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for exc in chain:
        for inner in (exc, *(arg for arg in getattr(exc, "args", ()) if isinstance(arg, BaseException))):
            if isinstance(inner, socket.gaierror):
                return f"the host name {host} does not resolve (DNS lookup failed)"
            if isinstance(inner, ConnectionRefusedError) or getattr(inner, "errno", None) == errno.ECONNREFUSED:
                return f"connection refused: nothing listens at {host}:{port} (is the server running?)"
            if getattr(inner, "errno", None) in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                return f"no route to {host}:{port} (network unreachable)"
            if isinstance(inner, ssl.SSLError):
                return f"the TLS handshake with {host} failed ({one_line(inner) or type(inner).__name__})"
    text = " ".join(str(exc) for exc in chain).lower()
    if "connection refused" in text:
        return f"connection refused: nothing listens at {host}:{port} (is the server running?)"
    if any(words in text for words in ("name or service not known", "nodename nor servname",
                                       "name resolution", "getaddrinfo failed")):
        return f"the host name {host} does not resolve (DNS lookup failed)"
    if "certificate" in text or "ssl" in text:
        return f"the TLS handshake with {host} failed"
    if "proxy" in text:
        return f"the proxy refused the connection to {host}:{port}"
    detail = next((one_line(exc) for exc in reversed(chain) if one_line(exc)), type(err).__name__)
    return f"cannot connect to {host}:{port} ({detail})"
