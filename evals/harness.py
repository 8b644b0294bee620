"""Evaluate one candidate on one problem: the parent side of the sandbox.

This is what `kgen eval` and the agent call. Usage mistakes (a missing file,
an unknown problem or target, no GPU for ``--device cuda``) raise a
``KgenUsageError`` (``kgen.errors``) before anything runs; everything the candidate does
wrong ends as a rejected ``EvalResult``, never as an exception here.
"""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from kgen.backends.device import Device, DeviceOption, resolve_device
from kgen.backends.registry import backend_info, require_usable
from kgen.backends.targets import resolve_target
from kgen.core.config import compiler_cache_dir
from kgen.core.option_table import evaluation_field
from kgen.core.text import counted
from kgen.core.version import __version__
from kgen.errors import KgenUsageError
from kgen.evals.baselines.service import apply_baselines, start_baselines
from kgen.evals.problem.argument_sets import argument_plan
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import ProblemInfo, consistent_sizes, sizes_text
from kgen.evals.problem.size_sets import SizeSet, verification_size_plan
from kgen.evals.problem.threshold_sets import threshold_size_sets
from kgen.evals.result import EvalResult
from kgen.evals.sandbox import worker_pool
from kgen.evals.sandbox.box import SandboxLimits, SandboxOutcome, run_python_module
from kgen.evals.sandbox.lifecycle import install_signal_handlers
from kgen.evals.sandbox.scratch import new_workdir
from kgen.evals.static_rules.size_thresholds import find_size_thresholds
from kgen.evals.timeline import Timeline
from kgen.evals.timing.baseline_cache import file_digest
from kgen.evals.verdict import InconclusiveCause, RejectionClass, StageResult, StageStatus, Verdict
from kgen.evals.verifier.messages import (
    HEARTBEAT_FILE,
    STAGES,
    ChildReport,
    ChildRequest,
)


class EvalOptions(BaseModel):
    """How one candidate is evaluated. The options a person sets (`kgen eval` and `kgen bench`
    flags, ``kgen.evaluate`` keywords, a run's settings) take their defaults and bounds from
    ``kgen.core.option_table`` (``evaluation_field``); the others are the callers' own."""

    #: the person's word, or a device resolved once by the caller (a run, a batch): passed on as it is
    device: DeviceOption = evaluation_field("device")
    backend: str = evaluation_field("backend")
    targets: list[str] = evaluation_field("targets")
    #: targets compiled for as well, whose failure is recorded (``EvalResult.compiles_for``) and
    #: is no rejection: a search for several GPUs makes a kernel for one and learns which others
    #: it fits; ``targets`` are the ones the verdict stands for
    also_compile_for: list[str] = Field(default_factory=list)
    #: fixed seeds for reproducing a failure; by default every run draws fresh ones
    seeds: list[int] | None = evaluation_field("seeds")
    n_seeds: int = evaluation_field("n_seeds")
    timeout_s: float = evaluation_field("timeout_s")
    #: verify at the problem's small (CPU) size plan even on a GPU: quick checks, red-team runs
    small_sizes: bool = evaluation_field("small_sizes")
    #: run the input distributions beyond the problem's own inputs ("normal"): N(0, 1) where those are of one sign, probes, magnitudes, ids
    distributions: bool = evaluation_field("distributions")
    #: train a small model with the candidate's gradient (backward problems)
    train_check: bool = evaluation_field("train_check")
    #: after verification, time the candidate, eager and torch.compile at the default sizes (GPU)
    bench: bool = evaluation_field("bench")
    keep_workdir: bool = False
    #: keep a verifier started ahead for the next evaluation (``worker_pool.py``): for callers
    #: that evaluate one candidate after another (the agent, ``kgen bench``)
    prestart: bool = False
    #: the verifier runs beside others (a batch, the red-team matrix): it asks for a turn alone
    #: on the GPU before it times the candidate, sharing the GPU until then, and with
    #: ``prestart`` the next spare starts during this run (``evals/sandbox/gpu_turns.py``)
    gpu_turns: bool = False
    #: with ``prestart``: how many spares are kept ready for the evaluations that follow (a
    #: batch keeps one per verifier it runs at once, so the next batch finds them started)
    spares: int = 1
    #: policy overrides (``evals/problem/policies.py``); None: the problem's declaration, else the default
    precision: str | None = evaluation_field("precision")
    torch_ops: str | None = evaluation_field("torch_ops")
    #: harness self-test (``evals/suites/self_test.py``): the candidate is the problem's reference, and
    #: the rules that demand a kernel are off; every correctness check still runs
    reference_self_test: bool = False
    #: a folder where the baselines' timings are kept for the run (the agent's run directory):
    #: measured once per problem, sizes and device, not once per candidate; None measures afresh
    baseline_cache_dir: str | None = None
    #: the current best candidate's median (ms) at the timing sizes: the timing stops once the
    #: candidate is clearly slower or faster (``timing/stopping.py``); None: precision alone
    rank_against_ms: float | None = None


def draw_seeds(n: int) -> list[int]:
    """Fresh seeds for a verification that was given none: every run draws its own."""
    return [secrets.randbelow(2**31 - 1) for _ in range(n)]


def _validate_targets(names: list[str]) -> list[str]:
    return [resolve_target(name).name for name in names]


def _validate_backend(name: str, targets: list[str]) -> None:
    """A backend kgen knows, whose toolchain is installed, and that compiles for the targets."""

    require_usable(name, [resolve_target(t) for t in targets])


def evaluate(
    problem: str | Path,
    candidate: str | Path,
    options: EvalOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvalResult:
    """Verify a candidate against a problem's reference in a sandboxed child process.

    ``progress`` hears one line once the inputs are validated and the child starts.
    """
    options = options or EvalOptions()
    started, timeline, mark = time.monotonic(), Timeline(), time.time()
    install_signal_handlers()  # a script's Ctrl-C or SIGTERM ends the verifier child too
    info = resolve_problem(problem)
    candidate_path = Path(candidate).expanduser()
    if not candidate_path.is_file():
        raise KgenUsageError(f"candidate file not found: {candidate}")
    targets = _validate_targets(options.targets)
    _validate_backend(options.backend, targets)
    also_compile_for = [t for t in _validate_targets(options.also_compile_for) if t not in targets]
    device = resolve_device(options.device)
    seeds = options.seeds or draw_seeds(options.n_seeds)
    policies = info.policies(options.precision, options.torch_ops)

    spec = _child_spec(options, device)
    # Started first: the baselines' compile runs beside this candidate's verification, and
    # every candidate of the problem in this process shares the one job (``baselines/service.py``).
    baselines = (start_baselines(info.path, dict(info.sizes), device, policies, options.backend,
                                 SandboxLimits(timeout_s=options.timeout_s))
                 if options.bench and device.is_gpu else None)
    mark = timeline.lap("setup", mark)
    spare = worker_pool.take(spec) if options.prestart else None
    early = options.prestart and worker_pool.starts_during_run(spec, timed=options.bench, turns=options.gpu_turns)
    if early:  # the next evaluations' spares start up while this one runs
        worker_pool.prestart(spec, count=options.spares)
    mark = timeline.lap("take_spare", mark)  # waits while a spare asked for is still being started
    workdir = spare.workdir if spare is not None else new_workdir()
    try:
        size_device = Device.CPU if options.small_sizes else device
        plan = size_plan(info, candidate_path.read_text(encoding="utf-8", errors="replace"), size_device)
        mark = timeline.lap("size_plan", mark)  # the verification sizes and the threshold analysis
        # The candidate may write only inside box/; the request and the report live beside it.
        box = workdir / "box"
        box.mkdir(exist_ok=True)  # a spare's box exists already: it is the spare's HOME
        boxed_candidate = box / candidate_path.name
        shutil.copyfile(candidate_path, boxed_candidate)
        request = ChildRequest(
            problem_path=str(info.path),
            candidate_path=str(boxed_candidate),
            backend=options.backend,
            device=device,
            seeds=seeds,
            size_sets=[size_set.sizes for size_set in plan],
            generated_size_sets=[i for i, size_set in enumerate(plan) if size_set.generated],
            fallback_size_sets={i: list(size_set.fallbacks) for i, size_set in enumerate(plan) if size_set.fallbacks},
            size_set_notes={i: size_set.note for i, size_set in enumerate(plan) if size_set.note},
            probe_sizes=_probe_sizes(info, plan[0].sizes, size_device),
            distributions=options.distributions,
            argument_variations=argument_plan(info, plan[0].sizes),
            targets=targets,
            also_compile_for=also_compile_for,
            compile_sizes=dict(info.sizes) if targets or also_compile_for else None,
            train_check=options.train_check,
            bench=options.bench,
            bench_sizes=dict(info.sizes),
            workdir=str(box),
            policies=policies,
            reference_self_test=options.reference_self_test,
            baseline_cache_dir=options.baseline_cache_dir,
            turn_dir=str(workdir) if options.gpu_turns else None,
            rank_against_ms=options.rank_against_ms,
        )
        request_path, report_path = workdir / "request.json", workdir / "report.json"
        request_path.write_text(request.model_dump_json())
        if progress is not None:
            progress(
                f"verifying {candidate_path.name} on {info.name} ({device}, {counted(len(seeds), 'seed')} x "
                f"{counted(len(request.size_sets), 'size set')}, {policies.describe()}"
                f"{', targets ' + ', '.join(targets) if targets else ''})"
            )
        launched = timeline.lap("request", mark)  # the candidate copied into the box, the request written
        outcome = run_python_module(
            "kgen.evals.verifier.child",
            [str(request_path), str(report_path)],
            spec.limits,
            extra_env=spec.extra_env,
            workdir=box,
            spare=spare,
            turn_dir=workdir if options.gpu_turns else None,
        )
        returned = time.time()
        report = _read_report(report_path)
        written = _written_at(report_path) if report.finished else None
        heartbeat_age = _age_s(workdir / HEARTBEAT_FILE)
    finally:
        if not options.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        if spare is not None and spare.alive():
            spare.discard(remove_dir=False)  # taken but never handed over (an error before the run)
    if options.prestart and not early:
        worker_pool.prestart(spec, count=options.spares)  # started after the run: its start-up never overlaps this one
    result = EvalResult(
        problem=info.name,
        problem_path=str(info.path),
        candidate=str(candidate_path),
        backend=options.backend,
        device=device,
        targets=targets,
        verdict=Verdict.PASSED,
        kgen_version=__version__,
        policies=policies,
        prestarted=outcome.prestarted,
        **report.evidence(),  # the verdict is decided below, from the report and the child's exit
    )
    _apply_outcome(result, report, outcome, options.timeout_s, heartbeat_age)
    timeline.add_child(report.timeline, launched, returned, "spare_handover" if outcome.prestarted else "cold_start",
                       written)
    timeline.lap("read_report", returned)  # the report read, the box removed, the verdict decided
    if baselines is not None:
        with timeline.span("baselines_wait"):  # the candidate's figures wait for the shared baseline job
            result.bench = apply_baselines(result.bench, baselines)
    result.seconds = time.monotonic() - started
    result.timeline = timeline
    timeline.add_other(result.seconds)
    return result


def _child_spec(options: EvalOptions, device: Device) -> worker_pool.WorkerSpec:
    """The verifier child's kind: how it is started cold, and what a spare must match."""

    cache_env = backend_info(options.backend).cache_env
    cache = compiler_cache_dir(backend_info(options.backend).name)
    cache.mkdir(parents=True, exist_ok=True)
    return worker_pool.WorkerSpec(
        device=device, backend=options.backend, extra_env={cache_env: str(cache)} if cache_env else {},
        limits=SandboxLimits(timeout_s=options.timeout_s),
    )


#: Size plans already made in this process, by (problem file, its content, device, the
#: candidate's size thresholds): every candidate of a batch would otherwise make the same plan,
#: and making one runs the problem's ``get_inputs`` on meta tensors (measured on an H100 at
#: 3 s a candidate in an agent run, eight parent threads contending for the interpreter).
_PLANS: dict[tuple[str, str, Device, str], tuple[SizeSet, ...]] = {}
_PLANS_LOCK = threading.Lock()


def size_plan(info: ProblemInfo, source: str, device: Device) -> list[SizeSet]:
    """The verification size plan, and sizes just past the thresholds the candidate's code
    branches on (``if n_cols > 8192``) where the plan does not reach: the code path beyond them
    is run at least once. Made once per problem, device and set of thresholds; ``source`` is
    the candidate's code (what its thresholds are read from)."""
    thresholds = find_size_thresholds(source)
    key = (str(info.path), file_digest(info.path), device, repr(thresholds))
    with _PLANS_LOCK:  # the first caller makes it; the others of a batch wait and reuse it
        if key not in _PLANS:
            plan = verification_size_plan(info, device)
            _PLANS[key] = (*plan, *threshold_size_sets(info, plan, thresholds, device))
        return list(_PLANS[key])


def _probe_sizes(info: ProblemInfo, first: dict[str, int], device: Device) -> dict[str, int] | None:
    """On the CPU the small sizes are too short for a narrow accumulator to show:
    the problem's probe sizes lengthen the reduction. A GPU runs the real sizes."""
    if device.is_gpu or not info.probe_sizes:
        return None
    free = {k: v for k, v in first.items() if k not in info.derived_sizes}
    return consistent_sizes(info.path, {**free, **info.probe_sizes})


def _read_report(path: Path) -> ChildReport:
    """What the child wrote; a missing report means it died before writing one."""
    if not path.exists():
        return ChildReport()
    try:
        return ChildReport.model_validate_json(path.read_text())
    except ValueError as exc:
        return ChildReport(reason=f"the verifier's report could not be read ({str(exc).splitlines()[0]})")


#: A candidate has no reason to print; more than this on stdout/stderr is a rejection.
OUTPUT_LIMIT_BYTES = 1 << 20


def _written_at(path: Path) -> float | None:
    """When ``path`` was last written (epoch seconds); None: it is not there."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _age_s(path: Path) -> float | None:
    """Seconds since ``path`` was last written (None: never written)."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return None


def _apply_outcome(
    result: EvalResult, report: ChildReport, outcome: SandboxOutcome, timeout_s: float,
    heartbeat_age_s: float | None = None,
) -> None:
    """``heartbeat_age_s``: how long before the end the backend last saw kernel work advance
    (a CPU run's heartbeat), which tells a slow kernel from a hung one at a timeout."""
    flooded = max(outcome.stdout_bytes, outcome.stderr_bytes) > OUTPUT_LIMIT_BYTES
    if flooded or outcome.signal_name == "SIGXFSZ":
        result.verdict = Verdict.REJECTED
        result.rejection = RejectionClass.SANDBOX_VIOLATION
        result.reason = (
            f"printed {max(outcome.stdout_bytes, outcome.stderr_bytes) / 1e6:.1f} MB "
            f"(limit {OUTPUT_LIMIT_BYTES / 1e6:.1f} MB): candidates must not flood the output"
        )
        result.stages.append(StageResult(name="sandbox", status=StageStatus.FAILED, message=result.reason))
        return
    if outcome.stopped_by is not None:
        result.verdict, result.inconclusive = Verdict.INCONCLUSIVE, InconclusiveCause.STOPPED
        result.reason = f"{outcome.stopped_by} and ended the verifier mid-run: no verdict on the candidate"
        return
    if report.finished and report.inconclusive is not None:
        result.verdict = Verdict.INCONCLUSIVE
        result.inconclusive, result.reason = report.inconclusive, report.reason
        return
    if report.finished and report.rejection is None and outcome.returncode == 0:
        result.reason = f"verified against the fp64 reference ({result.policies.describe()})"
        return
    result.verdict = Verdict.REJECTED
    if report.finished and report.rejection is not None:
        result.rejection, result.reason = report.rejection, report.reason
        return
    done = {s.name for s in report.stages}
    # A killed child was in the first stage it had not finished.
    stage = next((name for name in STAGES if name not in done), STAGES[-1])
    passed = [t for t in report.trials if t.passed]
    advancing = heartbeat_age_s is not None and heartbeat_age_s <= PROGRESS_WINDOW_S
    if outcome.timed_out and not result.device.is_gpu and (advancing or (passed and not _looks_hung(report, timeout_s))):
        # Slow in the interpreter, not hung: its kernels were still advancing, or it had been
        # returning right answers at a steady pace.
        result.verdict, result.inconclusive = Verdict.INCONCLUSIVE, InconclusiveCause.CPU_TIME_LIMIT
        result.reason = (
            f"the Triton interpreter reached the {timeout_s:g} s time limit during {stage} after {len(passed)} "
            f"trial(s) had passed, {'with kernel programs still starting' if advancing else 'at a steady pace'}: "
            "too slow to finish on the CPU, not hung; a GPU (or a longer --timeout) judges it"
        )
    elif outcome.timed_out:
        result.rejection = RejectionClass.TIMEOUT
        result.reason = f"killed after the {timeout_s:g} s time limit during {stage}"
    elif outcome.signal_name == "SIGKILL":
        # Not kgen's time limit and not kgen's own stop: killed from outside. A candidate has
        # no use for killing itself (it would only lose its verdict), and what does is the
        # host's out-of-memory killer or a process beside kgen: a harness fault, no verdict.
        result.verdict, result.inconclusive = Verdict.INCONCLUSIVE, InconclusiveCause.WORKER_KILLED
        result.reason = (
            f"the verifier process was killed (SIGKILL) from outside kgen during {stage}: most often the "
            "host's out-of-memory killer (too little host memory for the verifications running at once) or "
            "another process; no verdict on the candidate"
        )
    elif "OutOfMemoryError" in outcome.stderr_tail:
        # Whose allocation failed is not known here; a verdict on the kernel would be a guess.
        result.verdict, result.inconclusive = Verdict.INCONCLUSIVE, InconclusiveCause.OUT_OF_MEMORY
        result.reason = (
            f"the device ran out of memory during {stage} ({_last_line(outcome.stderr_tail)[:160]}), and the "
            "verifier died before it could report whose allocation failed (kgen's or the candidate's): no verdict; "
            "kgen's checks keep several copies of the inputs, so `--small` (or a smaller problem) can judge it"
        )
    else:
        how = f"by {outcome.signal_name}" if outcome.signal_name else f"with exit code {outcome.returncode}"
        last = report.reason or _last_line(outcome.stderr_tail)
        result.rejection = RejectionClass.CRASH
        result.reason = f"the candidate's process died {how} during {stage}" + (f": {last}" if last else "")
        trials = report.trials
        if trials and trials[0].passed and not trials[-1].passed and trials[-1].sizes != trials[0].sizes:
            # Right at the first sizes, killed at others: an out-of-bounds launch sized for one shape.
            result.rejection = RejectionClass.SHAPE_SPECIALISATION
            result.reason = (f"passed at the first sizes, then {result.reason.removeprefix('the ')} at sizes "
                             f"{sizes_text(trials[-1].sizes)}")
    result.stages.append(
        StageResult(
            name=stage,
            status=StageStatus.FAILED,
            message=result.reason,
            seconds=outcome.seconds,
            evidence={"stderr_tail": outcome.stderr_tail[-2000:], "stdout_bytes": outcome.stdout_bytes},
        )
    )


#: On the CPU, kernel programs that started this recently before a timeout mean a slow kernel.
PROGRESS_WINDOW_S = 15.0
#: On the CPU, a timed-out call that had run this many times longer than the slowest trial
#: before it is taken for hung (rejected), not merely slow in the interpreter (inconclusive).
HUNG_FACTOR = 50


def _looks_hung(report: ChildReport, timeout_s: float) -> bool:
    finished = [t.seconds for t in report.trials if t.passed]
    unfinished = timeout_s - sum(t.seconds for t in report.trials)
    return unfinished > HUNG_FACTOR * max(finished, default=0.0)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
