"""Model references: which LLM, at which endpoint, with what share of the ensemble's requests.

A person names models on the command line and in config as short strings; everything past
this module works with the typed ``ModelSpec``, so a typo fails here, with the syntax spelled
out, instead of as an HTTP 404 halfway through a run.

Syntax: ``PROVIDER:MODEL[@BASE_URL][#KEY_VARIABLE][*WEIGHT]``

* ``openai:gpt-5``, ``anthropic:claude-sonnet-4-5`` — the official APIs.
* ``openai:qwen2.5-coder@http://127.0.0.1:8000/v1`` — any OpenAI-compatible server (vLLM,
  Ollama, SGLang, LM Studio, a proxy). The URL is the one the OpenAI SDK takes, usually
  ending in ``/v1``. It starts with ``http://`` or ``https://``; that is how it is told apart
  from an ``@`` inside a model name (``claude-opus-4@20250514``).
* ``ollama:``, ``vllm:``, ``sglang:`` — OpenAI-compatible local servers at their default
  addresses (``http://127.0.0.1:11434/v1``, ``:8000/v1``, ``:30000/v1``), overridable with
  ``@BASE_URL``; ``local:`` is the same but always needs ``@BASE_URL``. They become
  ``provider="openai"`` with a base URL, because that is the protocol they speak.
* ``#KEY_VARIABLE`` — the NAME of the environment variable holding this model's key (never the
  key itself). A key goes only to its provider's official API unless the person names it for
  the model like this: ``openai:qwen@https://llm.corp.example/v1#CORP_LLM_KEY`` reads
  ``$CORP_LLM_KEY``; naming the provider's own variable (``#OPENAI_API_KEY``) sends the OpenAI
  key (from the environment or ``openai_api_key`` in the config file) to that server.
  ``kgen.agent.llm.providers.choose_api_key`` is the one place that decides.
* ``*WEIGHT`` (a positive number, default 1) — the model's share of generation requests in an
  ensemble: ``openai:gpt-5*2`` gets twice the candidates of a weight-1 model.

Model names may contain ``:`` (Ollama tags such as ``qwen2.5-coder:7b``); only the first
``:`` separates the provider.
"""

from __future__ import annotations

import math
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kgen.core.validation_errors import validation_message
from kgen.errors import KgenUsageError

Provider = Literal["openai", "anthropic"]

#: The providers' own APIs: where their keys belong (``ModelSpec.is_official_api``).
OFFICIAL_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}

SYNTAX_HELP = (
    "expected PROVIDER:MODEL[@BASE_URL][#KEY_VARIABLE][*WEIGHT], e.g. openai:gpt-5, "
    "anthropic:claude-sonnet-4-5, ollama:qwen2.5-coder:7b, "
    "openai:qwen2.5-coder@http://127.0.0.1:8000/v1, "
    "openai:m@https://llm.example.com/v1#MY_LLM_KEY, openai:gpt-5*2 "
    "(providers: openai, anthropic, ollama, vllm, sglang, local)"
)

# Default addresses of the local servers' OpenAI-compatible endpoints.
LOCAL_SERVER_URLS: dict[str, str | None] = {
    "ollama": "http://127.0.0.1:11434/v1",
    "vllm": "http://127.0.0.1:8000/v1",
    "sglang": "http://127.0.0.1:30000/v1",
    "local": None,
}

_WEIGHT = re.compile(r"\*\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")
_BASE_URL = re.compile(r"@(https?://\S+)$")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: what follows an ``@`` when a person meant a server but left out ``http://``: a host that is
#: ``localhost``, an IPv4 or bracketed IPv6 literal, or a dotted name ending in a letter label,
#: or any name with a port; optionally a port and a path. ``claude-opus-4@20250514`` is none.
_SCHEMELESS_URL = re.compile(
    r"^(?P<host>localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]"
    r"|(?:[A-Za-z0-9-]+\.)+[A-Za-z][A-Za-z0-9-]*|[A-Za-z0-9-]+(?=:\d))"
    r"(?::\d{1,5})?(?:/\S*)?$"
)


class ModelSpecError(KgenUsageError):
    """A model reference that does not parse; the message says what the syntax is."""


class ModelSpec(BaseModel):
    """One model at one endpoint.

    ``base_url`` None means the provider's official API. ``api_key_env`` names the environment
    variable holding the key (``#NAME`` in the model string); it is a name, never the key
    itself, so specs can be logged and saved in run directories. Naming it is how a person
    sends a key to a server other than the provider's own (see ``providers.choose_api_key``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: Provider
    model: str = Field(min_length=1)
    base_url: str | None = None
    weight: float = Field(default=1.0, gt=0)
    api_key_env: str | None = None

    @field_validator("model")
    @classmethod
    def _model_has_no_spaces(cls, value: str) -> str:
        if value != value.strip() or any(ch.isspace() for ch in value):
            raise ValueError(f"model name {value!r} contains whitespace")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"base URL {value!r} must start with http:// or https:// and a host")
        if "@" in value.split("://", 1)[1].split("/", 1)[0]:
            # Labels carry the URL into logs and reports; a password in it would go along.
            raise ValueError("base URL must not contain credentials; name the environment "
                             "variable holding the key after '#' instead (...@URL#MY_LLM_KEY)")
        return value.rstrip("/")

    @field_validator("weight")
    @classmethod
    def _weight_is_finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("weight must be a finite positive number")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name_looks_like_a_name(cls, value: str | None) -> str | None:
        # Guards against pasting the key itself here, which would then be logged as a "name".
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError("api_key_env must be the NAME of an environment variable")
        return value

    @property
    def label(self) -> str:
        """Stable identity for logs, ledgers and reports; ``parse_model(label)`` gives it back.

        The base URL is part of it because two servers can serve the same model name; the key
        variable's name too, because the run re-reads its clients from labels (it is a name,
        never the key).
        """
        text = f"{self.provider}:{self.model}"
        if self.base_url:
            text = f"{text}@{self.base_url}"
        return f"{text}#{self.api_key_env}" if self.api_key_env else text

    @property
    def is_official_api(self) -> bool:
        """Whether requests go to the provider's own API, the one place its key belongs (and
        the one whose prices and parameter names apply).

        No base URL, or one on the official host over https at the default port. The path does
        not matter (the key reaches the same server either way); plain http, another port or
        another host (``api.openai.com.example.net``) is someone else's server.
        """
        if self.base_url is None:
            return True
        url, official = urlsplit(self.base_url), urlsplit(OFFICIAL_BASE_URLS[self.provider])
        try:
            port = url.port
        except ValueError:
            return False
        return url.scheme == "https" and url.hostname == official.hostname and port in (None, 443)

    @property
    def endpoint(self) -> str:
        """Where requests go: the base URL named, else the provider's official API."""
        return self.base_url or OFFICIAL_BASE_URLS[self.provider]


def parse_model(text: str) -> ModelSpec:
    """Parse ``PROVIDER:MODEL[@BASE_URL][#KEY_VARIABLE][*WEIGHT]`` (see the module docstring)."""
    original = text
    text = text.strip()
    weight = 1.0
    if match := _WEIGHT.search(text):
        weight = float(match.group(1))
        text = text[: match.start()].rstrip()
    provider_name, sep, rest = text.partition(":")
    provider_name = provider_name.strip().lower()
    if not sep or not provider_name or not rest:
        raise ModelSpecError(f"bad model {original!r}: {SYNTAX_HELP}")
    if "*" in rest:
        raise ModelSpecError(f"bad model {original!r}: the weight after '*' must be a positive "
                             f"number; {SYNTAX_HELP}")
    api_key_env: str | None = None
    if "#" in rest:
        rest, _, api_key_env = rest.rpartition("#")
        if not _VARIABLE_NAME.fullmatch(api_key_env):
            # never echo what follows '#': it may be a pasted key
            shown = f"{original.split('#', 1)[0]}#..."
            raise ModelSpecError(
                f"bad model {shown!r}: after '#' comes the NAME of the environment variable "
                f"that holds this model's key (e.g. #MY_LLM_KEY), never the key itself")
    base_url: str | None = None
    if match := _BASE_URL.search(rest):
        base_url = match.group(1)
        rest = rest[: match.start()]
    elif "@http" in rest:
        raise ModelSpecError(f"bad model {original!r}: the base URL is malformed; {SYNTAX_HELP}")
    else:
        _reject_url_without_scheme(original, provider_name, rest)

    if provider_name in LOCAL_SERVER_URLS:
        base_url = base_url or LOCAL_SERVER_URLS[provider_name]
        if base_url is None:
            raise ModelSpecError(
                f"bad model {original!r}: {provider_name}: needs the server's address, "
                f"e.g. {provider_name}:{rest or 'MODEL'}@http://127.0.0.1:8000/v1"
            )
        provider_name = "openai"
    if provider_name not in ("openai", "anthropic"):
        raise ModelSpecError(f"bad model {original!r}: unknown provider {provider_name!r}; "
                             f"{SYNTAX_HELP}")
    try:
        return ModelSpec(provider=provider_name, model=rest, base_url=base_url, weight=weight,
                         api_key_env=api_key_env)
    except ValidationError as err:
        raise ModelSpecError(f"bad model {original!r}: {validation_message(err, locations=False)}; "
                             f"{SYNTAX_HELP}") from None


def _reject_url_without_scheme(original: str, provider: str, rest: str) -> None:
    """``openai:m@127.0.0.1:8000/v1`` means a server, not a model named ``m@127.0.0.1:8000/v1``
    at the official API (which would fail later as a missing key, with no hint): say which
    URL was probably meant. Plain http for local and private addresses, https otherwise."""
    if "@" not in rest:
        return
    _, _, tail = rest.rpartition("@")
    if "://" in tail:
        raise ModelSpecError(f"bad model {original!r}: the base URL {tail!r} must start with "
                             f"http:// or https://")
    match = _SCHEMELESS_URL.match(tail)
    if match is None:
        return
    host = match.group("host")
    plain = (host == "localhost" or host.startswith("[") or "." not in host
             or re.fullmatch(r"[\d.]+", host) is not None)
    meant = f"{'http' if plain else 'https'}://{tail}"
    raise ModelSpecError(f"bad model {original!r}: base URL needs a scheme: did you mean {meant}? "
                         f"(e.g. {provider}:{rest.rpartition('@')[0]}@{meant})")
