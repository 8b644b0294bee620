"""What one evaluation held in device memory, measured, beside what the plan predicted.

The figure users need is the peak over the problem's own footprint (inputs + outputs):
kgen's target is at most 3x. The peak is ``torch.cuda.max_memory_allocated`` over the
whole child, so it includes the candidate's own allocations; a CPU run has no device
peak to report and says so.

It also decides whose an out-of-memory error is: kgen's (``harness_oom``) when kgen's own
steps failed or kgen already held more than its plan allowed when the candidate ran; the
candidate's (``candidate_oom``) when the candidate's call failed while kgen stayed within
its plan. Either way the verdict is inconclusive: an OOM says nothing about correctness.
"""

from __future__ import annotations

from typing import Any

from kgen.evals.memory_plan import (
    NOT_MEASURED,
    TARGET_PEAK_RATIO,
    MemoryDecision,
    MemoryPlan,
    MemoryReport,
    ReferencePlacement,
    choose_placement,
    plan_memory,
)
from kgen.evals.result import Inconclusive, InconclusiveCause


def _sizes_key(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "default sizes"


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's device OOM, or the host allocator's failure (a RuntimeError by message)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text
                                              or "out of memory" in text.lower())


class DeviceMemory:
    """The child's memory book-keeping: plans per size set, placements, the measured peak."""

    def __init__(self, torch: Any, device: Any, problem_path: str):
        self.torch, self.device, self.problem_path = torch, device, problem_path
        self.on_gpu = device.type == "cuda"
        self.report = MemoryReport(device=str(device))
        self.plans: dict[str, tuple[MemoryPlan, MemoryDecision]] = {}
        #: the highest peak of the stages already ended (their statistics were reset after each)
        self._ended_peak = 0
        if self.on_gpu:
            torch.cuda.reset_peak_memory_stats(device)
            self.report.free_bytes_at_start = int(torch.cuda.mem_get_info(device)[0])
        else:
            self.report.notes.append(NOT_MEASURED)

    def decision(self, sizes: dict[str, int]) -> tuple[MemoryPlan, MemoryDecision]:
        """The plan and placement at ``sizes``; raises ``Inconclusive(harness_oom)`` when not
        even the host placement fits the device (judged before anything is allocated)."""
        key = _sizes_key(sizes)
        if key not in self.plans and not self.on_gpu:
            # the host's memory is not what kgen's checks run short of: no plan, no cost
            self.plans[key] = (MemoryPlan(sizes=dict(sizes)), choose_placement(MemoryPlan(), None))
        if key not in self.plans:
            plan = plan_memory(self.problem_path, sizes)
            decision = choose_placement(plan, self.report.free_bytes_at_start if self.on_gpu else None)
            self.plans[key] = (plan, decision)
            if plan.problem_bytes >= self.report.problem_bytes:
                self.report.inputs_bytes, self.report.outputs_bytes = plan.inputs_bytes, plan.outputs_bytes
            if self.on_gpu:
                self.report.placements[key] = decision.placement.value
                if decision.placement is ReferencePlacement.HOST:
                    self.report.notes.append(f"sizes {key}: {decision.why}")
            if not decision.fits:
                raise Inconclusive(
                    InconclusiveCause.HARNESS_OOM,
                    f"the problem does not fit this device at sizes {key}: {decision.why}; kgen's checks "
                    "cannot run here (`--small` judges the candidate at smaller sizes)",
                )
        return self.plans[key]

    def placement(self, sizes: dict[str, int]) -> ReferencePlacement:
        return self.decision(sizes)[1].placement

    def reference_device(self, sizes: dict[str, int]) -> Any:
        """Where the reference and the pristine input copy live at ``sizes``."""
        return self.torch.device("cpu") if self.placement(sizes) is ReferencePlacement.HOST else self.device

    def held_bytes(self) -> int | None:
        return int(self.torch.cuda.memory_allocated(self.device)) if self.on_gpu else None

    def free_between_trials(self) -> None:
        if self.on_gpu:
            self.torch.cuda.empty_cache()

    def stage_ended(self, name: str) -> None:
        """Records the stage's own peak and starts the next stage's from what is held now, so a
        report says which check (correctness's copies, timing's input sets) held the most."""
        if not self.on_gpu:
            return
        peak = int(self.torch.cuda.max_memory_allocated(self.device))
        self.report.stage_peaks[name] = max(peak, self.report.stage_peaks.get(name, 0))
        self._ended_peak = max(self._ended_peak, peak)
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def finish(self) -> MemoryReport:
        """The report as it stands: the peak over every stage so far (callable after each save)."""
        if self.on_gpu:
            self.report.peak_bytes = max(self._ended_peak, int(self.torch.cuda.max_memory_allocated(self.device)))
        return self.report

    def whose_oom(self, exc: BaseException, what: str, by_candidate: bool, held_before: int | None) -> Inconclusive:
        """The inconclusive verdict for an out-of-memory error; ``held_before``: what kgen held
        on the device when the candidate's call began."""
        line = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        limit = TARGET_PEAK_RATIO * self.report.problem_bytes
        if by_candidate and (held_before is None or not self.report.problem_bytes or held_before <= limit):
            held = f"; kgen held {held_before / 1e9:.2f} GB" if held_before is not None else ""
            return Inconclusive(
                InconclusiveCause.CANDIDATE_OOM,
                f"the candidate's own allocation ran out of memory ({line}; {what}{held}, within its plan): "
                "no verdict on correctness; a kernel that needs less scratch memory would be judged",
            )
        return Inconclusive(
            InconclusiveCause.HARNESS_OOM,
            f"kgen's own checks ran out of memory ({line}; {what}): no verdict, not the candidate's fault; "
            "`--small` judges it at smaller sizes",
        )
