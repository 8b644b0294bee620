"""A batch of candidates for one problem: verified in parallel, then timed one at a time.

A search evaluates many candidates, and most of an evaluation is not timing: starting the
verifier, compiling the kernels, the correctness trials. Those can share the GPU (nothing
they measure depends on being alone), timing cannot. So a batch runs in two phases:

1. **verification**, every candidate in its own verifier process, up to ``workers`` at once
   (``bench`` off: correctness, compilation for the targets, all the usual checks);
2. **timing**, each candidate that passed, in a fresh verifier process of its own
   (``timing_only``: the static rules and loading again, then the timing, whose last timed
   call is compared with the fp64 reference once more), one after another, with nothing else
   of the batch running: the verification phase is over, and the spares that will run the
   timings were started during it and have finished starting (``worker_pool.wait_ready``).

The two results are merged into one :class:`EvalResult`, as a single evaluation with
``bench`` would have produced: the timing stage and figures added, a timing rejection
(deferred work, a timer attack, a wrong timed output) or an inconclusive timing becoming the
verdict. A batch of one, a CPU run, or a run without ``bench`` is just :func:`evaluate` per
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

#: How long the timing phase waits for its spares to finish starting before timing anyway
#: (a spare still starting would then run beside a timing: cold children are used instead).
SPARES_READY_WAIT_S = 60.0


def default_workers(device: Device) -> int:
    """Verifier processes at once in the verification phase: on a GPU, one per three host
    cores (each compiles kernels and runs Python checks, and spares start beside them), at
    most 6; on the CPU one (the interpreter is the work, and parallel runs would only share
    the cores)."""
    if not device.is_gpu:
        return 1
    return max(1, min(6, (os.cpu_count() or 3) // 3))


def merge_timing(verified: EvalResult, timed: EvalResult) -> EvalResult:
    """``verified`` with ``timed``'s timing stage and figures; a timing that rejected the
    candidate or could not finish decides the verdict, as it would in one evaluation."""
    merged = verified.model_copy(deep=True)
    merged.stages += [stage for stage in timed.stages if stage.name == "timing"]
    merged.bench = timed.bench
    merged.seconds = verified.seconds + timed.seconds
    if timed.memory is not None and merged.memory is not None:
        merged.memory.stage_peaks.update({k: v for k, v in timed.memory.stage_peaks.items() if k == "timing"})
    if not timed.passed:
        merged.verdict, merged.rejection, merged.inconclusive = timed.verdict, timed.rejection, timed.inconclusive
        merged.reason = f"verified, then timed in a second verifier: {timed.reason}"
    return merged


def evaluate_batch(
    problem: str | Path,
    candidates: Sequence[str | Path],
    options: EvalOptions,
    *,
    workers: int | None = None,
    on_result: Callable[[int, EvalResult], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    two_phase: bool | None = None,
    stop: Callable[[], bool] | None = None,
    on_start: Callable[[int], None] | None = None,
    before_timing: Callable[[], None] | None = None,
) -> list[EvalResult]:
    """Every candidate's result, in the order given. ``on_result(index, result)`` hears each
    final result as soon as it is known (verification failures during the first phase, timed
    ones during the second), so a caller can save it before the batch ends. Usage errors
    (unknown problem, missing file) raise as :func:`evaluate` raises them.

    ``two_phase``: None decides (two phases for two or more candidates timed on a GPU); True
    forces them anywhere (on the CPU the timing stage says it needs a GPU: for tests).
    ``stop()`` is asked before each evaluation starts (a run's time limit): once it says yes,
    no more start, and the candidates not evaluated are left out of the list returned.
    ``on_start(index)`` hears each verification (or, one by one, each evaluation) begin.
    ``before_timing()`` is called, and waited for, before anything is timed: before the timing
    phase, or one by one before each evaluation that times (a caller's own verification running
    beside the batch ends there, so that no timing runs beside it).
    """
    before_timing = before_timing or (lambda: None)
    stop = stop or (lambda: False)
    on_start = on_start or (lambda index: None)
    device = resolve_device(options.device)
    options = options.model_copy(update={"device": device})  # resolved once for the whole batch
    if two_phase is None:
        two_phase = options.bench and len(candidates) >= 2 and device.is_gpu
    if not two_phase:
        return _one_by_one(problem, candidates, options, on_result, stop, on_start,
                           before_timing if options.bench and device.is_gpu else (lambda: None))
    workers = workers or default_workers(device)
    spec = _child_spec(options, device)
    results: list[EvalResult | None] = [None] * len(candidates)
    lock = threading.Lock()
    verify = options.model_copy(update={"bench": False, "prestart": True})

    # Spares for the first verifications start now; those for the timings when the last
    # verifications start, so they start up beside that wave (nothing is timed yet) rather
    # than all at once beside the first, whose start-up they would slow.
    worker_pool.prestart(spec, count=min(workers, len(candidates)))
    if on_phase is not None:
        on_phase(f"verifying {len(candidates)} candidate(s), {workers} at a time")
    started: list[int] = []

    def verify_one(index: int) -> EvalResult | None:
        if stop():
            return None
        on_start(index)
        with lock:
            started.append(index)
            last_wave = len(started) == max(1, len(candidates) - workers + 1)
        if last_wave:
            worker_pool.prestart(spec, count=min(len(candidates), worker_pool.MAX_PER_KIND))
        result = evaluate(problem, candidates[index], verify)
        if not result.passed:
            with lock:
                results[index] = result
            if on_result is not None:
                on_result(index, result)
        return result

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kgen-verify") as pool:
        verified = list(pool.map(verify_one, range(len(candidates))))

    passed = [i for i, r in enumerate(verified) if r is not None and r.passed]
    # as many spares as there are timings to run (no idle CUDA contexts kept beyond that),
    # each done starting before the first timing
    worker_pool.trim(spec, keep=min(len(passed), worker_pool.MAX_PER_KIND))
    if passed:
        before_timing()
        worker_pool.prestart(spec, count=min(len(passed), worker_pool.MAX_PER_KIND))
        worker_pool.wait_ready(spec, SPARES_READY_WAIT_S)
        if on_phase is not None:
            on_phase(f"timing {len(passed)} verified candidate(s), one at a time")
    timing = options.model_copy(update={"timing_only": True, "prestart": True})
    for index in passed:
        if stop():
            break
        timed = evaluate(problem, candidates[index], timing)
        results[index] = merge_timing(verified[index], timed)
        if on_result is not None:
            on_result(index, results[index])
    return [r for r in results if r is not None]


def _one_by_one(problem, candidates, options, on_result, stop, on_start, before_timing) -> list[EvalResult]:
    results = []
    for index, candidate in enumerate(candidates):
        if stop():
            break
        before_timing()
        on_start(index)
        result = evaluate(problem, candidate, options)
        results.append(result)
        if on_result is not None:
            on_result(index, result)
    return results

