"""kgen's settings: one config file, ``KGEN_*`` environment variables and explicit arguments.

Layers, lowest to highest: built-in defaults < the config file
(``$KGEN_HOME/config.toml``, or the file ``KGEN_CONFIG`` names) < ``KGEN_<FIELD>``
environment variables < explicit overrides (CLI flags, API arguments). Each
value remembers which layer set it, because "why is it using that model?" is
the first question a person asks of a tool configured in three places.

Every mistake is a :class:`SettingsError` with a one-line message that names
the place to fix (file and line, or the variable) and what was expected.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from kgen.backends.registry import known_backends
from kgen.backends.targets import resolve_target
from kgen.core.config import kgen_home
from kgen.core.option_table import (
    ENV_PREFIX,
    OPTIONS,
    Option,
    option,
    pydantic_fields,
    render_default_config,
)
from kgen.core.validation_errors import error_message
from kgen.errors import KgenUsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: the environment variable naming a config file other than $KGEN_HOME/config.toml
CONFIG_ENV = "KGEN_CONFIG"


class SettingsError(KgenUsageError):
    """A config file, environment variable or argument kgen cannot use; the message is one line."""


class _SettingsRules(BaseModel):
    """What :class:`Settings` adds to its fields, which ``kgen.core.option_table`` declares: the
    checks that need kgen's registries, where each value came from, and resolved locations."""

    model_config = ConfigDict(extra="forbid")

    #: field name -> "default" | "config file <path>" | "env KGEN_X" | "flag"
    sources: dict[str, str] = Field(default_factory=dict, repr=False)

    @field_validator("backend", check_fields=False)
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value.lower() not in known_backends():
            raise ValueError(f"unknown backend {value!r}; known backends: {', '.join(known_backends())}")
        return value.lower()

    @field_validator("targets", check_fields=False)
    @classmethod
    def _known_targets(cls, value: list[str]) -> list[str]:
        names: list[str] = []
        for name in value:
            canonical = resolve_target(name).name  # an unknown name is a ValueError pydantic reports
            if canonical not in names:
                names.append(canonical)
        return names

    @field_validator("kb", check_fields=False)
    @classmethod
    def _path_or_http_url(cls, value: str | None) -> str | None:
        if value is not None and "://" in value and not _is_http_url(value):
            raise ValueError(f"expected a directory path or an http(s) URL, got {value!r}")
        return value

    @property
    def kb_location(self) -> str:
        """Where the knowledge base lives: an http(s) URL as given, else an absolute directory."""
        kb = getattr(self, "kb")  # noqa: B009 - a field of the derived class
        if kb is None:
            return str(kgen_home() / "kb")
        if _is_http_url(kb):
            return kb
        return str(Path(kb).expanduser())

    @property
    def runs_location(self) -> Path:
        """The directory that holds one folder per run."""
        runs_dir = getattr(self, "runs_dir")  # noqa: B009 - a field of the derived class
        return Path(runs_dir).expanduser() if runs_dir else kgen_home() / "runs"


class Settings(create_model("SettingsFields", __base__=_SettingsRules, __module__=__name__,
                            **pydantic_fields(o for o in OPTIONS if o.is_setting))):
    """The effective configuration of one kgen process. ``sources`` says where each value came
    from. The fields (type, default, bounds) are the settings ``kgen.core.option_table`` declares."""


_SETTINGS: dict[str, Option] = {o.name: o for o in OPTIONS if o.is_setting}
#: every option a person can set, in the order the default config file documents them
SETTING_NAMES: tuple[str, ...] = tuple(_SETTINGS)
SECRET_NAMES: frozenset[str] = frozenset(name for name, o in _SETTINGS.items() if o.is_secret)
_LIST_NAMES = frozenset(name for name, o in _SETTINGS.items() if o.is_list)
_OPTIONAL_NAMES = frozenset(name for name, o in _SETTINGS.items() if o.is_optional)
_PATH_NAMES = frozenset(name for name, o in _SETTINGS.items() if o.relative_to_config)


def default_of(name: str) -> Any:
    """A setting's built-in default, declared once, in ``kgen.core.option_table``: the model
    clients and others read it from there instead of repeating the value."""
    return option(name).default_value()


def env_var(name: str) -> str:
    """The environment variable for a setting: ``budget`` -> ``KGEN_BUDGET``."""
    return ENV_PREFIX + name.upper()


def config_file_path() -> Path:
    """The config file kgen reads: ``$KGEN_CONFIG`` if set, else ``$KGEN_HOME/config.toml``."""
    named = os.environ.get(CONFIG_ENV, "").strip()
    return Path(named).expanduser() if named else kgen_home() / "config.toml"


def default_config_text() -> str:
    """The config file that documents every option, all commented out: rendered from the
    option table, so it is right even where the shipped copy (kgen/default_config.toml) is stale."""
    return render_default_config()


def load_settings(
    overrides: Mapping[str, object] | None = None, *, config_path: Path | None = None
) -> Settings:
    """The effective settings: defaults < config file < ``KGEN_*`` env < ``overrides``.

    ``overrides`` holds explicit choices (CLI flags, API arguments); a None value
    means "not given", so callers can pass every flag through unconditionally.
    ``config_path`` replaces the usual file; a file named explicitly (here or in
    ``KGEN_CONFIG``) must exist, while a missing default file just means "no file".
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {name: "default" for name in SETTING_NAMES}

    explicit = config_path is not None or bool(os.environ.get(CONFIG_ENV, "").strip())
    path = Path(config_path).expanduser() if config_path is not None else config_file_path()
    if path.exists() or explicit:
        for name, value in _read_config_file(path).items():
            values[name] = value
            sources[name] = f"config file {path}"

    for name in SETTING_NAMES:
        variable = env_var(name)
        raw = os.environ.get(variable)
        if raw is None:
            continue
        values[name] = _validate(name, _from_env_text(name, raw), where=variable, raw=raw)
        sources[name] = f"env {variable}"

    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name not in SETTING_NAMES:
            raise SettingsError(f"unknown setting {name!r}{_did_you_mean(name)}")
        if isinstance(value, str) and name in _LIST_NAMES:
            value = _split_list(value)
        values[name] = _validate(name, value, where=name, raw=value)
        sources[name] = "flag"

    return Settings.model_validate({**values, "sources": sources})


def describe_settings(settings: Settings) -> list[tuple[str, str, str]]:
    """``(name, value as shown to a person, source)`` per option; API keys are never shown."""
    rows = []
    for name in SETTING_NAMES:
        source = settings.sources.get(name, "default")
        rows.append((name, _shown_value(settings, name, source), source))
    return rows


# --------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SettingsError(f"config file not found: {path}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"config file {path} is not UTF-8 text") from None
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None

    values: dict[str, Any] = {}
    for key, value in document.items():
        line = _line_of(text, key)
        where = f"{path}:{line}" if line else str(path)
        if key not in SETTING_NAMES:
            raise SettingsError(f"{where}: unknown key {key!r}{_did_you_mean(key)}")
        if isinstance(value, str) and key in _LIST_NAMES:
            value = _split_list(value)
        checked = _validate(key, value, where=f"{where}: {key}", raw=value)
        if key in _PATH_NAMES and checked is not None:
            checked = _relative_to_file(checked, path)
        values[key] = checked
    return values


def _from_env_text(name: str, raw: str) -> object:
    """Environment values are text: lists are comma-separated; '' or 'none' clears an optional."""
    text = raw.strip()
    if name in _LIST_NAMES:
        return _split_list(text)
    if name in _OPTIONAL_NAMES and text.lower() in ("", "none"):
        return None
    return text


def _validate(name: str, value: object, *, where: str, raw: object) -> Any:
    """One option's value, checked with the same rules as :class:`Settings`."""
    try:
        return getattr(Settings.model_validate({name: value}), name)
    except ValidationError as exc:
        error = exc.errors()[0]
        shown = "<hidden>" if name in SECRET_NAMES else repr(raw)
        if error["type"] == "value_error":
            raise SettingsError(f"{where}: {error_message(error)}") from None
        raise SettingsError(f"{where}: expected {option(name).expected}, got {shown}") from None


def _split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _relative_to_file(value: str, path: Path) -> str:
    """A relative directory in a config file means relative to that file, not to where kgen runs."""
    if _is_http_url(value):
        return value
    location = Path(value).expanduser()
    return str(location if location.is_absolute() else (path.parent / location).resolve())


def _is_http_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def _line_of(text: str, key: str) -> int | None:
    name = rf"[\"']?{re.escape(key)}[\"']?"
    pattern = re.compile(rf"^\s*(?:{name}\s*[=.]|\[\[?\s*{name}\s*[\].])")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return None


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, SETTING_NAMES, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known keys: {', '.join(SETTING_NAMES)})"


def _shown_value(settings: Settings, name: str, source: str) -> str:
    value = getattr(settings, name)
    if name in SECRET_NAMES:
        return f"set ({_short_source(source)})" if value is not None else "not set"
    if name == "models":
        return ", ".join(value) if value else "none (offline mode)"
    if name == "targets":
        return ", ".join(value) if value else "the local GPU's target, else h100"
    if name == "kb":
        return settings.kb_location
    if name == "runs_dir":
        return str(settings.runs_location)
    if name == "time_s":
        return "no limit" if value is None else f"{value:g} s"
    if name == "max_cost_usd":
        return "no limit" if value is None else f"${value:g}"
    if name in ("eval_timeout_s", "llm_timeout_s"):
        return f"{value:g} s"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "not set" if value is None else str(value)


def _short_source(source: str) -> str:
    return "config file" if source.startswith("config file") else source
