"""The parent's side of the baseline job: one job per problem, a future every candidate shares.

A batch of candidates of one problem needs the same eager / ``torch.compile`` / Liger
figures. :class:`BaselineService` starts the trusted baseline job (``baselines/job.py``) the
first time a key is asked for, in a worker thread, and hands every later caller in this
process the same ``concurrent.futures.Future``: the job runs beside the verifications (it
takes its own turn alone on the GPU to time) instead of inside a candidate's timing, and
its store (``baselines/kept_figures.py``) is re-checked once per process, never per candidate.

A job that fails (it crashed, timed out, wrote no report, could not start) gives figures
whose every baseline carries the reason: never an exception, so it never costs a candidate
its verdict. Nothing here imports torch: the parent stays light until a bench is merged.

Called by ``evals/harness.py``: :func:`start_baselines` when a bench is asked for on a GPU,
before the candidate's verifier starts (every candidate of the problem in the process shares
the one future); after the evaluation, ``result.bench = apply_baselines(result.bench, future)``.
"""

from __future__ import annotations

import secrets
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from pydantic import BaseModel, Field

from kgen.backends.device import Device
from kgen.backends.registry import DEFAULT_BACKEND, backend_info
from kgen.core.config import compiler_cache_dir
from kgen.evals.baselines.kept_figures import default_store_dir
from kgen.evals.baselines.messages import BaselineFigures, BaselineRequest, not_measured
from kgen.evals.problem.policies import Policies
from kgen.evals.sandbox.box import SandboxLimits, SandboxOutcome, run_python_module
from kgen.evals.sandbox.scratch import new_workdir
from kgen.evals.timing.baseline_cache import cache_key, file_digest
from kgen.evals.timing.bench_result import BenchResult

JOB_MODULE = "kgen.evals.baselines.job"
#: torch.compile's compiled code kept across jobs (``$KGEN_HOME/cache/inductor``): a drift
#: re-measure or a new run recompiles from this cache, not from nothing.
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


class BaselineJobSpec(BaseModel):
    """What one baseline job is for; equal specs share one job per process (:meth:`key`)."""

    problem_path: str
    sizes: dict[str, int]
    device: Device
    backend: str = DEFAULT_BACKEND
    policies: Policies = Field(default_factory=Policies)
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    #: the persistent store; None: measured, not kept
    store_dir: str | None = None

    def key(self) -> str:
        """The job's identity in this process: the problem file's content, its sizes, the
        device, the backend, the policies and the store (the device's name and the libraries'
        versions are the job's to add: the store's key has them)."""
        return cache_key(problem=file_digest(self.problem_path), sizes=self.sizes, device=self.device.value,
                         backend=self.backend, policies=self.policies.describe(), store=self.store_dir)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def figures_from_outcome(outcome: SandboxOutcome, report_path: Path, timeout_s: float) -> BaselineFigures:
    """The job's report, or figures saying why there is none (every baseline noted)."""
    try:
        figures = BaselineFigures.model_validate_json(report_path.read_text())
    except FileNotFoundError:
        figures = None
    except ValueError as exc:
        return not_measured(f"the baseline job's report could not be read ({str(exc).splitlines()[0]})")
    if figures is not None and figures.finished:
        return figures
    if outcome.timed_out:
        why = f"the baseline job reached its {timeout_s:g} s time limit"
    elif outcome.stopped_by is not None:
        why = f"the baseline job was ended by kgen ({outcome.stopped_by})"
    else:
        how = f"by {outcome.signal_name}" if outcome.signal_name else f"with exit code {outcome.returncode}"
        last = _last_line(outcome.stderr_tail)
        why = f"the baseline job died {how}" + (f" ({last})" if last else "")
    return not_measured(why)


def job_environment(backend: str) -> dict[str, str]:
    """The job's compiler caches, kept across jobs: the backend's (Triton's, which Liger's
    kernels use too) and torch.compile's."""
    info = backend_info(backend)
    # One compile thread: for a problem's one small graph, inductor's pool of compile workers
    # costs more to start than it saves.
    env = {INDUCTOR_CACHE_ENV: str(compiler_cache_dir("inductor")), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    if info.cache_env:
        env[info.cache_env] = str(compiler_cache_dir(info.name))
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    return env


def run_job(spec: BaselineJobSpec) -> BaselineFigures:
    """Start the baseline job in a box of its own and wait for its figures. Its folder (outside
    the box) holds the request, the report and its turn files (``gpu_turns.py``)."""
    workdir = new_workdir()
    try:
        box = workdir / "box"
        box.mkdir()
        request = BaselineRequest(
            problem_path=spec.problem_path, sizes=spec.sizes, device=spec.device, backend=spec.backend,
            policies=spec.policies, seed=secrets.randbelow(2**31 - 1), turn_dir=str(workdir),
            store_dir=spec.store_dir,
        )
        request_path, report_path = workdir / "request.json", workdir / "report.json"
        request_path.write_text(request.model_dump_json())
        outcome = run_python_module(JOB_MODULE, [str(request_path), str(report_path)], spec.limits,
                                    extra_env=job_environment(spec.backend), workdir=box, turn_dir=workdir)
        return figures_from_outcome(outcome, report_path, spec.limits.timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class BaselineService:
    """At most one job per key per process; every caller for a key gets the same future."""

    def __init__(self, runner: Callable[[BaselineJobSpec], BaselineFigures] = run_job, workers: int = 2) -> None:
        self._runner = runner
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kgen-baselines")
        self._jobs: dict[str, Future[BaselineFigures]] = {}
        self._lock = threading.Lock()

    def figures(self, spec: BaselineJobSpec) -> Future[BaselineFigures]:
        """The figures for ``spec``: the job already started for its key, or a new one."""
        key = spec.key()
        with self._lock:
            if key not in self._jobs:
                self._jobs[key] = self._executor.submit(self._run, spec)
            return self._jobs[key]

    def jobs_started(self) -> int:
        with self._lock:
            return len(self._jobs)

    def _run(self, spec: BaselineJobSpec) -> BaselineFigures:
        try:
            return self._runner(spec)
        except Exception as exc:  # noqa: BLE001 - a job that cannot run costs the baselines, never a verdict
            first = str(exc).splitlines()[0] if str(exc) else ""
            return not_measured(f"the baseline job could not run ({type(exc).__name__}: {first})")

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


_service: BaselineService | None = None
_service_lock = threading.Lock()


def default_service() -> BaselineService:
    """This process's service (made on first use)."""
    global _service
    with _service_lock:
        if _service is None:
            _service = BaselineService()
        return _service


def start_baselines(problem_path: str | Path, sizes: dict[str, int], device: Device, policies: Policies,
                    backend: str = DEFAULT_BACKEND, limits: SandboxLimits | None = None,
                    store_dir: str | Path | None = None,
                    service: BaselineService | None = None) -> Future[BaselineFigures]:
    """The baselines of a problem at its bench sizes on ``device``, as a future shared by every
    candidate of it in this process. ``store_dir`` defaults to ``$KGEN_HOME/cache/baselines``."""
    spec = BaselineJobSpec(
        problem_path=str(problem_path), sizes=dict(sizes), device=device, backend=backend, policies=policies,
        limits=limits or SandboxLimits(), store_dir=str(store_dir or default_store_dir()),
    )
    return (service or default_service()).figures(spec)


def apply_baselines(bench: BenchResult | None, future: Future[BaselineFigures],
                    timeout_s: float | None = None) -> BenchResult | None:
    """A candidate's bench with the job's figures merged in (``baselines/merge.py``); a bench
    that was not measured (None: a CPU run, a rejection) stays None. Figures not ready within
    ``timeout_s`` (None: wait for the job, which its own time limit bounds) are noted, not raised."""
    # Imported here: the merge re-scores the SOL floor with sol.py, which imports torch; a bench
    # exists only where the parent resolved a GPU, and torch with it.
    from kgen.evals.baselines.merge import merge_baselines

    if bench is None:
        return None
    try:
        figures = future.result(timeout=timeout_s)
    except FutureTimeout:
        figures = not_measured(f"the baseline job had not finished after {timeout_s:g} s")
    return merge_baselines(bench, figures)
