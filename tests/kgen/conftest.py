"""A clean kgen home for command and API tests: no setting or key leaks in from the developer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh, existing $KGEN_HOME and an environment without kgen settings or provider keys."""
    home = tmp_path / "home"
    for variable in list(os.environ):
        if variable.startswith("KGEN_") or variable.endswith("_API_KEY"):
            monkeypatch.delenv(variable)
    monkeypatch.setenv("KGEN_HOME", str(home))
    home.mkdir()
    return home
