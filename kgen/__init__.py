"""kgen: an agentic multi-backend GPU kernel generator.

A kernel kgen calls correct was verified against an fp64 reference on fresh
inputs; a kernel it calls fast was measured fast. ``kgen.generate(...)`` runs
the agent, ``kgen.evaluate(...)`` verifies one candidate; both raise
``kgen.KgenUsageError`` for bad input, and every error kgen raises on purpose is
a ``kgen.KgenError``. Heavy imports (torch, triton, the LLM SDKs) stay lazy so
`kgen --help` and listing commands are quick.
"""

from kgen.core.version import __version__
from kgen.errors import KgenError, KgenUsageError

__all__ = ["KgenError", "KgenUsageError", "__version__", "evaluate", "generate"]


def __dir__() -> list[str]:
    """``dir(kgen)``: the public names (``generate`` and ``evaluate`` load on first use)."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str):
    if name in ("generate", "evaluate"):
        from kgen import api

        return getattr(api, name)
    raise AttributeError(f"module 'kgen' has no attribute {name!r}")
