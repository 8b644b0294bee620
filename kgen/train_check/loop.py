"""N steps of AdamW on bf16 parameters, the loss recorded per step.

bf16 parameters rather than autocast: torch's CPU and GPU both train them, and the kernels see
the bf16 tensors a bf16 training run hands them. A run is a pure function of its seeds, so two
runs with the same seeds give the same bits on the CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel


class RunResult(BaseModel):
    """One training run: loss per step, and the final parameters by name (kept out of JSON)."""

    model_config = {"arbitrary_types_allowed": True}

    losses: list[float]
    params: dict[str, Any] = {}


def jitter_parameters(model: Any, seed: int) -> None:
    """Move every parameter by one bf16 rounding step (relative 2^-8 in fp32, then rounded; random sign).

    This is the noise a stock run meets when anything rounds differently: a kernel that is
    correct but sums in another order differs from stock by this much, then the training
    amplifies it. Two stock runs, one jittered, measure that amplification."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            sign = torch.randint(0, 2, param.shape, generator=generator).to(param.device) * 2 - 1
            param.copy_((param.float() * (1 + sign.to(torch.float32) * 2.0**-8)).to(param.dtype))


#: a step's loss from the model and a batch of ids: ``(model, ids) -> loss``
StepLoss = Callable[[Any, Any], Any]


def next_token_loss(model: Any, ids: Any, loss_fn: Callable[[Any, Any], Any]) -> Any:
    """``loss_fn`` of each position's logits against the next token: (tokens, vocab) rows and their targets."""
    logits = model(input_ids=ids).logits
    vocab = logits.shape[-1]
    return loss_fn(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))


def logits_loss(loss_fn: Callable[[Any, Any], Any]) -> StepLoss:
    """The step loss that applies ``loss_fn`` (logits rows, targets) to the model's logits."""
    return lambda model, ids: next_token_loss(model, ids, loss_fn)


def head_inputs(model: Any, ids: Any) -> tuple[Any, Any, Any]:
    """What a fused LM-head loss takes instead of logits: each position's last hidden state but the
    last one's, as (tokens, hidden) rows, the LM head's weight, and each position's next token."""
    hidden = model.model(input_ids=ids).last_hidden_state
    return hidden[:, :-1].reshape(-1, hidden.shape[-1]), model.get_output_embeddings().weight, ids[:, 1:].reshape(-1)


def train(model: Any, batches: list[Any], step_loss: StepLoss, lr: float = 3e-3,
          on_step: Callable[[int], None] | None = None) -> RunResult:
    """Train ``model`` on ``batches`` (next-token prediction) with AdamW; one loss per batch
    (``step_loss(model, ids)``). ``on_step`` is told each step's number before the step runs."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    losses = []
    for step, ids in enumerate(batches):
        if on_step is not None:
            on_step(step)
        loss = step_loss(model, ids)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = float(loss.detach())
        if value != value or value in (float("inf"), float("-inf")):
            losses.append(value)
            break
        losses.append(value)
    params = {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}
    return RunResult(losses=losses, params=params)
