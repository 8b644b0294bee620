"""Swap only what wins in the graph: each group of a package's ops timed inside the compiled model.

A kernel faster than torch.compile alone can still slow the compiled model: Inductor fused its
neighbours (the casts, the residual add, the reshape) into its own code, and the swap splits
them again. So the decision is made where it counts, per group (`package_swaps.GROUPS`): the
model's training step compiled stock, and compiled with that group alone swapped in, each timed
as the median of a few steps. A group stays only where it makes the step faster by more than
the measured noise (stock timed twice, before and after the groups) and at least
``MIN_GAIN``; of two groups that replace the same code, the faster stays. Every row says which
serves the op and why.

To keep it affordable the model is the user's shape (hidden size, vocabulary, batch, sequence)
with ``DECISION_LAYERS`` blocks, not all of them: every block is the same code, so a swap's
gain per block is the same, and a compile of two blocks takes seconds where the whole model
takes a minute. The delivery check then times the whole model with the kept groups.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from kgen.train_check.kernels import prepare_process
from kgen.train_check.model import ModelSize, build_model
from kgen.train_check.package_swaps import available_groups, group, wire, wire_stock
from kgen.train_check.tokens import token_batches

#: a group must make the step at least this much faster (relative) to stay
MIN_GAIN = 0.01
#: blocks of the model the decision compiles (two: one block boundary, as in the whole model)
DECISION_LAYERS = 2
#: timed steps per variant (after two warm-up steps: the compile, and the autotuning)
DECISION_STEPS = 12


class GroupTiming(BaseModel):
    """One group's time in the compiled step, against stock, and the decision."""

    group: str
    replaces: str
    seconds: float
    #: relative change of the step against stock: negative is faster
    change: float
    serves: str  # "kgen" or "inductor"
    why: str


class InModelDecision(BaseModel):
    """What serves each group in the compiled model, and the measurements behind it."""

    size: ModelSize
    layers_timed: int
    device: str
    backend: str
    steps: int
    stock_seconds: float
    #: the relative gap between the two stock timings: what a change must beat
    noise: float
    rows: list[GroupTiming]

    @property
    def kept(self) -> list[str]:
        return [row.group for row in self.rows if row.serves == "kgen"]

    def text(self) -> str:
        lines = [f"In the compiled model ({self.backend}, {self.layers_timed} blocks at hidden {self.size.hidden}, "
                 f"{self.size.batch}x{self.size.seq} tokens, {self.device}): stock step "
                 f"{self.stock_seconds * 1000:.2f} ms, noise {self.noise:.1%}",
                 f"{'group':<28} {'step ms':>9} {'change':>8}  serves    why"]
        for row in self.rows:
            lines.append(f"{row.group:<28} {row.seconds * 1000:9.2f} {row.change:+8.1%}  {row.serves:<8}  {row.why}")
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [f"Per group, in the compiled training step ({self.backend}, {self.layers_timed} blocks, "
                 f"median of {self.steps} steps; stock {self.stock_seconds * 1000:.2f} ms, noise {self.noise:.1%}):",
                 "", "| group | replaces | step ms | change | serves | why |", "|---|---|---|---|---|---|"]
        lines += [f"| {r.group} | {r.replaces} | {r.seconds * 1000:.2f} | {r.change:+.1%} | {r.serves} | {r.why} |"
                  for r in self.rows]
        return "\n".join(lines) + "\n"


def step_seconds(step: Callable[[Any], None], batches: list[Any], device: str, warmup: int = 2) -> float:
    """Median seconds of ``step`` over ``batches`` after ``warmup`` untimed calls."""
    import torch

    times = []
    for i, ids in enumerate(batches):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        step(ids)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times) if times else float("nan")


def training_step(loss_fn: Callable[[Any], Any], model: Any) -> Callable[[Any], None]:
    """One step without the optimizer: the loss, its backward, the gradients dropped."""
    def step(ids: Any) -> None:
        loss = loss_fn(ids)
        loss.backward()
        model.zero_grad(set_to_none=True)
    return step


def compiled_step(module: Any, size: ModelSize, groups: Iterable[str], device: str, backend: str,
                  seed: int = 0) -> tuple[Callable[[Any], None], Any]:
    """A fresh model with ``groups`` swapped in, its loss compiled (fullgraph: a break raises), and
    its training step; the model too."""
    import torch

    model = build_model(size, seed, device)
    loss_fn = wire(model, module, groups) if module is not None else wire_stock(model)
    torch._dynamo.reset()  # every variant compiles afresh (and the cache limit never falls back to eager)
    return training_step(torch.compile(loss_fn, fullgraph=True, backend=backend), model), model


def decide(module: Any, size: ModelSize, device: str, backend: str = "inductor", steps: int = DECISION_STEPS,
           layers: int = DECISION_LAYERS, groups: Iterable[str] | None = None,
           progress: Callable[[str], None] | None = None) -> InModelDecision:
    """Time stock and each available group (or ``groups``) in the compiled model; decide each."""
    prepare_process(device)
    shape = size.model_copy(update={"layers": min(layers, size.layers)})
    batches = token_batches(shape.vocab, shape.batch, shape.seq, steps + 2, seed=1, device=device)
    names = list(groups) if groups is not None else available_groups(module)

    def timed(label: str, chosen: list[str]) -> float:
        step, _ = compiled_step(module if chosen else None, shape, chosen, device, backend)
        seconds = step_seconds(step, batches, device)
        if progress is not None:
            progress(f"{label}: {seconds * 1000:.2f} ms a step")
        return seconds

    first = timed("stock", [])
    seconds = {name: timed(name, [name]) for name in names}
    second = timed("stock again", [])
    stock, noise, rows = judge(first, second, seconds)
    return InModelDecision(size=shape, layers_timed=shape.layers, device=device, backend=backend,
                           steps=steps, stock_seconds=stock, noise=noise, rows=rows)


def judge(first: float, second: float, seconds: dict[str, float]) -> tuple[float, float, list[GroupTiming]]:
    """The rule, on measured step times: stock timed twice (``first``, ``second``) and each group
    alone (``seconds``). A group serves where it makes the step faster than stock (the faster of
    its two timings) by more than the noise (their relative gap) and at least ``MIN_GAIN``, and no
    group replacing the same code wins more. Returns (stock seconds, noise, one row per group)."""
    stock = min(first, second)
    noise = abs(first - second) / stock
    needed = max(noise, MIN_GAIN)
    change = {name: (t - stock) / stock for name, t in seconds.items()}
    rows = []
    for name in seconds:
        info, gain = group(name), -change[name]
        rival = next((r for r in info.excludes if r in change and change[r] < change[name]), None)
        if gain <= 0:
            serves, why = "inductor", f"the step is {-gain:.1%} slower with it"
        elif gain < needed:
            serves, why = "inductor", f"faster by {gain:.1%}, less than the {needed:.1%} a swap must win"
        elif rival is not None:
            serves, why = "inductor", f"{rival} replaces the same code and wins more ({change[rival]:+.1%})"
        else:
            serves, why = "kgen", f"the step is {gain:.1%} faster with it"
        rows.append(GroupTiming(group=name, replaces=info.replaces, seconds=seconds[name], change=change[name],
                                serves=serves, why=why))
    return stock, noise, rows


def all_groups(module: Any) -> list[str]:
    """Every group the package can serve, at most one of each exclusive pair (the first in `GROUPS`)."""
    chosen: list[str] = []
    for name in available_groups(module):
        if not set(group(name).excludes) & set(chosen):
            chosen.append(name)
    return chosen

