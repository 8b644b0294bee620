"""kgen's kernels swapped into a transformers Llama: RMSNorm, SwiGLU, the embedding's backward, the loss.

Each kernel is one callable per catalog problem (`kernels.choose_kernels`: a kernel file, an
exported op, or the seed), called with the problem's forward inputs at the ranks it was verified
with (rows: the tokens flattened). The wrappers are autograd functions: where the catalog has a
forward/backward pair both are kernels; SwiGLU's backward (no catalog kernel) and RMSNorm's rstd
(the forward kernel does not return it) are computed in torch, in fp32, and the swap says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from kgen.train_check.kernels import Kernel
from kgen.train_check.live_calls import LiveCalls


class Swap(BaseModel):
    """What one swap replaced, with which kernels (files, or exported ops)."""

    replaced: str
    kernels: list[str]
    torch_part: str = ""


def swiglu_gradients(gate: Any, up: Any, grad: Any) -> tuple[Any, Any]:
    """The gradients of silu(gate) * up, in fp32, returned in ``grad``'s dtype: SwiGLU's backward
    in torch (the catalog has no SwiGLU backward kernel), for the swap and for an exported op."""
    import torch

    gate, up, g = gate.float(), up.float(), grad.float()
    sig = torch.sigmoid(gate)
    return (g * up * sig * (1 + gate * (1 - sig))).to(grad.dtype), (g * gate * sig).to(grad.dtype)


def replace_rmsnorms(model: Any, make: Callable[[Any], Any]) -> int:
    """Every LlamaRMSNorm of ``model`` replaced by ``make(stock_module)``; how many there were."""
    names = [name for name, module in model.named_modules() if type(module).__name__ == "LlamaRMSNorm"]
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, make(getattr(parent, child)))
    return len(names)


def replace_swiglus(model: Any, swiglu: Callable[[Any, Any], Any]) -> int:
    """Every LlamaMLP of ``model`` computing silu(gate) * up as ``swiglu(gate, up)`` (the projections'
    outputs, as shaped); how many there were."""
    mlps = [module for module in model.modules() if type(module).__name__ == "LlamaMLP"]
    for mlp in mlps:
        def mlp_forward(x: Any, mlp: Any = mlp) -> Any:
            return mlp.down_proj(swiglu(mlp.gate_proj(x), mlp.up_proj(x)))
        mlp.forward = mlp_forward
    return len(mlps)


def _functions() -> dict[str, Any]:
    """The autograd functions, made on first use (torch is imported only when a check runs)."""
    import torch

    class RMSNormFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, weight: Any, eps: float, fwd: Any, bwd: Any) -> Any:
            rows = x.reshape(-1, x.shape[-1]).contiguous()
            ctx.save_for_backward(rows, weight)
            ctx.eps, ctx.bwd, ctx.shape = eps, bwd, x.shape
            return fwd(rows, weight).view(x.shape)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            rows, weight = ctx.saved_tensors
            rstd = torch.rsqrt(rows.float().pow(2).mean(dim=-1) + ctx.eps)
            grad_x, grad_w = ctx.bwd(grad.reshape(rows.shape).contiguous(), rows, weight, rstd)
            return grad_x.view(ctx.shape), grad_w.to(weight.dtype), None, None, None

    class SwiGLUFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, gate: Any, up: Any, kernel: Any) -> Any:
            ctx.save_for_backward(gate, up)
            width = gate.shape[-1]
            return kernel(gate.reshape(-1, width).contiguous(), up.reshape(-1, width).contiguous()).view(gate.shape)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return *swiglu_gradients(*ctx.saved_tensors, grad), None

    class EmbeddingFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, ids: Any, weight: Any, bwd: Any) -> Any:
            ctx.save_for_backward(ids)
            ctx.bwd, ctx.dtype = bwd, weight.dtype
            return torch.nn.functional.embedding(ids, weight)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (ids,) = ctx.saved_tensors
            grad_weight = ctx.bwd(grad.reshape(-1, grad.shape[-1]).contiguous(), ids.reshape(-1).contiguous())
            return None, grad_weight.to(ctx.dtype), None

    class CrossEntropyFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, logits: Any, targets: Any, fwd: Any, bwd: Any) -> Any:
            ctx.save_for_backward(logits, targets)
            ctx.bwd = bwd
            return fwd(logits, targets).mean()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            logits, targets = ctx.saved_tensors
            grad_loss = torch.full((logits.shape[0],), float(grad) / logits.shape[0], dtype=torch.float32,
                                   device=logits.device)
            return ctx.bwd(logits, targets, grad_loss), None, None, None

    return {"rmsnorm": RMSNormFn, "swiglu": SwiGLUFn, "embedding": EmbeddingFn, "cross_entropy": CrossEntropyFn}


def stock_loss(logits: Any, targets: Any) -> Any:
    """The stock loss: torch's cross-entropy over fp32 logits, mean over tokens."""
    import torch

    return torch.nn.functional.cross_entropy(logits.float(), targets)


def swap_kernels(model: Any, kernels: dict[str, Kernel], recorder: LiveCalls | None = None) -> tuple[Any, list[Swap]]:
    """Swap ``kernels`` (`kernels.choose_kernels`) into ``model`` in place; return the loss function
    to use and what was swapped. With ``recorder``, the kernels' calls it asks for are kept for `op_check`."""
    import torch

    fns = _functions()
    called = {name: recorder.wrap(name, k.call, k.init_args) if recorder is not None else k.call
              for name, k in kernels.items()}
    rms_fwd, rms_bwd, swiglu = called["rmsnorm_forward"], called["rmsnorm_backward"], called["swiglu"]
    emb_bwd, ce_fwd, ce_bwd = called["embedding_backward"], called["cross_entropy_forward"], called["cross_entropy_backward"]

    class KernelRMSNorm(torch.nn.Module):
        def __init__(self, stock: Any) -> None:
            super().__init__()
            self.weight = stock.weight
            self.eps = stock.variance_epsilon

        def forward(self, x: Any) -> Any:
            return fns["rmsnorm"].apply(x, self.weight, self.eps, rms_fwd, rms_bwd)

    norms = replace_rmsnorms(model, KernelRMSNorm)
    mlps = replace_swiglus(model, lambda gate, up: fns["swiglu"].apply(gate, up, swiglu))

    embed = model.get_input_embeddings()
    embed.forward = lambda ids: fns["embedding"].apply(ids, embed.weight, emb_bwd)

    def kernel_loss(logits: Any, targets: Any) -> Any:
        return fns["cross_entropy"].apply(logits.contiguous(), targets.contiguous(), ce_fwd, ce_bwd)

    def names(*problems: str) -> list[str]:
        return [kernels[p].origin for p in problems]

    swaps = [
        Swap(replaced=f"{norms} LlamaRMSNorm modules", kernels=names("rmsnorm_forward", "rmsnorm_backward"),
             torch_part="rstd for the backward, recomputed in fp32"),
        Swap(replaced=f"silu(gate) * up in {mlps} LlamaMLP modules", kernels=names("swiglu"),
             torch_part="the backward, in fp32"),
        Swap(replaced="the input embedding's backward", kernels=names("embedding_backward")),
        Swap(replaced="the loss (cross-entropy, mean over tokens)",
             kernels=names("cross_entropy_forward", "cross_entropy_backward")),
    ]
    return kernel_loss, swaps
