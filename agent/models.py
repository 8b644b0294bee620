"""Model references: which LLM, at which endpoint, with what share of the ensemble's requests.

A person names models on the command line and in config as short strings; everything past
this module works with the typed ``ModelSpec``, so a typo fails here, with the syntax spelled
out, instead of as an HTTP 404 halfway through a run.

Syntax: ``PROVIDER:MODEL[@BASE_URL][*WEIGHT]``

* ``openai:gpt-5``, ``anthropic:claude-sonnet-4-5`` — the official APIs.
* ``openai:qwen2.5-coder@http://127.0.0.1:8000/v1`` — any OpenAI-compatible server (vLLM,
  Ollama, SGLang, LM Studio, a proxy). The URL is the one the OpenAI SDK takes, usually
  ending in ``/v1``. It starts with ``http://`` or ``https://``; that is how it is told apart
  from an ``@`` inside a model name (``claude-opus-4@20250514``).
* ``ollama:``, ``vllm:``, ``sglang:`` — OpenAI-compatible local servers at their default
  addresses (``http://127.0.0.1:11434/v1``, ``:8000/v1``, ``:30000/v1``), overridable with
  ``@BASE_URL``; ``local:`` is the same but always needs ``@BASE_URL``. They become
  ``provider="openai"`` with a base URL, because that is the protocol they speak.
* ``*WEIGHT`` (a positive number, default 1) — the model's share of generation requests in an
  ensemble: ``openai:gpt-5*2`` gets twice the candidates of a weight-1 model.

Model names may contain ``:`` (Ollama tags such as ``qwen2.5-coder:7b``); only the first
``:`` separates the provider.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

Provider = Literal["openai", "anthropic"]

SYNTAX_HELP = (
    "expected PROVIDER:MODEL[@BASE_URL][*WEIGHT], e.g. openai:gpt-5, "
    "anthropic:claude-sonnet-4-5, ollama:qwen2.5-coder:7b, "
    "openai:qwen2.5-coder@http://127.0.0.1:8000/v1, openai:gpt-5*2 "
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


class ModelSpecError(ValueError):
    """A model reference that does not parse; the message says what the syntax is."""


class ModelSpec(BaseModel):
    """One model at one endpoint.

    ``base_url`` None means the provider's official API. ``api_key_env`` names the environment
    variable holding the key when it is not the provider's usual one; it is a name, never the
    key itself, so specs can be logged and saved in run directories.
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
            raise ValueError("base URL must not contain credentials; name a key variable in "
                             "api_key_env instead")
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

        The base URL is part of it because two servers can serve the same model name.
        """
        text = f"{self.provider}:{self.model}"
        return f"{text}@{self.base_url}" if self.base_url else text

    @property
    def is_official_api(self) -> bool:
        return self.base_url is None


def parse_model(text: str) -> ModelSpec:
    """Parse ``PROVIDER:MODEL[@BASE_URL][*WEIGHT]`` (see the module docstring)."""
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
    base_url: str | None = None
    if match := _BASE_URL.search(rest):
        base_url = match.group(1)
        rest = rest[: match.start()]
    elif "@http" in rest:
        raise ModelSpecError(f"bad model {original!r}: the base URL is malformed; {SYNTAX_HELP}")

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
        return ModelSpec(provider=provider_name, model=rest, base_url=base_url, weight=weight)
    except ValidationError as err:
        reasons = "; ".join(e["msg"] for e in err.errors())
        raise ModelSpecError(f"bad model {original!r}: {reasons}; {SYNTAX_HELP}") from None
