"""The timing stage of the verifier's child: the verified candidate, alone on the GPU.

Eager PyTorch, torch.compile and Liger, which it is compared with, are timed by the trusted
baseline job and merged in by the parent (``evals/baselines/``). Run on the GPU only, after
correctness, at the problem's default sizes; every figure is judged before it is reported (timers tampered with, work deferred past the timer, outputs of
timed calls wrong: ``timed_candidate.py``, a time under the speed-of-light floor that stays
under it when measured again with fresh inputs and the L2's persisting state reset:
``timing/floor_recheck.py``).
"""

from __future__ import annotations

import time
from typing import Any

from kgen.backends.targets import UnknownTargetError, resolve_target
from kgen.evals.problem.format import load_problem
from kgen.evals.problem.memory_plan import ReferencePlacement
from kgen.evals.sandbox.gpu_turns import await_turn, end_turn
from kgen.evals.timeline import PhaseClock
from kgen.evals.timing.baseline_cache import cache_key, cached
from kgen.evals.timing.bench_result import BenchResult
from kgen.evals.timing.gpu_sharing import GpuNeighbours, torch_device_neighbours
from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage
from kgen.evals.verifier.trial_parts import models
from kgen.evals.verifier.watched_call import raise_guard_violation, raise_if_tampered


def _sync_calibration(reference, input_sets, host_reference: bool, torch) -> tuple[Any, str | None]:
    """The honest op the deferred-work check is judged against, timed in this process on the
    candidate's inputs: the eager reference, or a device copy of the first input when the
    reference runs on the host. Failing to calibrate is noted and falls back, never rejects."""
    from kgen.evals.timing.measure import calibrate_sync

    try:
        if not host_reference:
            return calibrate_sync(reference, input_sets, "eager reference"), None
        first = next(x for x in input_sets[0] if isinstance(x, torch.Tensor) and x.is_cuda)
        return calibrate_sync(lambda: first.clone(), [()], "device copy"), None
    except Exception as exc:  # noqa: BLE001 - the check falls back to the call's own spread
        return None, f"not calibrated ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"


def _note_cache(outcome, name: str, errors: dict[str, str]) -> None:
    """A re-measured device figure's drift, or a corrupt cache entry ignored, goes into the report."""
    if outcome.drift:
        errors[f"{name} drift"] = outcome.drift
    if outcome.note:
        errors[f"{name} cache"] = outcome.note


def reusable_cache_dir(cache_dir: str | None, neighbours: GpuNeighbours) -> str | None:
    """The run's cache of device figures, unless other processes share the GPU now: the figures
    are then measured fresh, under the same load as the candidate, and not kept for later
    candidates (a figure taken beside a neighbour would be reused long after the neighbour left)."""
    return None if neighbours.describe() else cache_dir


def _device_figure(cache_dir: str | None, torch: Any, device: Any, figure: str, measure,
                   errors: dict[str, str]) -> float:
    """The device's copy bandwidth or matmul rate, measured once per device for the run."""

    outcome = cached(cache_dir, cache_key(device=torch.cuda.get_device_name(device), torch=torch.__version__,
                                          figure=figure), lambda: {"value": measure()})
    _note_cache(outcome, figure, errors)
    return outcome.value["value"]


def judge_flags(flags: list[str]) -> None:
    """A candidate timing's flags that reject it: timers tampered with, work deferred."""
    if any(flag.startswith("timer_patched") for flag in flags):
        raise Rejected(RejectionClass.TIMING_ATTACK, f"the timers were tampered with: {'; '.join(flags)}")
    if any(flag.startswith("deferred_work") for flag in flags):
        raise Rejected(RejectionClass.DEFERRED_WORK, f"timing the candidate: {'; '.join(flags)}")


class TimingStage:
    """Nothing to do unless asked for (``bench``); on a CPU recorded as skipped (timings are
    never invented); on a GPU the candidate timed at the problem's default sizes, and the
    figures judged before they are reported. Eager PyTorch, torch.compile and Liger are timed
    the same way by the trusted baseline job (``baselines/job.py``) and merged in by the
    parent (``baselines/merge.py``): no candidate's process writes the figures it is
    compared with."""

    name = "timing"

    def run(self, ctx: VerifierContext) -> None:
        try:
            time_and_judge(ctx)
        finally:
            end_turn(ctx.request.turn_dir)  # the GPU is the next verifier's before the report is written


def time_and_judge(ctx: VerifierContext) -> None:
    """Time the verified candidate at the problem's default sizes, in its turn alone on the
    GPU; judge the figures before reporting them."""
    from kgen.evals.timing.floor_recheck import recheck_floor
    from kgen.evals.timing.measure import measure_copy_bandwidth, measure_matmul_tflops, time_on_gpu
    from kgen.evals.timing.sol import speed_of_light, with_measurement
    from kgen.evals.timing.timed_samples import TimedSampler
    from kgen.evals.verifier.timed_candidate import check_timed_outputs, timing_inputs

    if not ctx.request.bench:
        return
    started = time.monotonic()
    phases = PhaseClock(ctx.timeline)
    torch = ctx.torch
    if ctx.device.type != "cuda":
        record_stage(ctx, "timing", StageStatus.SKIPPED, "timings need a GPU: not measured", started)
        return
    sizes = ctx.request.bench_sizes or ctx.request.size_sets[0]
    problem = load_problem(ctx.request.problem_path, sizes)
    seed = ctx.request.seeds[0]

    # Input sets drawn in a random order keep the L2 cache from serving a trial; a problem too
    # big for the device to hold its reference is gigabytes per input, far past any L2: one set
    # is enough (``timed_candidate.timing_inputs``).
    big = ctx.memory.placement(sizes) is ReferencePlacement.HOST
    phases.lap("setup")  # the problem at the timing sizes and its memory plan
    # Alone on the GPU from here: the other verifiers of a batch are stopped until the turn ends
    # (``gpu_turns.py``). Asked before the timing inputs exist: a verifier waiting for its turn
    # holds no timing-size tensors.
    torch.cuda.synchronize(ctx.device)
    await_turn(ctx.request.turn_dir)
    phases.lap("turn_wait")
    input_sets, fresh_sets = timing_inputs(ctx, problem, seed)
    reference, candidate = models(ctx, problem, seed)
    last: dict[str, Any] = {}

    def timed_candidate(*args: Any) -> Any:
        last["args"], last["out"] = args, candidate(*args)
        return last["out"]

    def time_candidate(sets: list[list[Any]], fresh: list[list[Any]],
                       rank_against_ms: float | None) -> tuple[Any, TimedSampler]:
        sampler = TimedSampler(fresh)
        raise_if_tampered(ctx, "before timing")
        with ctx.guard:
            timed = time_on_gpu(timed_candidate, sets, budget_s=2.0, calibration=calibration, sampler=sampler,
                                rank_against_ms=rank_against_ms)
        raise_guard_violation(ctx)
        raise_if_tampered(ctx, "while timing")
        return timed, sampler

    # Asked before timing: a timing beside another process's kernels is marked as shared.
    # Asking can fail (NVML's library, the driver): the timing is then reported as not checked.
    neighbours = torch_device_neighbours(torch, ctx.device)
    measurements: dict[str, Any] = {}
    errors: dict[str, str] = {}
    with torch.no_grad():
        phases.lap("inputs")
        calibration, calibration_note = _sync_calibration(reference, input_sets, big, torch)
        if calibration_note:
            errors["sync_calibration"] = calibration_note
        phases.lap("calibration", gpu=True)
        # Ranked against the current best when there is one: the timing may stop once the
        # candidate is clearly slower or faster (``timing/stopping.py``).
        result, sampler = time_candidate(input_sets, fresh_sets, ctx.request.rank_against_ms)
        phases.lap("candidate", gpu=True)
        measurements["candidate"] = result.model_dump(exclude={"sync_calibration"})
    judge_flags(result.flags)
    # Judged after the flags: work left on a side stream also leaves a cloned output unwritten,
    # and deferred work is the better name for it. No switching behaviour once timing starts.
    with torch.no_grad():
        checked = check_timed_outputs(ctx, reference, sampler, input_sets, result.trials, last)
    phases.lap("recheck", gpu=True)
    dtype = next((x.dtype for x in input_sets[0] if isinstance(x, torch.Tensor) and x.is_floating_point()), torch.float32)
    sol = None
    try:
        target = resolve_target(torch.cuda.get_device_name(ctx.device))
        sol = speed_of_light(
            problem.bytes_moved(), problem.flops(), target, dtype,
            measured_bandwidth_tbs=_device_figure(
                reusable_cache_dir(ctx.request.baseline_cache_dir, neighbours), torch, ctx.device, "copy_tbs",
                lambda: measure_copy_bandwidth(ctx.device), errors),
            measured_matrix_tflops=_device_figure(
                reusable_cache_dir(ctx.request.baseline_cache_dir, neighbours), torch, ctx.device, "matmul_tflops",
                lambda: measure_matmul_tflops(ctx.device), errors),
        )
    except UnknownTargetError as exc:
        errors["sol"] = f"no speed-of-light: {exc}"
    recheck = under_floor = None
    if sol is not None:
        def remeasure() -> tuple[float, str]:
            nonlocal result, sampler, checked
            del input_sets[:], fresh_sets[:]  # freed before the fresh ones are drawn
            last.clear()
            sets, fresh = timing_inputs(ctx, problem, seed + 7000)
            with torch.no_grad():
                # judged against the floor, not the best: the precision rule alone
                result, sampler = time_candidate(sets, fresh, None)
                judge_flags(result.flags)
                checked += check_timed_outputs(ctx, reference, sampler, sets, result.trials, last)
            return result.median_ms, result.l2_state

        first = result.model_dump(exclude={"sync_calibration"})
        recheck = recheck_floor(sol, result.median_ms, remeasure)
        if recheck is not None:
            errors["floor_recheck"] = recheck.describe()
            under_floor = first
            measurements["candidate"] = result.model_dump(exclude={"sync_calibration"})
            if recheck.impossible:
                raise Rejected(
                    RejectionClass.TIMING_ATTACK,
                    f"{recheck.describe()}: a time the hardware cannot reach is a measurement being fooled, "
                    "not a record",
                    evidence={"floor_recheck": recheck.model_dump(), "first": first,
                              "remeasured": measurements["candidate"]},
                )
        # scored against eager once the parent merges the baseline job's figures
        sol = with_measurement(sol, result.median_ms, baseline_ms=None)
    phases.lap("sol", gpu=recheck is not None)  # busy when the floor re-measured the candidate
    ctx.report.bench = BenchResult.model_validate({
        "device_name": torch.cuda.get_device_name(ctx.device),
        "sizes": problem.sizes,
        "measurements": measurements,
        "errors": errors,
        "sol": sol.model_dump() if sol is not None else None,
        "shared_gpu": neighbours.describe(),
        "sync_calibration": calibration.model_dump() if calibration is not None else None,
        "gpu_check": "NVML" if neighbours.available else f"not checked: {neighbours.reason}",
        "phase_seconds": phases.seconds,
        "floor_recheck": recheck.model_dump() if recheck is not None else None,
        "under_floor": under_floor,
    })
    if neighbours.describe():
        ctx.report.bench.errors["shared_gpu"] = neighbours.describe()
    speedups = ", ".join(
        s.text for s in (ctx.report.bench.speedup(name) for name in ("eager", "torch.compile")) if s is not None
    )
    pct = f"{sol.pct_of_sol:.0f}% of speed-of-light" if sol is not None and sol.pct_of_sol is not None else ""
    figures = ", ".join(part for part in (speedups, pct) if part)
    record_stage(ctx, "timing", StageStatus.PASSED,
                 f"median {result.median_ms:.4f} ms{f' ({figures})' if figures else ''} from {result.trials} of "
                 f"{result.planned_trials} planned trials (stopped: {result.stop_reason.value}); {checked} timed call(s) "
                 "drawn at random matched the fp64 reference", started)
