"""Which CuTe DSL architecture string compiles for a hardware target.

Hopper and Blackwell kernels use the architecture-specific instruction sets (wgmma, TMA
multicast, tcgen05), which ptxas only accepts for the ``a`` variants (``sm_90a``,
``sm_100a``); Ampere and Ada have no such variant.
"""

from __future__ import annotations

from kgen.backends.targets import HardwareTarget
from kgen.errors import KgenError

#: compute capabilities whose kernels are compiled for the architecture-specific variant
_ARCH_SPECIFIC_FROM = 90


class UnsupportedTargetError(KgenError, ValueError):
    """A target CuTe DSL cannot compile for (not NVIDIA, or older than Ampere)."""


def cute_arch(target: HardwareTarget) -> str:
    """``sm_90a`` for an H100, ``sm_80`` for an A100, ``sm_100a`` for a B200."""
    if target.vendor != "nvidia" or not isinstance(target.arch, int):
        raise UnsupportedTargetError(f"CuTe DSL compiles for NVIDIA GPUs only, not {target.name} ({target.vendor})")
    if target.arch < 80:
        raise UnsupportedTargetError(f"CuTe DSL compiles for sm_80 and newer, not {target.name} (sm_{target.arch})")
    suffix = "a" if target.arch >= _ARCH_SPECIFIC_FROM else ""
    return f"sm_{target.arch}{suffix}"
