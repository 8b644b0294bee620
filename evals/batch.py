"""A batch of candidates for one problem: verified side by side, each timed alone on the GPU.

A search evaluates many candidates, and most of an evaluation is not timing: starting the
verifier, compiling the kernels, the correctness trials. Those can share the GPU (nothing
they measure depends on being alone), timing cannot. So a batch runs up to ``workers``
verifiers at once, each a complete evaluation of one candidate in its own process, and each
verifier, once its candidate is verified, asks for a **turn** alone on the GPU
(``evals/sandbox/gpu_turns.py``): kgen stops every other verifier (SIGSTOP, the whole process
group) for as long as the candidate is timed, then lets them go on. The timing is done in the
process that verified the candidate, with its kernels loaded and compiled: no second process,
no second load. Turns are granted one at a time in the order they are asked for, so a
candidate that is slow to verify, or hangs until its time limit, delays no other's timing.

A batch of one, a CPU run, or a run without ``bench`` is just :func:`evaluate` per
candidate, in order.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kgen.backends.device import Device, resolve_device
from kgen.evals.harness import EvalOptions, _child_spec, evaluate
from kgen.evals.result import EvalResult
from kgen.evals.sandbox import worker_pool


def default_workers(device: Device) -> int:
    """Verifiers at once: on a GPU, one per two host cores (each compiles kernels and runs
    Python checks; those waiting for a turn, or stopped during another's, use none), at most
    :data:`worker_pool.MAX_PER_KIND` (the spares kept for them); on the CPU one (the
    interpreter is the work, and parallel runs would only share the cores)."""
    if not device.is_gpu:
        return 1
    return max(1, min(worker_pool.MAX_PER_KIND, (os.cpu_count() or 2) // 2))


def evaluate_batch(
    problem: str | Path,
    candidates: Sequence[str | Path],
    options: EvalOptions,
    *,
    workers: int | None = None,
    on_result: Callable[[int, EvalResult], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    side_by_side: bool | None = None,
    stop: Callable[[], bool] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> list[EvalResult]:
    """Every candidate's result, in the order given. ``on_result(index, result)`` hears each
    result as soon as it is known, so a caller can save it before the batch ends. Usage
    errors (unknown problem, missing file) raise as :func:`evaluate` raises them.

    ``side_by_side``: None decides (side by side, with turns, for two or more candidates timed
    on a GPU); True forces it anywhere (on the CPU the timing stage says it needs a GPU and no
    turn is asked for: for tests). ``stop()`` is asked before each evaluation starts (a run's
    time limit): once it says yes, no more start, and the candidates not evaluated are left
    out of the list returned. ``on_start(index)`` hears each evaluation begin.
    """
    stop = stop or (lambda: False)
    on_start = on_start or (lambda index: None)
    device = resolve_device(options.device)
    options = options.model_copy(update={"device": device})  # resolved once for the whole batch
    if side_by_side is None:
        side_by_side = options.bench and len(candidates) >= 2 and device.is_gpu
    if not side_by_side:
        return _one_by_one(problem, candidates, options, on_result, stop, on_start)
    workers = min(workers or default_workers(device), len(candidates))
    results: list[EvalResult | None] = [None] * len(candidates)
    lock = threading.Lock()
    shared = options.model_copy(update={"gpu_turns": True, "prestart": True, "spares": workers})
    worker_pool.prestart(_child_spec(options, device), count=workers)
    if on_phase is not None:
        on_phase(f"evaluating {len(candidates)} candidate(s), {workers} at a time, each timed alone on the GPU")

    def evaluate_one(index: int) -> None:
        if stop():
            return
        on_start(index)
        result = evaluate(problem, candidates[index], shared)
        with lock:
            results[index] = result
        if on_result is not None:
            on_result(index, result)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kgen-verify") as pool:
        for future in [pool.submit(evaluate_one, index) for index in range(len(candidates))]:
            future.result()  # a usage error raises here, as it would one by one
    return [r for r in results if r is not None]


def _one_by_one(problem, candidates, options, on_result, stop, on_start) -> list[EvalResult]:
    results = []
    for index, candidate in enumerate(candidates):
        if stop():
            break
        on_start(index)
        result = evaluate(problem, candidate, options)
        results.append(result)
        if on_result is not None:
            on_result(index, result)
    return results
