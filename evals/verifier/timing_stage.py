"""The timing stage of the verifier's child: the verified candidate against eager and torch.compile.

Run on the GPU only, after correctness, at the problem's default sizes; every figure is
judged before it is reported (timers tampered with, work deferred past the timer, outputs of
timed calls wrong: ``timed_candidate.py``, a time under the speed-of-light floor that stays
under it when measured again with fresh inputs and the L2's persisting state reset:
``timing/floor_recheck.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kgen.backends.registry import backend_info
from kgen.backends.targets import UnknownTargetError, resolve_target
from kgen.evals.problem.format import load_problem
from kgen.evals.problem.memory_plan import ReferencePlacement
from kgen.evals.sandbox.gpu_turns import await_turn, end_turn
from kgen.evals.timeline import Timeline
from kgen.evals.timing.baseline_cache import cache_key, cached, file_digest
from kgen.evals.timing.baselines import BaselineUnavailable, liger_baseline
from kgen.evals.timing.bench_result import BenchResult
from kgen.evals.timing.gpu_sharing import GpuNeighbours, gpu_neighbours
from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage
from kgen.evals.verifier.trial_parts import models
from kgen.evals.verifier.watched_call import raise_guard_violation, raise_if_tampered


def _comparable(ctx: VerifierContext, problem, torch) -> dict[str, Any]:
    """What makes two baseline timings comparable: the problem file, its sizes and policies,
    the device and the library versions (a cache key's parts): torch's and those of every
    toolchain the candidate's backend requires (``BackendInfo.requires``)."""
    import importlib

    toolchains = {
        name: str(getattr(importlib.import_module(name), "__version__", "unknown"))
        for name in backend_info(ctx.request.backend).requires
    }
    return {
        "problem": file_digest(ctx.request.problem_path), "sizes": problem.sizes,
        "policies": ctx.request.policies.describe(), "device": torch.cuda.get_device_name(ctx.device),
        "torch": torch.__version__, **toolchains,
    }


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


class PhaseClock:
    """Seconds per phase of the timing stage, each lap ending the phase it names; with a
    timeline, each phase is also one of its spans (``timing.<phase>``, nested under the stage),
    marked ``gpu`` where the phase keeps the GPU busy."""

    def __init__(self, timeline: Timeline | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()
        self._timeline = timeline
        self._last_epoch = time.time()

    def lap(self, name: str, gpu: bool = False) -> None:
        now = time.monotonic()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 3)
        self._last = now
        if self._timeline is not None:
            self._last_epoch = self._timeline.lap(name, self._last_epoch, gpu)


def _note_cache(outcome, name: str, errors: dict[str, str]) -> None:
    """A re-measured baseline's drift, or a corrupt cache entry ignored, goes into the report."""
    if outcome.drift:
        errors[f"{name} drift"] = outcome.drift
    if outcome.note:
        errors[f"{name} cache"] = outcome.note


def reusable_cache_dir(cache_dir: str | None, neighbours: GpuNeighbours) -> str | None:
    """The run's baseline cache, unless other processes share the GPU now: baselines are then
    timed fresh beside the candidate, under the same load, and not kept for later candidates
    (a figure taken beside a neighbour would be reused long after the neighbour left)."""
    return None if neighbours.describe() else cache_dir


def _device_figure(cache_dir: str | None, same: dict[str, Any], figure: str, measure,
                   errors: dict[str, str]) -> float:
    """The device's copy bandwidth or matmul rate, measured once per device for the run."""

    outcome = cached(cache_dir, cache_key(device=same["device"], torch=same["torch"], figure=figure),
                     lambda: {"value": measure()})
    _note_cache(outcome, figure, errors)
    return outcome.value["value"]


def baselines_to_time(ctx: VerifierContext, reference: Any, problem: Any) -> list[tuple[str, Callable[[], Any]]]:
    """The baselines this process times, each with how to build it: eager, torch.compile and
    Liger, built only when timed (torch.compile's first call imports dynamo and inductor:
    seconds a baseline reused from the run's cache does not need). Nothing under
    ``baselines_by_job``: the trusted baseline job times them and the parent merges them in,
    so no candidate's process writes the figures it is compared with."""
    if ctx.request.baselines_by_job:
        return []
    torch = ctx.torch
    return [("eager", lambda: reference), ("torch.compile", lambda: torch.compile(reference)),
            ("liger", lambda: liger_baseline(problem))]


def judge_flags(flags: list[str]) -> None:
    """A candidate timing's flags that reject it: timers tampered with, work deferred."""
    if any(flag.startswith("timer_patched") for flag in flags):
        raise Rejected(RejectionClass.TIMING_ATTACK, f"the timers were tampered with: {'; '.join(flags)}")
    if any(flag.startswith("deferred_work") for flag in flags):
        raise Rejected(RejectionClass.DEFERRED_WORK, f"timing the candidate: {'; '.join(flags)}")


class TimingStage:
    """Nothing to do unless asked for (``bench``); on a CPU recorded as skipped (timings are
    never invented); on a GPU the candidate, eager PyTorch and torch.compile timed the same
    way at the problem's default sizes (the baselines by the trusted baseline job instead
    under ``baselines_by_job``), and the figures judged before they are reported."""

    name = "timing"

    def run(self, ctx: VerifierContext) -> None:
        try:
            time_and_judge(ctx)
        finally:
            end_turn(ctx.request.turn_dir)  # the GPU is the next verifier's before the report is written


def time_and_judge(ctx: VerifierContext) -> None:
    """Time the verified candidate, eager PyTorch and torch.compile the same way, at the
    problem's default sizes; judge the figures before reporting them."""
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
    try:
        neighbours = gpu_neighbours(ctx.device.index or 0, pci_bus_id=getattr(
            torch.cuda.get_device_properties(ctx.device), "pci_bus_id", None))
    except Exception as exc:  # noqa: BLE001 - a failed check is reported, never fatal
        neighbours = GpuNeighbours(available=False, reason=f"{type(exc).__name__}: {exc}")
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
        same = _comparable(ctx, problem, torch)
        for name, build in baselines_to_time(ctx, reference, problem):
            try:
                outcome = cached(reusable_cache_dir(ctx.request.baseline_cache_dir, neighbours), cache_key(**same, baseline=name),
                                 # a baseline is honest by construction: no deferred-work series;
                                 # it is never ranked against a candidate: the precision rule alone
                                 lambda build=build: time_on_gpu(build(), input_sets, budget_s=2.0,
                                                                 check_sync=False).model_dump())
            except BaselineUnavailable as exc:
                errors[name] = f"not measured: {exc}"
                continue
            except Exception as exc:  # noqa: BLE001 - a baseline that fails is reported, not fatal
                errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                continue
            measurements[name] = {**outcome.value, "reused": outcome.reused, "age_s": round(outcome.age_s, 1)}
            _note_cache(outcome, name, errors)
        # busy unless every baseline was reused from the run's cache (then only files were read)
        phases.lap("baselines", gpu=any(not m.get("reused", False) for k, m in measurements.items() if k != "candidate"))
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
                reusable_cache_dir(ctx.request.baseline_cache_dir, neighbours), same, "copy_tbs", lambda: measure_copy_bandwidth(ctx.device), errors),
            measured_matrix_tflops=_device_figure(
                reusable_cache_dir(ctx.request.baseline_cache_dir, neighbours), same, "matmul_tflops", lambda: measure_matmul_tflops(ctx.device),
                errors),
        )
    except UnknownTargetError as exc:
        errors["sol"] = f"no speed-of-light: {exc}"
    eager_ms = measurements.get("eager", {}).get("median_ms")
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
        sol = with_measurement(sol, result.median_ms, baseline_ms=eager_ms)
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
