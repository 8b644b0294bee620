"""Errors reach the person whole: no words eaten by Rich markup or hidden behind pydantic's
prefix, and a base URL without a scheme is named as such instead of failing later as a
missing key.

Each case was reported from using the ``kgen`` command as a user would: the usage error's
``[@BASE_URL]`` vanished (Rich read it as a tag); ``openai:x@127.0.0.1:8000/v1`` was taken as
a model at the official API and failed with "no API key"; validation errors began with
"Value error, ".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kgen
from kgen.agent.llm.models import SYNTAX_HELP, ModelSpecError, parse_model
from kgen.cli.terminal import fail_usage


def kgen_cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    """The real command, as a person without keys or kgen settings runs it."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("KGEN_") and not name.endswith("_API_KEY")}
    env.update({"KGEN_HOME": str(home), "COLUMNS": "100"})
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    [line] = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    return line


# ----------------------------------------------------------------------------------------
# (a) usage errors printed whole
# ----------------------------------------------------------------------------------------


def test_a_usage_error_keeps_its_bracketed_syntax_on_the_real_command_line(home):
    line = error_line(kgen_cli(home, "Triton ReLU for H100", "-m", "gpt-5", "--device", "cpu"))
    assert "PROVIDER:MODEL[@BASE_URL][#KEY_VARIABLE][*WEIGHT]" in line
    assert line == f"error: bad model 'gpt-5': {SYNTAX_HELP}"


@pytest.mark.parametrize("message", [
    "expected PROVIDER:MODEL[@BASE_URL][*WEIGHT]",
    "out[i] differs; see [bold]this[/bold] and [link=x]y[/link]",
    "a closing tag alone [/] or [/red] is text too",
])
def test_fail_usage_prints_any_message_exactly(capsys, message):
    with pytest.raises(Exception) as caught:
        fail_usage(message)
    assert getattr(caught.value, "exit_code", None) == 2
    assert capsys.readouterr().err.rstrip("\n") == f"error: {message}"


# ----------------------------------------------------------------------------------------
# (b) a base URL without a scheme
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "meant"), [
    ("openai:x@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("openai:qwen2.5-coder:7b@localhost:11434/v1", "http://localhost:11434/v1"),
    ("vllm:m@gpu-box:9000/v1", "http://gpu-box:9000/v1"),
    ("anthropic:claude@llm.corp.example", "https://llm.corp.example"),
])
def test_a_base_url_without_a_scheme_says_which_url_was_meant(text, meant):
    with pytest.raises(ModelSpecError) as caught:
        parse_model(text)
    assert f"base URL needs a scheme: did you mean {meant}?" in str(caught.value)


@pytest.mark.parametrize("text", ["anthropic:claude-opus-4@20250514", "openai:m@v1.2"])
def test_an_at_sign_that_is_part_of_a_model_name_still_parses(text):
    spec = parse_model(text)
    assert spec.base_url is None and spec.model == text.split(":", 1)[1]


def test_a_base_url_with_another_scheme_is_refused():
    with pytest.raises(ModelSpecError, match=r"must start with http:// or https://"):
        parse_model("openai:m@ftp://127.0.0.1/v1")


def test_the_real_command_line_names_the_missing_scheme_not_a_missing_key(home):
    line = error_line(kgen_cli(home, "Triton ReLU for H100", "-m", "openai:x@127.0.0.1:8000/v1",
                               "--device", "cpu"))
    assert "base URL needs a scheme: did you mean http://127.0.0.1:8000/v1?" in line
    assert "API key" not in line


# ----------------------------------------------------------------------------------------
# (c) no "Value error, " prefix
# ----------------------------------------------------------------------------------------

CREDENTIALS_IN_URL = "openai:m@http://user:secret@127.0.0.1:8000/v1"


def test_a_model_error_has_no_pydantic_prefix():
    with pytest.raises(ModelSpecError) as caught:
        parse_model(CREDENTIALS_IN_URL)
    assert "Value error" not in str(caught.value)
    assert "base URL must not contain credentials" in str(caught.value)


def test_the_python_api_and_the_command_line_show_no_pydantic_prefix(home, tmp_path):
    with pytest.raises(kgen.KgenUsageError) as caught:
        kgen.generate("Triton ReLU for H100", models=[CREDENTIALS_IN_URL], device="cpu",
                      out=tmp_path / "run", kb=str(tmp_path / "kb"))
    assert "Value error" not in str(caught.value) and "credentials" in str(caught.value)
    line = error_line(kgen_cli(home, "Triton ReLU for H100", "-m", CREDENTIALS_IN_URL, "--device", "cpu"))
    assert "Value error" not in line and "credentials" in line


def test_the_one_helper_strips_the_prefixes_and_keeps_locations():
    from pydantic import BaseModel, ValidationError, field_validator

    from kgen.core.validation_errors import validation_message

    class Options(BaseModel):
        budget: int
        name: str

        @field_validator("name")
        @classmethod
        def _named(cls, value: str) -> str:
            raise ValueError("name must be a kernel name such as 'relu'")

    with pytest.raises(ValidationError) as caught:
        Options(budget="many", name="x")
    message = validation_message(caught.value)
    assert "Value error" not in message
    assert "name: name must be a kernel name such as 'relu'" in message
    assert message.startswith("budget: ")
