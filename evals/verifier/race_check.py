"""Races: the candidate run again on the same inputs under other launch conditions (GPU only).

A kernel whose programs read what another program writes without synchronising (a split
reduction adding partial sums with a plain load and store, a program reading a neighbour's
tile before it is written) is right whenever its programs happen to run in a friendly
order: always in the CPU interpreter, which runs them one after another, and often on an
idle GPU. So after the correctness trials, on a GPU, the candidate is called again on one
set of inputs under conditions that change how its programs are scheduled:

* ``plain``: alone, on the current stream (the run the others are compared with);
* ``busy GPU``: just after a loop of large matrix products was launched on another stream,
  so the candidate's programs start while most SMs are taken and run in another order;
* ``other stream``: on a new stream of its own;
* ``other allocations``: with odd-sized blocks held first, so the caching allocator hands the
  candidate's outputs and scratch other addresses (and other leftover contents).

Every condition but ``plain`` runs :data:`REPEATS` times. Each run's outputs are compared
with the fp64 reference within the tolerance, and with the plain run's outputs within the
tolerance too: never bit for bit, because atomics legitimately add floats in another order
from run to run. A difference beyond the tolerance is ``race_condition``, and the message
says under which condition. On the CPU there is nothing to perturb: the check is skipped and
the correctness stage's report says so.

:func:`race_in_failure` is the same idea applied to a trial that already failed on the GPU:
the failing inputs run again a few times; when the runs disagree with each other beyond the
tolerance, the failure is named ``race_condition`` rather than a plain numerical mismatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from pydantic import BaseModel, Field

from kgen.evals.checks.compare import ComparisonFailure, check_structure, outputs_failure
from kgen.evals.problem.format import flatten_outputs, sizes_text
from kgen.evals.problem.layout import copy_inputs
from kgen.evals.verdict import Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.trial_parts import inputs_for, models, references
from kgen.evals.verifier.watched_call import raise_guard_violation, runtime_error

#: runs of each perturbed condition
REPEATS = 2
#: side of the bf16 matrices the busy-GPU condition multiplies, and how many products it queues
BUSY_MATRIX = 4096
BUSY_PRODUCTS = 12
#: odd-sized blocks (bytes) held during the other-allocations condition
ODD_BLOCKS = (3 * 2**20 + 512, 17 * 2**10 + 256, 45 * 2**20 + 4096)
#: how many failing runs on identical inputs :func:`race_in_failure` makes
FAILURE_RERUNS = 4

SKIPPED_ON_CPU = "race check skipped: the CPU interpreter runs a kernel's programs one after another, so there is no scheduling to perturb (it runs on a GPU)"


class RaceCheck(BaseModel):
    """What the race check ran, or why it did not."""

    conditions: list[str] = Field(default_factory=list)
    runs: int = 0
    seconds: float = 0.0
    skipped: str = ""

    @property
    def summary(self) -> str:
        if self.skipped:
            return self.skipped
        return (f"{self.runs} runs under other launch conditions ({', '.join(self.conditions)}) matched the "
                "reference and each other within the tolerance")


@contextmanager
def _busy_gpu(device: torch.device) -> Iterator[None]:
    """Matrix products queued on another stream, running while the block runs."""
    side = torch.cuda.Stream(device)
    a = torch.randn(BUSY_MATRIX, BUSY_MATRIX, device=device, dtype=torch.bfloat16)
    b = torch.randn(BUSY_MATRIX, BUSY_MATRIX, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(side):
        for _ in range(BUSY_PRODUCTS):
            c = a @ b
    yield
    torch.cuda.synchronize(device)
    del a, b, c


@contextmanager
def _other_stream(device: torch.device) -> Iterator[None]:
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        yield
    torch.cuda.current_stream(device).wait_stream(stream)


@contextmanager
def _other_allocations(device: torch.device) -> Iterator[None]:
    held = [torch.empty(n, dtype=torch.uint8, device=device) for n in ODD_BLOCKS]
    yield
    del held


@contextmanager
def _plain(device: torch.device) -> Iterator[None]:
    yield


CONDITIONS: dict[str, Callable[[torch.device], Any]] = {
    "plain": _plain,
    "busy GPU": _busy_gpu,
    "other stream": _other_stream,
    "other allocations": _other_allocations,
}


def _run(ctx: VerifierContext, candidate: Any, inputs: list[Any], condition: str, what: str) -> list[Any]:
    """One uninstrumented call under ``condition``, its outputs cloned once the device is idle."""
    args = copy_inputs(inputs)
    try:
        # the condition set up by kgen outside the guard; only the candidate's call inside it
        with torch.no_grad(), CONDITIONS[condition](ctx.device), ctx.guard:
            outputs = flatten_outputs(candidate(*args))
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise_guard_violation(ctx)
        raise runtime_error(ctx, exc, f"{what}, {condition}") from exc
    raise_guard_violation(ctx)
    torch.cuda.synchronize(ctx.device)
    return [o.clone() if isinstance(o, torch.Tensor) else o for o in outputs]


def _failure(ctx: VerifierContext, outputs: list[Any], expected: list[Any], native: list[Any]) -> ComparisonFailure | None:
    try:
        check_structure(outputs, native)
    except ComparisonFailure as exc:
        return exc
    return outputs_failure(outputs, [e.to(torch.float64) if isinstance(e, torch.Tensor) else e for e in expected],
                           ctx.precision)


def run_race_check(ctx: VerifierContext, problem: Any, seed: int) -> RaceCheck:
    """The candidate under each condition (module doc); raises ``Rejected(race_condition)``."""
    if ctx.device.type != "cuda":
        return RaceCheck(skipped=SKIPPED_ON_CPU)
    started = time.monotonic()
    reference, candidate = models(ctx, problem, seed)
    inputs = inputs_for(ctx, problem, seed, "normal")
    native, ref64 = references(ctx, reference, inputs)
    what = f"race check, seed {seed}, sizes {sizes_text(problem.sizes)}"
    plain = _run(ctx, candidate, inputs, "plain", what)
    result = RaceCheck(conditions=list(CONDITIONS), runs=1)
    for condition in [c for c in CONDITIONS if c != "plain"] * REPEATS + ["plain"]:
        outputs = _run(ctx, candidate, inputs, condition, what)
        result.runs += 1
        failure = _failure(ctx, outputs, ref64, native)
        against = "the fp64 reference"
        if failure is None and condition != "plain":
            failure, against = _failure(ctx, outputs, plain, native), "the plain run's output"
        if failure is not None:
            raise Rejected(
                RejectionClass.RACE_CONDITION,
                f"right in every trial, wrong when run again on the same inputs under '{condition}': against "
                f"{against}: {failure}; the kernel's programs depend on the order they run in ({what})",
            )
        del outputs
    result.seconds = round(time.monotonic() - started, 3)
    return result


def race_in_failure(ctx: VerifierContext, candidate: Any, inputs: list[Any], ref64: list[Any],
                    native: list[Any], what: str) -> str | None:
    """For a trial that failed on the GPU: the same inputs run :data:`FAILURE_RERUNS` more times
    (plainly, and beside a busy GPU); a message when the runs disagree with each other beyond
    the tolerance (the failure is a race), None when they agree (or on the CPU)."""
    if ctx.device.type != "cuda":
        return None
    try:
        runs = [_run(ctx, candidate, inputs, "plain" if i % 2 == 0 else "busy GPU", what)
                for i in range(FAILURE_RERUNS)]
    except Rejected:
        return None  # a diagnosis only: the failure stands as found
    right = sum(_failure(ctx, r, ref64, native) is None for r in runs)
    disagree = next((i for i, r in enumerate(runs[1:], start=1) if _failure(ctx, r, runs[0], native) is not None), None)
    if disagree is None:
        return None
    return (f"runs on identical inputs disagree beyond the tolerance (run 1 against run {disagree + 1}); "
            f"{right} of {len(runs)} reruns matched the fp64 reference: the kernel's programs depend on the "
            "order they run in")
