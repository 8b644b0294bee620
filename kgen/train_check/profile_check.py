"""`kgen train-check --profile`: where the compiled training step goes, stock and with the kernels.

The check's own model and kernels (`kernels.choose_kernels`, swapped in by `swaps.swap_kernels`),
compiled by ``torch.compile`` as a user compiles a training step, beside the stock model compiled
the same way; a few steps of each profiled (`step_profile`), after two warm-up steps that compile
and autotune. Graph breaks are counted, not refused: a kernel file whose wrapper the compiler
cannot follow splits the graph, which is itself worth seeing in the table. On a CPU the kernels
run in Triton's interpreter, which the compiler cannot trace: each kernel file's call is left
out of the graph there (the machinery runs; the figures mean nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kgen.train_check.in_model import step_seconds, training_step
from kgen.train_check.kernels import choose_kernels, interpreter_arithmetic_quiet, prepare_process
from kgen.train_check.loop import logits_loss
from kgen.train_check.model import ModelSize, build_model
from kgen.train_check.step_profile import (
    StepProfile,
    profile_steps,
    profile_table,
    triton_kernel_names,
)
from kgen.train_check.swaps import stock_loss, swap_kernels
from kgen.train_check.tokens import token_batches

#: steps profiled per model (after two warm-up steps)
PROFILED_STEPS = 3


class ProfileCheck(BaseModel):
    """Both models' profiles, step times and graph breaks."""

    profiles: list[StepProfile]
    step_seconds: dict[str, float]
    graph_breaks: dict[str, int]

    def markdown(self) -> str:
        lines = ["| model | median step seconds | graph breaks |", "|---|---|---|"]
        lines += [f"| {k} | {v:.4f} | {self.graph_breaks[k]} |" for k, v in self.step_seconds.items()]
        return "\n".join(lines) + "\n\n" + profile_table(self.profiles)


def _kernel_names(chosen: dict[str, Any]) -> set[str]:
    """The Triton kernels' names of the chosen kernel files' modules (an exported op's are its package's)."""
    import sys

    import torch

    modules = {type(k.call).__module__ for k in chosen.values() if isinstance(k.call, torch.nn.Module)}
    return triton_kernel_names(sys.modules[m] for m in modules if m in sys.modules)


def profile_check(size: ModelSize, device: str, kernels: Path | None = None, export: Path | None = None,
                  fused: bool = False, backend: str = "inductor", seed: int = 0,
                  progress: Callable[[str], None] | None = None) -> ProfileCheck:
    """Stock and the kernels, each compiled, timed and profiled over a few steps; ``progress`` is
    told each model as its turn starts."""
    import torch
    import torch._dynamo

    prepare_process(device)
    batches = token_batches(size.vocab, size.batch, size.seq, PROFILED_STEPS + 2, seed, device)
    profiles, seconds, breaks = [], {}, {}
    for label in ("stock compiled", "kernels compiled"):
        if progress is not None:
            progress(f"profile: {label}, {PROFILED_STEPS} steps after 2 warm-up steps")
        model = build_model(size, seed, device)
        names: set[str] = set()
        if label == "stock compiled":
            step_loss = logits_loss(stock_loss)
        else:
            chosen = choose_kernels(model.config.vocab_size, model.config.rms_norm_eps, kernels, export, fused)
            if device != "cuda":  # Triton's interpreter: the compiler cannot trace a kernel file's call
                chosen = {p: k.model_copy(update={"call": torch._dynamo.disable(k.call)}) for p, k in chosen.items()}
            step_loss, _ = swap_kernels(model, chosen)
            names = _kernel_names(chosen)
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        compiled = torch.compile(lambda ids, model=model, step_loss=step_loss: step_loss(model, ids), backend=backend)
        step = training_step(compiled, model)
        with interpreter_arithmetic_quiet():
            seconds[label] = step_seconds(step, batches, device)
            breaks[label] = sum(torch._dynamo.utils.counters["graph_break"].values())
            profiles.append(profile_steps(label, step, batches[2:], device, names))
    return ProfileCheck(profiles=profiles, step_seconds=seconds, graph_breaks=breaks)
