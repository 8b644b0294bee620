"""The trusted baseline job: eager PyTorch, torch.compile, Liger and quack timed in a process of their own.

Run as ``python -m kgen.evals.baselines.job REQUEST.json REPORT.json`` (started by
``baselines/service.py`` through ``sandbox/box.run_python_module``, boxed like the verifier
child). It loads no candidate code: the figures a candidate is compared with are never
written by a candidate's process.

Its order keeps the GPU free for the verifications it runs beside:

1. the problem at its bench sizes, its inputs and what eager runs on the device: the
   problem's ``Baseline`` where it declares one (its operation in the dtypes a candidate may
   use: a bf16 GEMM, not the fp32 reference's), else its reference ``Model``;
2. whatever the store's policy asks to time (``kept_figures.figures_from_store``) is built
   and warmed first: ``torch.compile``'s compile and first calls, the libraries' first calls
   (Liger's Triton compile, quack's CuTe DSL compile). That is CPU work, done while verifiers use the GPU;
3. what can be freed is freed, its own GPU work synchronized, and only then does it ask for
   its turn alone on the GPU (``sandbox/gpu_turns.await_turn``), time (``measure.time_on_gpu``,
   no deferred-work series: a baseline is honest by construction), and give the turn back.

Without a GPU it writes a report saying timings need one, never a figure. Nothing here
imports torch or a toolchain before the backend has prepared the process (Liger's kernels
are Triton's): those imports stand inside the functions that run after it.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kgen.backends.device import Device
from kgen.backends.registry import backend_info, get_backend
from kgen.evals.baselines.kept_figures import figures_from_store
from kgen.evals.baselines.messages import BaselineFigures, BaselineRequest, not_measured
from kgen.evals.problem.format import LoadedProblem, load_problem
from kgen.evals.sandbox import gpu_turns
from kgen.evals.sandbox.lifecycle import start_parent_watchdog
from kgen.evals.timeline import PhaseClock
from kgen.evals.timing.baseline_cache import cache_key, file_digest, write_atomically
from kgen.evals.timing.bench_result import Measurement
from kgen.evals.timing.gpu_sharing import torch_device_neighbours

#: Input sets the baselines are timed on, drawn in a random order per call like the
#: candidate's (``verifier/timed_candidate.TIMING_INPUT_SETS``), where the device holds them.
INPUT_SETS = 3
#: Raised when the way baselines are measured changes: entries measured the old way are not reused.
MEASUREMENT_VERSION = 1
#: The wording every "no GPU here" report uses (the verifier's timing stage says the same).
NO_GPU = "timings need a GPU"


def more_sets_fit(free_bytes: int, set_bytes: int) -> bool:
    """Whether one more input set fits with room for the baselines' outputs beside it (an
    output as large as the inputs, twice, and a quarter to spare)."""
    return free_bytes > 3.25 * set_bytes


def _tensor_bytes(values: Sequence[Any], torch: Any) -> int:
    return sum(v.untyped_storage().nbytes() for v in values if isinstance(v, torch.Tensor))


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


class GpuBaselineTimings:
    """The baselines of one problem on this process's GPU: built and warmed outside the turn,
    timed inside it (``kept_figures.BaselineTimings``)."""

    def __init__(self, request: BaselineRequest, problem: LoadedProblem, torch: Any, phases: PhaseClock) -> None:
        self.request, self.problem, self.torch, self.phases = request, problem, torch, phases
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.input_sets = self._inputs()
        torch.manual_seed(request.seed)
        # what eager and torch.compile run: the problem's Baseline where it declares one (the
        # same operation in the dtypes a candidate may use), else its reference Model
        self.reference = problem.baseline_class(*problem.get_init_inputs()).to(self.device)
        self.built: dict[str, Callable[..., Any]] = {}
        self.waited_s = 0.0
        phases.lap("setup")

    def _draw(self, seed: int) -> list[Any]:
        """One input set, drawn on the device from ``seed`` as the verifier draws its timing
        inputs (``verifier/trial_parts.inputs_for``); on the host where the device cannot."""
        from kgen.evals.problem.layout import copy_inputs

        torch = self.torch
        torch.manual_seed(seed)
        try:
            with torch.device(self.device):
                return copy_inputs(self.problem.get_inputs(), self.device)
        except (RuntimeError, TypeError, ValueError):
            torch.manual_seed(seed)
            return copy_inputs(self.problem.get_inputs(), self.device)

    def _inputs(self) -> list[list[Any]]:
        sets = [self._draw(self.request.seed + 1000)]
        size = _tensor_bytes(sets[0], self.torch)
        while len(sets) < INPUT_SETS and more_sets_fit(int(self.torch.cuda.mem_get_info(self.device)[0]), size):
            sets.append(self._draw(self.request.seed + 1000 + len(sets)))
        return sets

    def _build(self, name: str) -> Callable[..., Any]:
        from kgen.evals.baselines.library import LIBRARIES, library_baseline

        if name == "eager":
            return self.reference
        if name == "torch.compile":
            return self.torch.compile(self.reference)
        if name in LIBRARIES:
            return library_baseline(name, self.problem)
        raise ValueError(f"no baseline named {name}")

    def _warmed(self, name: str) -> Callable[..., Any]:
        """The baseline built and called once on every input set (torch.compile compiles
        here, once per input set's shapes and strides; Liger compiles its kernel)."""
        if name not in self.built:
            fn = self._build(name)
            with self.torch.no_grad():
                for inputs in self.input_sets:
                    fn(*inputs)
            self.torch.cuda.synchronize(self.device)
            self.built[name] = fn
        return self.built[name]

    def _time_in_turn(self, fns: dict[str, Callable[..., Any]], errors: dict[str, str]) -> dict[str, Measurement]:
        """Everything built is freed of garbage and synchronized, then timed alone on the GPU
        (no turn is asked for when nothing could be built)."""
        from kgen.evals.timing.measure import time_on_gpu

        if not fns:
            return {}
        torch = self.torch
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.synchronize(self.device)
        self.phases.lap("build")
        self.waited_s += gpu_turns.await_turn(self.request.turn_dir)
        self.phases.lap("wait")
        measured: dict[str, Measurement] = {}
        try:
            with torch.no_grad():
                for name, fn in fns.items():
                    try:
                        timed = time_on_gpu(fn, self.input_sets, budget_s=2.0, check_sync=False)
                    except Exception as exc:  # noqa: BLE001 - a baseline that fails is reported, not fatal
                        errors[name] = _error_text(exc)
                        continue
                    measured[name] = Measurement.model_validate(timed.model_dump(exclude={"sync_calibration"}))
        finally:
            gpu_turns.end_turn(self.request.turn_dir)
        self.phases.lap("measure")
        return measured

    def recheck_eager(self) -> Measurement:
        errors: dict[str, str] = {}
        measured = self._time_in_turn({"eager": self._warmed("eager")}, errors)
        return measured.get("eager") or Measurement(error=errors.get("eager", "not measured"))

    def measure(self, names: Sequence[str]) -> tuple[dict[str, Measurement], dict[str, str]]:
        from kgen.evals.baselines.library import BaselineUnavailable

        fns: dict[str, Callable[..., Any]] = {}
        errors: dict[str, str] = {}
        for name in names:
            try:
                fns[name] = self._warmed(name)
            except BaselineUnavailable as exc:
                errors[name] = f"not measured: {exc}"
            except Exception as exc:  # noqa: BLE001 - a baseline that fails to build is reported
                errors[name] = _error_text(exc)
        return self._time_in_turn(fns, errors), errors


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def library_versions(torch: Any) -> dict[str, str]:
    """torch's version and each baseline library's ("not installed" where it is not)."""
    from kgen.evals.baselines.library import LIBRARIES

    return {"torch": torch.__version__,
            **{dist.replace("-", "_"): _version(dist) for _, dist, _ in LIBRARIES.values()}}


def comparable_parts(request: BaselineRequest, problem: LoadedProblem, device_name: str, torch: Any) -> dict[str, Any]:
    """What makes two baseline timings comparable (the store key's parts): the problem file,
    its sizes and policies, the device, and the versions of torch, the baseline libraries and
    every toolchain the candidates' backend requires."""
    toolchains = {
        name: str(getattr(importlib.import_module(name), "__version__", "unknown"))
        for name in backend_info(request.backend).requires
    }
    return {
        "problem": file_digest(request.problem_path), "sizes": problem.sizes,
        "policies": request.policies.describe(), "device": device_name, **library_versions(torch),
        "measurement": MEASUREMENT_VERSION, **toolchains,
    }


def run(request: BaselineRequest) -> BaselineFigures:
    """The baselines the request asks for, under the store's policy; on a CPU, none."""
    if request.device is not Device.CUDA:
        return not_measured(NO_GPU, sizes=request.sizes, finished=True)
    phases = PhaseClock()
    backend = get_backend(request.backend)
    backend.prepare_process(request.device)
    import torch  # after prepare_process: torch may import triton

    if not torch.cuda.is_available():
        return not_measured(f"{NO_GPU} (none is visible to torch here)", sizes=request.sizes, finished=True)
    tf32 = request.policies.precision.value == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32  # the baselines follow the candidate's precision policy
    torch.backends.cuda.matmul.allow_tf32 = tf32
    problem = load_problem(request.problem_path, request.sizes)
    index = torch.cuda.current_device()
    device_name = torch.cuda.get_device_name(index)
    parts = comparable_parts(request, problem, device_name, torch)
    shared = torch_device_neighbours(torch, index).describe()
    timings = GpuBaselineTimings(request, problem, torch, phases)
    # Beside another process the figures are taken (the candidate is timed beside it too) but
    # neither checked against nor kept in the store: they describe that moment's neighbour.
    figures = figures_from_store(None if shared else request.store_dir, cache_key(**parts), parts, timings)
    if shared:
        figures.errors["shared_gpu"] = shared
    return figures.model_copy(update={
        "device_name": device_name, "sizes": dict(problem.sizes), "shared_gpu": shared,
        "versions": library_versions(torch), "phase_seconds": phases.seconds, "finished": True,
    })


def main(argv: list[str] | None = None) -> int:
    start_parent_watchdog()  # a job whose kgen is gone must not run on, holding the GPU
    argv = sys.argv[1:] if argv is None else argv
    request = BaselineRequest.model_validate_json(Path(argv[0]).read_text())
    try:
        figures = run(request)
    except Exception as exc:  # noqa: BLE001 - the parent hears why, as notes on every baseline
        figures = not_measured(f"the baseline job failed ({_error_text(exc)})", sizes=request.sizes, finished=True)
    write_atomically(Path(argv[1]), figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
