"""Kernel calls recorded inside the training run: the tensors the model handed each kernel.

The loss curve can hide a kernel bug at small sizes (AdamW normalises each element's update, so
a few percent of error in a hot embedding row moves the loss by less than rounding noise). The
kernel's own output on the run's own tensors cannot hide it: `op_check` judges these calls
against each kernel's catalog problem in fp64, by the verifier's tolerances. Recording every call
would hold the whole run in memory, so only the first call of each kernel at the chosen steps is
kept (by default the first and the last step: fresh weights and trained ones)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict


class LiveCall(BaseModel):
    """One kernel call of the run: its problem, its step, the module's init arguments, the inputs and output."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    problem: str
    step: int
    init_args: tuple[Any, ...] = ()
    args: list[Any]
    outputs: list[Any]


def _kept(value: Any) -> Any:
    import torch

    return value.detach().clone() if isinstance(value, torch.Tensor) else value


class LiveCalls:
    """Wraps kernels so that their first call at each of ``steps`` is kept (``-1``: the last step)."""

    def __init__(self, steps: tuple[int, ...], last_step: int) -> None:
        self.steps = {last_step if s < 0 else s for s in steps}
        self.step = 0
        self.calls: list[LiveCall] = []

    def at_step(self, step: int) -> None:
        self.step = step

    def wrap(self, problem: str, kernel: Callable[..., Any], init_args: tuple[Any, ...]) -> Callable[..., Any]:
        """``kernel`` as it was, keeping its first call at each recorded step (with ``init_args``, the
        arguments its reference is built with)."""
        from kgen.evals.problem.format import flatten_outputs

        def call(*args: Any) -> Any:
            result = kernel(*args)
            if self.step in self.steps and not any(c.problem == problem and c.step == self.step for c in self.calls):
                self.calls.append(LiveCall(problem=problem, step=self.step, init_args=init_args,
                                           args=[_kept(a) for a in args],
                                           outputs=[_kept(o) for o in flatten_outputs(result)]))
            return result

        return call
