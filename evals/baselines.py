"""Library baselines a user would reach for instead of a generated kernel: Liger-Kernel.

Timed only when the library is installed and kgen knows how to call it for the
problem (its ops take the same tensors in the same layout); otherwise the
timing stage reports why it was not measured. Each baseline is a callable
with the problem's input convention, like the candidate and eager PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgen.evals.problem import LoadedProblem


class BaselineUnavailable(Exception):
    """No such baseline here: not installed, or not wired for this problem."""


def _liger_rms_norm():
    try:
        from liger_kernel.ops import rms_norm
    except ImportError as exc:
        raise BaselineUnavailable("liger-kernel is not installed") from exc
    return rms_norm


def _eps(problem: LoadedProblem, default: float = 1e-6) -> float:
    init = problem.get_init_inputs()
    return float(init[0]) if init and isinstance(init[0], (int, float)) else default


def _rmsnorm_forward(problem: LoadedProblem) -> Callable[..., Any]:
    ops, eps = _liger_rms_norm(), _eps(problem)

    def run(x, weight):
        return ops.rms_norm_forward(x, weight, eps, 0.0, "llama", False)[0]

    return run


def _rmsnorm_backward(problem: LoadedProblem) -> Callable[..., Any]:
    """Liger's backward needs its forward's launch settings; they are computed once, on
    the first (warm-up) call, as Liger's own autograd function does per step."""
    ops, eps = _liger_rms_norm(), float(getattr(problem.module, "EPS", 1e-6))
    settings: dict[int, tuple] = {}

    def run(grad_out, x, weight, rstd):
        if x.shape[-1] not in settings:
            _, _, _, block, warps, mode = ops.rms_norm_forward(x, weight, eps, 0.0, "llama", False)[:6]
            settings[x.shape[-1]] = (block, warps, mode)
        block, warps, mode = settings[x.shape[-1]]
        return ops.rms_norm_backward(grad_out, x, weight, rstd, 0.0, mode, block, warps, False, False)

    return run


LIGER_BASELINES: dict[str, Callable[[LoadedProblem], Callable[..., Any]]] = {
    "rmsnorm_forward": _rmsnorm_forward,
    "rmsnorm_backward": _rmsnorm_backward,
}


def liger_baseline(problem: LoadedProblem) -> Callable[..., Any]:
    """Liger-Kernel's op for this problem, or BaselineUnavailable saying why not."""
    factory = LIGER_BASELINES.get(problem.info.name)
    if factory is None:
        raise BaselineUnavailable(f"no Liger baseline wired for {problem.info.name}")
    return factory(problem)
