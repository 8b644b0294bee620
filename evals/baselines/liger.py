"""Liger-Kernel's Triton ops as baselines, called with each problem's own tensors.

Liger is what a PyTorch user reaches for first to speed up norms and losses. Each factory
returns a callable with the problem's input convention; an op Liger does not have in the
same form (same inputs, same outputs, no side effects on the inputs) is not wired, and the
timing says why instead of comparing unlike work.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kgen.evals.baselines.library import BaselineUnavailable, problem_eps
from kgen.evals.problem.format import LoadedProblem


def _ops(module: str) -> Any:
    try:
        return importlib.import_module(f"liger_kernel.ops.{module}")
    except ImportError as exc:
        raise BaselineUnavailable("liger-kernel is not installed") from exc


def _rmsnorm_forward(problem: LoadedProblem) -> Callable[..., Any]:
    ops, eps = _ops("rms_norm"), problem_eps(problem, 1e-6)

    def run(x, weight):
        return ops.rms_norm_forward(x, weight, eps, 0.0, "llama", False)[0]

    return run


def _rmsnorm_backward(problem: LoadedProblem) -> Callable[..., Any]:
    """Liger's backward needs its forward's launch settings; they are computed once, on
    the first (warm-up) call, as Liger's own autograd function does per step."""
    ops, eps = _ops("rms_norm"), problem_eps(problem, 1e-6)
    settings: dict[int, tuple] = {}

    def run(grad_out, x, weight, rstd):
        if x.shape[-1] not in settings:
            _, _, _, block, warps, mode = ops.rms_norm_forward(x, weight, eps, 0.0, "llama", False)[:6]
            settings[x.shape[-1]] = (block, warps, mode)
        block, warps, mode = settings[x.shape[-1]]
        return ops.rms_norm_backward(grad_out, x, weight, rstd, 0.0, mode, block, warps, False, False)

    return run


def _layernorm_forward(problem: LoadedProblem) -> Callable[..., Any]:
    ops, eps = _ops("layer_norm"), problem_eps(problem, 1e-5)

    def run(x, weight, bias):
        return ops.layer_norm_forward(x, weight, bias, eps)[0]

    return run


def _layernorm_backward(problem: LoadedProblem) -> Callable[..., Any]:
    """The problem's saved mean and rstd are what Liger's forward saves for its backward."""
    ops = _ops("layer_norm")

    def run(grad_out, x, weight, mean, rstd):
        return ops.layer_norm_backward(grad_out, x, weight, weight, mean, rstd)

    return run


def _softmax(problem: LoadedProblem) -> Callable[..., Any]:
    ops = _ops("softmax")

    def run(x):
        return ops._softmax_forward(x)[0]

    return run


def _swiglu(problem: LoadedProblem) -> Callable[..., Any]:
    ops = _ops("swiglu")

    def run(gate, up):
        return ops.swiglu_forward(gate, up)[2]

    return run


def _rope_forward(problem: LoadedProblem) -> Callable[..., Any]:
    """Liger's RoPE rotates q and k together, in place, with cos and sin over the whole head
    dimension. So it gets, once per input set: a private copy of x that it rotates in place on
    every call (the same bytes read and written as an out-of-place kernel, and the problem's
    own x left alone), a k of one head (1/HEADS more work, counted against Liger), and cos and
    sin repeated over both halves of the head (the rotate-half layout it expects)."""
    ops = _ops("rope")
    prepared: dict[tuple[int, int, int], tuple[Any, Any, Any, Any]] = {}

    def run(x, cos, sin):
        key = (x.data_ptr(), cos.data_ptr(), sin.data_ptr())
        if key not in prepared:
            import torch

            q = x.clone().transpose(1, 2)  # [B, H, S, D] as Liger takes it, its storage [B, S, H, D]
            k = x[:, :, :1].clone().transpose(1, 2)
            prepared[key] = (q, k, torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1))
        q, k, cos_full, sin_full = prepared[key]
        return ops.rope_forward(q, k, cos_full, sin_full)[0].transpose(1, 2)

    return run


#: How an op is called where its convention differs from the problem's (quack.py keeps its own).
ADAPTATIONS = {
    "rope_forward": "rotates a private copy of x in place, beside a one-head k; cos and sin repeated over the head",
}

#: Not wired, and why: Liger's cross-entropy forward also writes the gradient into the
#: logits in place (a fused forward and backward, scaled by one number, not a per-token
#: upstream gradient), so it is neither the same work as cross_entropy_forward nor as
#: cross_entropy_backward, nor safe to call repeatedly on the problem's inputs.
NOT_WIRED = {
    "cross_entropy_forward": "Liger's cross-entropy fuses the backward into the forward (gradient written into the logits)",
    "cross_entropy_backward": "Liger's cross-entropy backward is its fused forward with one scalar upstream gradient, not per token",
}

FACTORIES: dict[str, Callable[[LoadedProblem], Callable[..., Any]]] = {
    "rmsnorm_forward": _rmsnorm_forward,
    "rmsnorm_backward": _rmsnorm_backward,
    "layernorm_forward": _layernorm_forward,
    "layernorm_backward": _layernorm_backward,
    "softmax": _softmax,
    "swiglu": _swiglu,
    "rope_forward": _rope_forward,
}
