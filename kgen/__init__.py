"""kgen: an agentic multi-backend GPU kernel generator.

A kernel kgen calls correct was verified against an fp64 reference on fresh
inputs; a kernel it calls fast was measured fast. Heavy imports (torch,
triton, the LLM SDKs) stay lazy so `kgen --help` and listing commands are quick.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kgen")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
