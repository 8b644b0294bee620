"""Where kgen keeps its state: ``$KGEN_HOME`` (default ``~/.kgen``)."""

from __future__ import annotations

import os
from pathlib import Path


def kgen_home() -> Path:
    return Path(os.environ.get("KGEN_HOME", "~/.kgen")).expanduser()


def triton_cache_dir() -> Path:
    """Compiled kernels are cached across evaluations here (never inside a throw-away sandbox)."""
    return kgen_home() / "cache" / "triton"
