"""A batch of candidates for one problem: verified side by side, each timed alone on its GPU.

A search evaluates many candidates, and most of an evaluation is not timing: starting the
verifier, compiling the kernels, the correctness trials. Those can share a GPU (nothing
they measure depends on being alone), timing cannot. So a batch runs several verifiers at
once per GPU, each a complete evaluation of one candidate in its own process, and each
verifier, once its candidate is verified, asks for a **turn** alone on its GPU
(``evals/sandbox/gpu_turns.py``): kgen stops every other verifier of that GPU (SIGSTOP, the
whole process group) for as long as the candidate is timed, then lets them go on. The timing
is done in the process that verified the candidate, with its kernels loaded and compiled.

Where the verifiers run is the executor's business (``evals/executors/``): this host's one
GPU in this process, each of its GPUs in a lane process, or a Ray cluster's GPUs. A batch of
one, a CPU run, or a run without ``bench`` is one evaluation after another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from kgen.backends.device import resolve_device
from kgen.evals.executors.interface import Executor
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.lane import side_by_side as runs_side_by_side
from kgen.evals.executors.session import executor_for
from kgen.evals.harness import EvalOptions
from kgen.evals.result import EvalResult


def evaluate_batch(
    problem: str | Path,
    candidates: Sequence[str | Path],
    options: EvalOptions,
    *,
    on_result: Callable[[int, EvalResult], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    side_by_side: bool | None = None,
    stop: Callable[[], bool] | None = None,
    on_start: Callable[[int], None] | None = None,
    executor: Executor | None = None,
) -> list[EvalResult]:
    """Every candidate's result, in the order given. ``on_result(index, result)`` hears each
    result as soon as it is known, so a caller can save it before the batch ends. Usage
    errors (unknown problem, missing file) raise as :func:`evaluate` raises them.

    ``side_by_side``: None decides (side by side, with turns, for two or more candidates timed
    on a GPU); True forces it anywhere (on the CPU the timing stage says it needs a GPU and no
    turn is asked for: for tests). ``stop()`` is asked before each evaluation starts (a run's
    time limit): once it says yes, no more start, and the candidates not evaluated are left
    out of the list returned. ``on_start(index)`` hears each evaluation begin. ``executor``:
    None is the process's (``session.executor_for``).
    """
    device = resolve_device(options.device)
    options = options.model_copy(update={"device": device})  # resolved once for the whole batch
    jobs = [EvalJob.of(problem, candidate, options) for candidate in candidates]
    executor = executor or executor_for(device, options.targets)
    together = runs_side_by_side(options, len(jobs), device) if side_by_side is None else side_by_side
    if together and on_phase is not None and jobs:
        on_phase(executor.batch_line(len(jobs)))
    return executor.evaluate(jobs, on_result=on_result, stop=stop, on_start=on_start, together=together)
