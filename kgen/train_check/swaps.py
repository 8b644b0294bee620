"""kgen's kernels swapped into a transformers Llama: RMSNorm, SwiGLU, the embedding's backward, the loss,
and with the fused seams the residual add + RMSNorm and the LM head + loss.

Each kernel is one callable per catalog problem (`kernels.choose_kernels`: a kernel file, an
exported op, or the seed), called with the problem's forward inputs at the ranks it was verified
with (rows: the tokens flattened). The wrappers are autograd functions: where the catalog has a
forward/backward pair both are kernels; SwiGLU's backward (no catalog kernel) and RMSNorm's rstd
(the forward kernel does not return it) are computed in torch, in fp32, and the swap says so.
Where the kernels include the fused seams (`kernels.FUSED_PROBLEMS`), each block's attention
residual add and post-attention RMSNorm are one fused call (forward and backward kernels), and
the loss is the fused linear cross-entropy over the last hidden states (the logits never whole).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from kgen.train_check.kernels import Kernel
from kgen.train_check.live_calls import LiveCalls
from kgen.train_check.loop import StepLoss, head_inputs, logits_loss


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


def norm_eps(norm: Any) -> float:
    """A norm module's epsilon, under either name (transformers' or a swap's)."""
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def _returns_tuple(layer: Any) -> bool:
    """Whether this transformers version's decoder layer returns a tuple (older ones) or a tensor."""
    import inspect

    return "tuple" in str(inspect.signature(type(layer).forward).return_annotation).lower()


def replace_post_attention_adds(model: Any, fused: Callable[[Any, Any, Any, float], tuple[Any, Any]]) -> int:
    """Every LlamaDecoderLayer's attention residual add and post-attention RMSNorm computed as
    ``fused(attention_out_rows, stream_rows, norm_weight, eps) -> (normed_rows, new_stream_rows)``;
    how many layers. The norm's weight stays the layer's own parameter."""
    layers = [m for m in model.modules() if type(m).__name__ == "LlamaDecoderLayer"]
    for layer in layers:
        def forward(hidden_states: Any, layer: Any = layer, as_tuple: bool = _returns_tuple(layer),
                    **kwargs: Any) -> Any:
            # the model hands a layer everything but the hidden states by keyword, and the layer hands
            # the same keywords on to its attention: so does this
            attn = layer.self_attn(hidden_states=layer.input_layernorm(hidden_states), **kwargs)[0]
            norm, shape = layer.post_attention_layernorm, hidden_states.shape
            normed, stream = fused(attn.reshape(-1, shape[-1]), hidden_states.reshape(-1, shape[-1]), norm.weight,
                                   norm_eps(norm))
            out = stream.view(shape) + layer.mlp(normed.view(shape))
            return (out,) if as_tuple else out

        layer.forward = forward
    return len(layers)


def autograd_functions() -> dict[str, Any]:
    """The autograd functions, made on first use (torch is imported only when a check runs). Each
    takes its kernels as callables (a kernel file's module, an exported op), so the eager check here
    and the compiled wiring of `package_swaps` share them."""
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

    class FusedAddRMSNormFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, residual: Any, weight: Any, eps: float, fwd: Any, bwd: Any) -> Any:
            ctx.save_for_backward(x, residual, weight)
            ctx.eps, ctx.bwd = eps, bwd
            y, stream = fwd(x.contiguous(), residual.contiguous(), weight)
            return y, stream

        @staticmethod
        def backward(ctx: Any, grad_y: Any, grad_stream: Any) -> Any:
            x, residual, weight = ctx.saved_tensors
            rstd = torch.rsqrt((x.float() + residual.float()).pow(2).mean(dim=-1) + ctx.eps)
            grad_x, grad_residual, grad_weight = ctx.bwd(grad_y.contiguous(), grad_stream.contiguous(), x, residual,
                                                         weight, rstd)
            return grad_x, grad_residual, grad_weight.to(weight.dtype), None, None, None

    class FusedLinearCrossEntropyFn(torch.autograd.Function):
        """The kernel returns the mean loss and its gradients at once; the backward scales them."""

        @staticmethod
        def forward(ctx: Any, hidden: Any, weight: Any, targets: Any, kernel: Any) -> Any:
            loss, grad_hidden, grad_weight = kernel(hidden.contiguous(), weight, targets.contiguous())
            ctx.save_for_backward(grad_hidden, grad_weight)
            return loss

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            grad_hidden, grad_weight = ctx.saved_tensors
            return (grad_hidden * grad).to(grad_hidden.dtype), (grad_weight * grad).to(grad_weight.dtype), None, None

    return {"rmsnorm": RMSNormFn, "swiglu": SwiGLUFn, "embedding": EmbeddingFn, "cross_entropy": CrossEntropyFn,
            "fused_add_rmsnorm": FusedAddRMSNormFn, "flce": FusedLinearCrossEntropyFn}


def stock_loss(logits: Any, targets: Any) -> Any:
    """The stock loss: torch's cross-entropy over fp32 logits, mean over tokens."""
    import torch

    return torch.nn.functional.cross_entropy(logits.float(), targets)


def swap_kernels(model: Any, kernels: dict[str, Kernel], recorder: LiveCalls | None = None) -> tuple[StepLoss, list[Swap]]:
    """Swap ``kernels`` (`kernels.choose_kernels`) into ``model`` in place; return the step loss
    to use and what was swapped. With ``recorder``, the kernels' calls it asks for are kept for `op_check`."""
    import torch

    fns = autograd_functions()
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

    fused: list[Swap] = []
    if "fused_add_rmsnorm_forward" in kernels:
        add_fwd, add_bwd = called["fused_add_rmsnorm_forward"], called["fused_add_rmsnorm_backward"]
        blocks = replace_post_attention_adds(model, lambda x, residual, weight, eps: fns["fused_add_rmsnorm"].apply(
            x, residual, weight, eps, add_fwd, add_bwd))
        fused.append(Swap(replaced=f"the attention residual add and post-attention RMSNorm of {blocks} blocks",
                          kernels=names("fused_add_rmsnorm_forward", "fused_add_rmsnorm_backward"),
                          torch_part="rstd for the backward, recomputed in fp32"))
    step_loss = logits_loss(kernel_loss)
    if "fused_linear_cross_entropy" in kernels:
        flce = called["fused_linear_cross_entropy"]
        step_loss = lambda model, ids: fns["flce"].apply(*head_inputs(model, ids), flce)  # noqa: E731
        fused.append(Swap(replaced="the LM head and the loss (the logits never whole)",
                          kernels=names("fused_linear_cross_entropy"),
                          torch_part="the backward: the kernel's gradients times the loss's"))

    swaps = [
        Swap(replaced=f"{norms} LlamaRMSNorm modules" + (" (the post-attention ones unused)" if "fused_add_rmsnorm_forward" in kernels else ""),
             kernels=names("rmsnorm_forward", "rmsnorm_backward"),
             torch_part="rstd for the backward, recomputed in fp32"),
        Swap(replaced=f"silu(gate) * up in {mlps} LlamaMLP modules", kernels=names("swiglu"),
             torch_part="the backward, in fp32"),
        Swap(replaced="the input embedding's backward", kernels=names("embedding_backward")),
    ]
    if "fused_linear_cross_entropy" not in kernels:
        swaps.append(Swap(replaced="the loss (cross-entropy, mean over tokens)",
                          kernels=names("cross_entropy_forward", "cross_entropy_backward")))
    return step_loss, swaps + fused
