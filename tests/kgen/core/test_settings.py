"""Settings as a person sets them: defaults < config file < KGEN_* env < flags, and clear errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.core.settings import (
    SETTING_NAMES,
    Settings,
    SettingsError,
    default_config_text,
    describe_settings,
    load_settings,
)

SECRET = "sk-test-Zq8vTopSecretValue"




def write_config(home: Path, text: str) -> Path:
    path = home / "config.toml"
    path.write_text(text)
    return path


def kgen(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("KGEN_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, timeout=120,
        env={**clean, "KGEN_HOME": str(home), "COLUMNS": "200", **env},
    )


def test_without_file_env_or_flags_the_defaults_apply(home):
    settings = load_settings()
    assert settings.models == [] and settings.budget == 12 and settings.device == "auto"
    assert set(settings.sources.values()) == {"default"}
    assert settings.kb_location == str(home / "kb")
    assert settings.runs_location == home / "runs"


def test_each_layer_overrides_the_one_below_and_says_so(home, monkeypatch):
    path = write_config(home, "budget = 5\ngenerations = 4\ntime_s = 60\nmodels = ['openai:gpt-5']\n")
    monkeypatch.setenv("KGEN_GENERATIONS", "6")
    monkeypatch.setenv("KGEN_TIME_S", "90")
    settings = load_settings({"time_s": 120, "budget": None, "device": "cpu"})

    assert (settings.budget, settings.generations, settings.time_s, settings.device) == (5, 6, 120.0, "cpu")
    assert settings.models == ["openai:gpt-5"]
    assert settings.sources["budget"] == f"config file {path}"
    assert settings.sources["generations"] == "env KGEN_GENERATIONS"
    assert settings.sources["time_s"] == "flag"
    assert settings.sources["device"] == "flag"
    assert settings.sources["executor"] == "default"


def test_env_lists_are_comma_separated_and_models_keep_weights_and_urls(home, monkeypatch):
    monkeypatch.setenv("KGEN_MODELS", "openai:gpt-5*2, openai:qwen2.5-coder@http://127.0.0.1:8000/v1")
    monkeypatch.setenv("KGEN_TARGETS", "hopper,MI300X")
    settings = load_settings()
    assert settings.models == ["openai:gpt-5*2", "openai:qwen2.5-coder@http://127.0.0.1:8000/v1"]
    assert settings.targets == ["h100", "mi300x"]


def test_an_empty_env_list_forces_offline_mode_over_the_file(home, monkeypatch):
    write_config(home, "models = ['anthropic:claude-sonnet-4-5']\n")
    monkeypatch.setenv("KGEN_MODELS", "")
    settings = load_settings()
    assert settings.models == [] and settings.sources["models"] == "env KGEN_MODELS"


def test_kgen_config_names_another_file_and_it_must_exist(home, tmp_path, monkeypatch):
    other = tmp_path / "team.toml"
    other.write_text("executor = 'ray'\n")
    monkeypatch.setenv("KGEN_CONFIG", str(other))
    assert load_settings().executor == "ray"
    monkeypatch.setenv("KGEN_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(SettingsError, match="config file not found: .*missing.toml"):
        load_settings()


def test_config_path_argument_beats_the_default_file(home, tmp_path):
    write_config(home, "budget = 5\n")
    other = tmp_path / "other.toml"
    other.write_text("budget = 7\n")
    assert load_settings(config_path=other).budget == 7


def test_invalid_toml_names_file_and_line(home):
    path = write_config(home, "budget = 5\ndevice = \n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert str(path) in message and "line 2" in message and "\n" not in message


def test_unknown_key_suggests_the_nearest(home):
    path = write_config(home, "budget = 5\n\nbudjet = 3\n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert str(info.value) == f"{path}:3: unknown key 'budjet' (did you mean 'budget'?)"


def test_bad_env_value_names_the_variable_and_what_was_expected(home, monkeypatch):
    monkeypatch.setenv("KGEN_BUDGET", "abc")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert str(info.value) == "KGEN_BUDGET: expected an integer ≥1, got 'abc'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("generations = 0\n", "generations: expected an integer ≥1, got 0"),
        ("device = 'gpu'\n", "device: expected one of auto, cpu, cuda, got 'gpu'"),
        ("targets = ['h1000']\n", "unknown hardware target 'h1000'; nearest known targets: h100"),
        ("backend = 'cuda-c'\n", "unknown backend 'cuda-c'; known backends: cute, triton"),
        ("kb = 'ftp://kb.example/x'\n", "expected a directory path or an http(s) URL"),
    ],
)
def test_bad_file_values_point_at_the_line(home, text, expected):
    path = write_config(home, "# comment\n" + text)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert str(info.value).startswith(f"{path}:2: ") and expected in str(info.value)


def test_bad_flag_and_unknown_flag_are_errors(home):
    with pytest.raises(SettingsError, match="^budget: expected an integer ≥1, got 0$"):
        load_settings({"budget": 0})
    with pytest.raises(SettingsError, match="unknown setting 'generation' .*did you mean 'generations'"):
        load_settings({"generation": 2})


def test_kb_may_be_a_server_url_or_a_directory_relative_to_the_config_file(home, monkeypatch):
    write_config(home, "kb = 'team-kb'\n")
    assert load_settings().kb_location == str((home / "team-kb").resolve())
    monkeypatch.setenv("KGEN_KB", "https://chroma.example.org:8000")
    assert load_settings().kb_location == "https://chroma.example.org:8000"


def test_api_keys_never_show(home):
    write_config(home, f"openai_api_key = '{SECRET}'\n")
    settings = load_settings()
    assert settings.openai_api_key.get_secret_value() == SECRET
    shown = repr(settings) + str(settings) + repr(describe_settings(settings))
    assert SECRET not in shown
    assert ("openai_api_key", "set (config file)", settings.sources["openai_api_key"]) in describe_settings(settings)
    assert ("anthropic_api_key", "not set", "default") in describe_settings(settings)


def test_a_bad_api_key_value_is_not_echoed(home):
    write_config(home, f"anthropic_api_key = ['{SECRET}']\n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert SECRET not in str(info.value) and "<hidden>" in str(info.value)


# --------------------------------------------------------------------------------------
# The shipped default file documents every option and cannot drift from Settings
# --------------------------------------------------------------------------------------

OPTION_LINE = re.compile(r"^# ([a-z_]+) = ")


def test_default_file_documents_every_option_once():
    documented = [m.group(1) for line in default_config_text().splitlines() if (m := OPTION_LINE.match(line))]
    assert sorted(documented) == sorted(SETTING_NAMES)


def test_uncommenting_every_option_gives_a_valid_file_with_the_defaults(home):
    text = "\n".join(
        line[2:] if OPTION_LINE.match(line) else line for line in default_config_text().splitlines()
    )
    path = write_config(home, text)
    settings = load_settings()
    defaults = Settings()
    for name in SETTING_NAMES:
        assert settings.sources[name] == f"config file {path}"
        if getattr(defaults, name) is not None and name not in ("kb", "runs_dir"):
            assert getattr(settings, name) == getattr(defaults, name), name


# --------------------------------------------------------------------------------------
# `kgen config`
# --------------------------------------------------------------------------------------


def test_kgen_config_shows_values_and_sources_but_no_key(home):
    write_config(home, f"budget = 5\nopenai_api_key = '{SECRET}'\n")
    out = kgen(home, "config", KGEN_GENERATIONS="6")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert "5" in lines["budget"] and "config file" in lines["budget"]
    assert "6" in lines["generations"] and "env KGEN_GENERATIONS" in lines["generations"]
    assert "12" not in lines["budget"] and "default" in lines["device"]
    assert "set (config file)" in lines["openai_api_key"]
    assert SECRET not in out.stdout + out.stderr


def test_kgen_config_default_prints_the_documented_file_and_path_prints_where(home):
    out = kgen(home, "config", "--default")
    assert out.returncode == 0 and out.stdout == default_config_text()
    out = kgen(home, "config", "--path")
    assert out.returncode == 0 and out.stdout.strip() == str(home / "config.toml")


def test_kgen_config_with_a_broken_file_exits_2_with_one_line(home):
    path = write_config(home, "budget = [\n")
    out = kgen(home, "config")
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and str(path) in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
