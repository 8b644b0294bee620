"""What the verifier's stages share: one declared context, and what a stage is.

The child (``child.py``) opens one :class:`VerifierContext` per candidate and hands it to
each :class:`Stage` in turn. A stage reads the request and what earlier stages left (the
loaded candidate, the launches its trials made, the distributions that passed), writes
its evidence into the report and raises ``Rejected`` or ``Inconclusive`` to stop. The
context's fields are declared: a stage cannot leave state in a name nobody declared.

Nothing here imports torch or the backend's toolchain at import time: :func:`open_context`
lets the backend prepare the process first (Triton's CPU interpreter is chosen by an
environment variable read when triton is imported).
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kgen.backends.registry import backend_info, get_backend
from kgen.backends.targets import resolve_target
from kgen.evals.checks.memory_report import DeviceMemory
from kgen.evals.problem.policies import Precision
from kgen.evals.sandbox.guard import CandidateGuard
from kgen.evals.timeline import Timeline
from kgen.evals.verdict import StageResult, StageStatus
from kgen.evals.verifier.messages import HEARTBEAT_FILE, ChildReport, ChildRequest

if TYPE_CHECKING:
    from types import ModuleType

    import torch

    from kgen.backends.base import Backend, KernelLaunch
    from kgen.evals.checks.error_shape import ProductOperands
    from kgen.evals.checks.harness_integrity import HarnessSnapshot
    from kgen.evals.checks.memory_report import DeviceMemory
    from kgen.evals.checks.module_state import WeightTransfer
    from kgen.evals.problem.format import LoadedProblem
    from kgen.evals.sandbox.guard import CandidateGuard


@dataclass(slots=True)
class VerifierContext:
    """One candidate's verification in this process: what every stage may read and write."""

    request: ChildRequest
    #: where the report is rewritten after every stage and trial (:func:`save_report`)
    report_path: Path
    backend: Backend
    #: the torch module, imported once the backend had prepared the process
    torch: ModuleType
    device: torch.device
    memory: DeviceMemory
    #: the sandbox's audit hook, installed; entered around every piece of the candidate's code
    guard: CandidateGuard
    candidate_path: Path
    precision: Precision
    report: ChildReport = field(default_factory=ChildReport)
    #: the candidate's module, once the load stage imported it
    module: ModuleType | None = None
    #: kgen's own functions and the timers as they were before the candidate was imported
    #: (taken by the load stage; compared after the import and after every watched call)
    integrity: HarnessSnapshot | None = None
    #: the sizes of the inputs made last: where their reference runs follows from them
    sizes_now: dict[str, int] = field(default_factory=dict)
    #: where the ghost check and the call sequence run: the first size set, or smaller sizes
    #: when the device cannot hold its reference (``correctness_stage.trial_plan``)
    behaviour_sizes: dict[str, int] = field(default_factory=dict)
    #: the sizes the plan runs the baseline distributions at (``failure_order.in_baseline``)
    baseline_sizes: list[dict[str, int]] = field(default_factory=list)
    #: size sets kgen made up: a reference that cannot run them skips the trial, never fails it
    generated: list[dict[str, int]] = field(default_factory=list)
    #: problem modules loaded at each set of sizes (``trial_parts.problem_at``)
    problems: dict[str, LoadedProblem] = field(default_factory=dict)
    #: the launches of the first trial that launched any: what the compile stage builds
    first_launches: list[KernelLaunch] = field(default_factory=list)
    #: device memory held before the candidate's last watched call (whose out-of-memory it was)
    held_before_call: int | None = None
    passed_distributions: set[str] = field(default_factory=set)
    #: distribution -> worst error over tolerance of a failed trial (a narrow accumulator's pattern)
    failed_distributions: dict[str, float] = field(default_factory=dict)
    #: the last passed trial's outputs: the next trial's poison shapes and stale-output evidence
    previous_outputs: list[Any] = field(default_factory=list)
    #: outputs the reference itself returns as views of an input (the candidate may too)
    reference_aliases: set[int] = field(default_factory=set)
    #: the reference's outputs that share storage with an earlier one of its outputs
    reference_shared: set[int] = field(default_factory=set)
    #: how the reference's weights were loaded into the candidate last (``module_state``)
    transfer: WeightTransfer | None = None
    #: the worst error over tolerance among the passed trials
    worst: float = 0.0
    #: which inputs and weights a matrix product reads, judged at the first trial's (the
    #: problem's own) sizes: the rounded references at other sizes round the same ones
    product_operands: ProductOperands | None = None

    @property
    def timeline(self) -> Timeline:
        """Where the stages mark their spans (``with ctx.timeline.span("trial", gpu=ctx.gpu)``):
        the report's own, so every saved report carries the spans ended so far."""
        return self.report.timeline

    @property
    def gpu(self) -> bool:
        """The candidate runs on a GPU: its trials and timings keep the GPU busy (on the CPU
        nothing an evaluation does is GPU time)."""
        return self.device.type == "cuda"


class Stage(Protocol):
    """One step of the verification. ``run`` records the stage's result when it passes (or is
    skipped) and raises ``Rejected`` / ``Inconclusive`` otherwise; the child records those."""

    name: str

    def run(self, ctx: VerifierContext) -> None: ...


def open_context(request: ChildRequest, report_path: Path) -> VerifierContext:
    """Prepare this process for the candidate's backend, then everything the stages share:
    torch and the toolchains imported by kgen (their first-import work is not the
    candidate's), the memory plan, the sandbox guard installed, the precision policy applied
    to library calls, and the libraries' own threads started."""

    backend = get_backend(request.backend)
    backend.prepare_process(request.device)
    backend.report_progress(report_path.parent / HEARTBEAT_FILE)
    import torch  # after prepare_process: torch may import triton

    for toolchain in backend_info(request.backend).requires:
        importlib.import_module(toolchain)

    device = torch.device(request.device.value)
    memory = DeviceMemory(torch, device, request.problem_path)
    candidate_path = Path(request.candidate_path)
    cache_env = backend_info(request.backend).cache_env
    cache = os.environ.get(cache_env or "", "") or str(Path(request.workdir) / f".{request.backend}")
    # Only for code that asks about the GPU: the emulation swaps a few torch names, which a
    # candidate could notice; one that never mentions CUDA has nothing to gain from it.
    uses_gpu_idioms = "cuda" in candidate_path.read_text(errors="replace")
    emulation = backend.device_emulation(
        request.device, resolve_target(request.targets[0]) if request.targets else None
    ) if uses_gpu_idioms else None
    guard = CandidateGuard(candidate_path, [Path(request.workdir), Path(cache), Path("/dev")], emulation)
    guard.install()
    precision = request.policies.precision
    # Library calls follow the precision policy too: cuDNN convolutions default to TF32 on
    # Ampere and later, which an fp32 problem judged as IEEE fp32 must not get by accident.
    tf32 = precision is Precision.TF32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    ctx = VerifierContext(
        request=request, report_path=report_path, backend=backend, torch=torch, device=device, memory=memory,
        guard=guard, candidate_path=candidate_path, precision=precision,
        sizes_now=dict(request.size_sets[0]), behaviour_sizes=dict(request.size_sets[0]),
    )
    if device.type == "cuda":  # where the verdict was reached, timed or not
        ctx.report.device_name = torch.cuda.get_device_name(device)
    _warm_up(ctx)
    return ctx


def _warm_up(ctx: VerifierContext) -> None:
    """Start the libraries' own threads before any thread is counted against the candidate."""
    torch = ctx.torch
    (torch.randn(512, 512) @ torch.randn(512, 512)).sum().item()
    if ctx.device.type == "cuda":
        torch.ones(1, device=ctx.device).sum().item()
    ctx.backend.warm_up(ctx.request.device)


def save_report(ctx: VerifierContext) -> None:
    """The report as it stands, replaced whole on disk: a parent reading it after the
    candidate killed this process never sees half a file."""
    ctx.report.memory = ctx.memory.finish()
    tmp = ctx.report_path.with_suffix(".tmp")
    tmp.write_text(ctx.report.model_dump_json())
    os.replace(tmp, ctx.report_path)


def record_stage(ctx: VerifierContext, name: str, status: StageStatus, message: str, started: float,
                 **evidence: Any) -> None:
    """A stage's result, timed from ``started`` (``time.monotonic()``), into the report, saved."""
    ctx.memory.stage_ended(name)
    ctx.report.stages.append(
        StageResult(name=name, status=status, message=message, seconds=time.monotonic() - started, evidence=evidence)
    )
    save_report(ctx)
