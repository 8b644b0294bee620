"""Library baselines a user would reach for instead of a generated kernel: Liger-Kernel.

Timed only when the library is installed and kgen knows how to call it for the
problem (its ops take the same tensors in the same layout); otherwise the
timing stage reports why it was not measured. Each baseline is a callable
with the problem's input convention, like the candidate and eager PyTorch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kgen.errors import KgenError
from kgen.evals.problem.format import LoadedProblem


class BaselineUnavailable(KgenError):
    """No such baseline here: not installed, or not wired for this problem."""


def _liger_ops(module: str):
    try:
        return importlib.import_module(f"liger_kernel.ops.{module}")
    except ImportError as exc:
        raise BaselineUnavailable("liger-kernel is not installed") from exc


def _eps(problem: LoadedProblem, default: float = 1e-6) -> float:
    init = problem.get_init_inputs()
    return float(init[0]) if init and isinstance(init[0], (int, float)) else default


def _rmsnorm_forward(problem: LoadedProblem) -> Callable[..., Any]:
    ops, eps = _liger_ops("rms_norm"), _eps(problem)

    def run(x, weight):
        return ops.rms_norm_forward(x, weight, eps, 0.0, "llama", False)[0]

    return run


def _rmsnorm_backward(problem: LoadedProblem) -> Callable[..., Any]:
    """Liger's backward needs its forward's launch settings; they are computed once, on
    the first (warm-up) call, as Liger's own autograd function does per step."""
    ops, eps = _liger_ops("rms_norm"), float(getattr(problem.module, "EPS", 1e-6))
    settings: dict[int, tuple] = {}

    def run(grad_out, x, weight, rstd):
        if x.shape[-1] not in settings:
            _, _, _, block, warps, mode = ops.rms_norm_forward(x, weight, eps, 0.0, "llama", False)[:6]
            settings[x.shape[-1]] = (block, warps, mode)
        block, warps, mode = settings[x.shape[-1]]
        return ops.rms_norm_backward(grad_out, x, weight, rstd, 0.0, mode, block, warps, False, False)

    return run


def _softmax(problem: LoadedProblem) -> Callable[..., Any]:
    ops = _liger_ops("softmax")

    def run(x):
        return ops._softmax_forward(x)[0]

    return run


def _swiglu(problem: LoadedProblem) -> Callable[..., Any]:
    ops = _liger_ops("swiglu")

    def run(gate, up):
        return ops.swiglu_forward(gate, up)[2]

    return run


# Not wired: cross_entropy_forward. Liger's cross-entropy forward also writes the gradient
# into the logits in place (a fused forward and backward), so it is neither the same work
# nor safe to call repeatedly on the problem's inputs.
LIGER_BASELINES: dict[str, Callable[[LoadedProblem], Callable[..., Any]]] = {
    "rmsnorm_forward": _rmsnorm_forward,
    "rmsnorm_backward": _rmsnorm_backward,
    "softmax": _softmax,
    "swiglu": _swiglu,
}


def liger_baseline(problem: LoadedProblem) -> Callable[..., Any]:
    """Liger-Kernel's op for this problem, or BaselineUnavailable saying why not."""
    factory = LIGER_BASELINES.get(problem.info.name)
    if factory is None:
        raise BaselineUnavailable(f"no Liger baseline wired for {problem.info.name}")
    return factory(problem)
