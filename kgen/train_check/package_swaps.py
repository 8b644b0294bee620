"""An exported package's ops wired into a transformers Llama, as a user would, one group at a time.

This is the wiring `torch.compile` sees (``scripts/deliver_check.py``, ``in_model.py``): each
op is ``torch.ops.kgen_PKG.<problem>``, a ``triton_op`` whose Triton launches Inductor sees (or
an opaque op where `kgen export` found it does not trace). A *group* is what one decision
covers (`in_model.py` keeps or drops each by timing the compiled model): the two kernels of a
forward/backward pair swap together, and two groups that replace the same code exclude each
other (``cross_entropy`` or ``fused_linear_cross_entropy``). What the package lacks a kernel for
stays torch, written in fp32: SwiGLU's backward, the embedding's forward. The autograd functions
around the ops are `swaps.autograd_functions`, the eager check's own.

`swaps.py` is the other wiring: any kernel callables (files, seeds, ops) with their calls
recorded for the fp64 check, in eager mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from kgen.train_check.loop import head_inputs, next_token_loss
from kgen.train_check.swaps import (
    autograd_functions,
    norm_eps,
    replace_post_attention_adds,
    replace_rmsnorms,
    replace_swiglus,
    stock_loss,
)


class SwapGroup(BaseModel):
    """One decision's worth of swapped code."""

    name: str
    #: the package ops it needs (every one, or the group cannot swap)
    problems: tuple[str, ...]
    #: what it replaces, in words
    replaces: str
    #: groups replacing the same code (at most one of them swaps)
    excludes: tuple[str, ...] = ()
    #: whether it changes the model's forward at inference (the prefill timing swaps only these)
    in_forward: bool = True


#: Every group, in the order they are wired (fused_add_rmsnorm rewrites the blocks first; rmsnorm then
#: replaces the norms the blocks still call); of two that exclude each other, the first is the one
#: `in_model.all_groups` takes.
GROUPS: tuple[SwapGroup, ...] = (
    SwapGroup(name="fused_add_rmsnorm", problems=("fused_add_rmsnorm_forward", "fused_add_rmsnorm_backward"),
              replaces="each block's attention residual add and post-attention RMSNorm, as one op"),
    SwapGroup(name="rmsnorm", problems=("rmsnorm_forward", "rmsnorm_backward"),
              replaces="the RMSNorms (the ones fused_add_rmsnorm does not serve)"),
    SwapGroup(name="swiglu", problems=("swiglu",), replaces="silu(gate) * up in each MLP (backward: torch, fp32)"),
    SwapGroup(name="embedding_backward", problems=("embedding_backward",),
              replaces="the input embedding's backward", in_forward=False),
    SwapGroup(name="fused_linear_cross_entropy", problems=("fused_linear_cross_entropy",),
              replaces="the LM head and the loss, in chunks (the logits never whole)", excludes=("cross_entropy",),
              in_forward=False),
    SwapGroup(name="cross_entropy", problems=("cross_entropy_forward", "cross_entropy_backward"),
              replaces="the loss over the logits", excludes=("fused_linear_cross_entropy",), in_forward=False),
)
GROUP_NAMES = tuple(g.name for g in GROUPS)


def group(name: str) -> SwapGroup:
    return next(g for g in GROUPS if g.name == name)


def available_groups(module: Any) -> list[str]:
    """The groups whose every op the package holds."""
    held = set(module.package.ops)
    return [g.name for g in GROUPS if set(g.problems) <= held]


def check_groups(names: Iterable[str]) -> list[str]:
    """``names`` in wiring order, refusing an unknown name or two groups that exclude each other."""
    chosen = set(names)
    unknown = chosen - set(GROUP_NAMES)
    if unknown:
        raise ValueError(f"unknown swap group(s) {sorted(unknown)}; known: {', '.join(GROUP_NAMES)}")
    for g in GROUPS:
        clash = chosen & set(g.excludes) if g.name in chosen else set()
        if clash:
            raise ValueError(f"{g.name} and {', '.join(sorted(clash))} replace the same code: choose one")
    return [g.name for g in GROUPS if g.name in chosen]


def kernel_names(module: Any) -> set[str]:
    """The Python names of the package's Triton kernels (their names in a profile)."""
    from kgen.train_check.step_profile import triton_kernel_names

    return triton_kernel_names(kernel.kernel for kernel in module.package.kernels.values())


def wire_stock(model: Any) -> Callable[[Any], Any]:
    """The stock model's loss function, ids -> mean loss: what every wiring is timed against."""
    return lambda ids: next_token_loss(model, ids, stock_loss)


def wire(model: Any, module: Any, groups: Iterable[str]) -> Callable[[Any], Any]:
    """Swap the package ``module``'s ops for ``groups`` into ``model`` (in place); the next-token
    loss function of the wired model, ids -> mean loss."""
    import torch

    chosen = check_groups(groups)
    missing = [f"{g}: {p}" for g in chosen for p in group(g).problems if p not in module.package.ops]
    if missing:
        raise ValueError(f"the package has no op for {', '.join(missing)}")
    ops = torch.ops
    namespace = getattr(ops, module.package.namespace)
    fns = autograd_functions()
    if "fused_add_rmsnorm" in chosen:
        replace_post_attention_adds(model, namespace.fused_add_rmsnorm_forward)
    if "rmsnorm" in chosen:
        rmsnorm = module.package.function("rmsnorm_forward")

        class OpsRMSNorm(torch.nn.Module):
            def __init__(self, stock: Any) -> None:
                super().__init__()
                self.weight, self.variance_epsilon = stock.weight, norm_eps(stock)

            def forward(self, x: Any) -> Any:
                return rmsnorm(x.reshape(-1, x.shape[-1]), self.weight, eps=self.variance_epsilon).view(x.shape)

        replace_rmsnorms(model, OpsRMSNorm)
    if "swiglu" in chosen:
        replace_swiglus(model, lambda gate, up: fns["swiglu"].apply(gate, up, namespace.swiglu))
    if "embedding_backward" in chosen:
        embed = model.get_input_embeddings()
        vocab = embed.weight.shape[0]
        embed.forward = lambda ids: fns["embedding"].apply(
            ids, embed.weight, lambda rows, flat_ids: namespace.embedding_backward(rows, flat_ids, vocab))
    if "fused_linear_cross_entropy" in chosen:
        flce = namespace.fused_linear_cross_entropy

        return lambda ids: fns["flce"].apply(*head_inputs(model, ids), flce)
    if "cross_entropy" in chosen:
        ce = module.package.function("cross_entropy_forward")
        return lambda ids: next_token_loss(model, ids, lambda logits, targets: ce(logits, targets).mean())
    return wire_stock(model)
