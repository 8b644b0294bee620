"""Triton backend: launch recording, CPU-interpreter support and cross-compilation.

Importing this package does not import triton; ``TritonBackend.prepare_process``
must run first so that ``TRITON_INTERPRET`` is decided before triton loads.
"""

from kgen.backends.triton.backend import TritonBackend

__all__ = ["TritonBackend"]
