"""One lane: the evaluations of one device, whichever executor started it.

A lane owns one GPU (or, without one, the CPU) in one process: the caller's own process for
a single-GPU run, a lane process per GPU for the local executor on a bigger host, a Ray
actor per GPU on a cluster. Inside it nothing is new: up to ``slots`` verifiers run side by
side and each, once verified, takes a turn alone on the GPU to be timed
(``evals/sandbox/gpu_turns.py``: the turn stops the other verifiers of *this* process, which
are exactly this GPU's). So correctness trials share a GPU and timing is alone on its GPU,
and every executor returns the same verdicts and evidence as a plain ``evaluate``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import traceback
from pathlib import Path

from kgen.backends.device import Device, resolve_device
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.harness import EvalOptions, _child_spec, evaluate
from kgen.evals.placement import Placement
from kgen.evals.result import EvalResult
from kgen.evals.sandbox import worker_pool
from kgen.evals.verdict import InconclusiveCause


def default_slots(device: Device, lanes: int = 1) -> int:
    """Verifiers at once on one device: on a GPU, one per two host cores (each compiles
    kernels and runs Python checks; those waiting for a turn, or stopped during another's, use
    none), at most :data:`worker_pool.MAX_PER_KIND` (the spares kept for them); on the CPU one
    (the interpreter is the work, and parallel runs would only share the cores). ``lanes``
    on one host share its cores: four lanes get a quarter each."""
    if not device.is_gpu:
        return 1
    return max(1, min(worker_pool.MAX_PER_KIND, (os.cpu_count() or 2) // (2 * max(1, lanes))))


def side_by_side(options: EvalOptions, jobs: int, device: Device) -> bool:
    """Whether jobs run several at once with turns: two or more candidates timed on a GPU."""
    return options.bench and jobs >= 2 and device.is_gpu


class LaneRunner:
    """Runs jobs on this process's device. ``shares_files``: the caller's paths are readable
    here (a local lane); otherwise a job's sources are written to this lane's scratch folder,
    the problem once per content (so the size plan and the baselines, keyed by the problem's
    file, are made once per problem, not once per candidate)."""

    def __init__(self, placement: Placement, slots: int, *, shares_files: bool) -> None:
        self.placement = placement
        self.slots = slots
        self.shares_files = shares_files
        self._scratch: Path | None = None
        self._lock = threading.Lock()
        self._warm: set[tuple] = set()

    def run(self, job: EvalJob, *, together: bool) -> EvalResult:
        """``together``: other jobs run beside this one on the device (turns for the timing)."""
        options = job.options.model_copy(update={"device": resolve_device(job.options.device)})
        if together:
            options = options.model_copy(update={"gpu_turns": True, "prestart": True, "spares": self.slots})
            self._prestart(options)
        if self.shares_files:
            result = evaluate(job.problem, job.candidate, options)
        else:
            if options.baseline_cache_dir is not None:  # the caller's run folder is not on this node
                options = options.model_copy(update={"baseline_cache_dir": str(self.scratch() / "baselines")})
            folder = Path(tempfile.mkdtemp(prefix="kgen-job-", dir=self.scratch()))
            try:
                problem = self._problem_file(job)
                candidate = folder / job.candidate_file_name()
                candidate.write_text(job.candidate_source, encoding="utf-8")
                result = evaluate(problem, candidate, options)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            # the result names this lane's copies; the caller renames them (``EvalJob.as_asked``)
        result.placement = self.placement.model_copy(update={"gpu_name": result.device_name})
        return result

    def scratch(self) -> Path:
        with self._lock:
            if self._scratch is None:
                self._scratch = Path(tempfile.mkdtemp(prefix=f"kgen-lane-{self.placement.lane}-"))
            return self._scratch

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _problem_file(self, job: EvalJob) -> str:
        if job.problem_source is None:
            return job.problem  # a catalog name resolves on every host
        digest = hashlib.sha256(job.problem_source.encode()).hexdigest()[:16]
        path = self.scratch() / "problems" / digest / job.problem_file_name()
        with self._lock:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(job.problem_source, encoding="utf-8")
        return str(path)

    def _prestart(self, options: EvalOptions) -> None:
        """The first side-by-side job of a kind starts the lane's spares, one per slot."""
        spec = _child_spec(options, resolve_device(options.device))
        with self._lock:
            if spec.key() in self._warm:
                return
            self._warm.add(spec.key())
        worker_pool.prestart(spec, count=self.slots)


def reply_to(runner: LaneRunner, message: dict) -> dict:
    """A lane's answer to one job message (``{"job": ..., "together": ...}``), as plain data
    that crosses a pipe or Ray: the result, a usage error (the caller's mistake, raised in the
    caller), or kgen's own failure in the lane (the caller says inconclusive)."""
    from kgen.errors import KgenUsageError

    try:
        result = runner.run(EvalJob.model_validate(message["job"]), together=bool(message.get("together")))
        return {"result": result.model_dump(mode="json")}
    except KgenUsageError as exc:
        return {"usage_error": str(exc)}
    except Exception:
        return {"error": traceback.format_exc(limit=8)}


def result_of(reply: dict, job: EvalJob, placement: Placement) -> EvalResult:
    """The caller's side of :func:`reply_to`."""
    from kgen.errors import KgenUsageError

    if "usage_error" in reply:
        raise KgenUsageError(reply["usage_error"])
    if "error" in reply:
        last = [line for line in reply["error"].strip().splitlines() if line.strip()][-1:] or ["unknown error"]
        return job.no_verdict(placement, InconclusiveCause.HARNESS_ERROR,
                              f"kgen failed in lane {placement.label}: {last[0][:300]}")
    return EvalResult.model_validate(reply["result"])
