"""Where kgen keeps its state: ``$KGEN_HOME`` (default ``~/.kgen``)."""

from __future__ import annotations

import os
from pathlib import Path


def kgen_home() -> Path:
    return Path(os.environ.get("KGEN_HOME", "~/.kgen")).expanduser()


def compiler_cache_dir(backend: str) -> Path:
    """A backend's compiled kernels are cached across evaluations here (never inside a
    throw-away sandbox): ``~/.kgen/cache/<backend>``."""
    return kgen_home() / "cache" / backend
