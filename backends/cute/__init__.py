"""The CuTe DSL backend (``nvidia-cutlass-dsl``): compiled for any NVIDIA target without a GPU,
run and timed only on one."""

from kgen.backends.cute.backend import CuteBackend

__all__ = ["CuteBackend"]
