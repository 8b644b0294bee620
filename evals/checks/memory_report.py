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

from kgen.evals.problem.format import sizes_text
from kgen.evals.problem.memory_plan import (
    DISTRIBUTION_BYTES,
    NOT_MEASURED,
    TARGET_PEAK_RATIO,
    MemoryDecision,
    MemoryPlan,
    MemoryReport,
    ReferencePlacement,
    choose_placement,
    plan_memory,
)
from kgen.evals.problem.size_sets import scaled_to_fit
from kgen.evals.verdict import Inconclusive, InconclusiveCause


def _sizes_key(sizes: dict[str, int]) -> str:
    return sizes_text(sizes) or "default sizes"


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

    def scaled(self, info: Any, sizes: dict[str, int]) -> dict[str, int] | None:
        """Sizes for the checks beyond the first full-size trial, where the device cannot hold
        the fp64 reference at ``sizes``; None when it can (or no smaller sizes fit either).

        At such sizes every check pays a host reference: the inputs and outputs cross to the
        host, the reference runs there in fp64 and comes back a chunk at a time (about a
        minute per trial for KernelBench's 6.4 GB ReLU on an H100). One trial and the cache
        probe stay at the full sizes (the indexing, tiling and launch grid there are what the
        user runs); the other seeds, size sets, the ghost check and the call sequence run where
        the reference fits on the device, within :data:`TARGET_PEAK_RATIO` of the full
        problem's own inputs + outputs, and the report says so."""
        if not self.on_gpu or self.placement(sizes) is not ReferencePlacement.HOST:
            return None
        free, limit = self.report.free_bytes_at_start, TARGET_PEAK_RATIO * self.decision(sizes)[0].problem_bytes

        def fits(plan: MemoryPlan) -> bool:
            decision = choose_placement(plan, free)
            return decision.placement is ReferencePlacement.DEVICE and decision.predicted_peak_bytes <= limit

        return self._smaller(info, sizes, fits, "the other seeds, size sets, the ghost check and the call sequence",
                             "where the fp64 reference fits on the device (at these sizes it needs the host)")

    def distribution_sizes(self, info: Any, sizes: dict[str, int]) -> dict[str, int] | None:
        """Sizes for the input distributions other than ``normal`` on a GPU, where ``sizes``
        hold more than :data:`DISTRIBUTION_BYTES` of inputs + outputs; None otherwise.

        Those inputs are transformed on the host from the seed (a CPU generator, the same
        numbers on every machine) and copied over: 10-25 s per distribution for 3 GB of
        inputs. A distribution changes values, not shapes; the shapes are the normal trials'
        to cover, so the distributions run on fewer rows, the long axes kept whole."""
        if not self.on_gpu:
            return None
        if self._plan(sizes).problem_bytes <= DISTRIBUTION_BYTES:
            return None
        return self._smaller(info, sizes, lambda plan: plan.problem_bytes <= DISTRIBUTION_BYTES,
                             "the input distributions other than normal",
                             f"where their inputs + outputs hold at most {DISTRIBUTION_BYTES / 1e9:.1f} GB "
                             "(they are drawn on the host)")

    def _plan(self, sizes: dict[str, int]) -> MemoryPlan:
        key = _sizes_key(sizes)
        return self.plans[key][0] if key in self.plans else plan_memory(self.problem_path, sizes)

    def _smaller(self, info: Any, sizes: dict[str, int], fits: Any, which: str, why: str) -> dict[str, int] | None:
        def planned_fit(candidate: dict[str, int]) -> bool:
            try:
                return bool(fits(plan_memory(self.problem_path, candidate)))
            except Exception:  # noqa: BLE001 - sizes the problem cannot be planned at do not fit
                return False

        scaled = scaled_to_fit(info, sizes, planned_fit)
        key = _sizes_key(sizes)
        if scaled is not None and f"{key} ({which})" not in self.report.scaled_sizes:
            self.report.scaled_sizes[f"{key} ({which})"] = dict(scaled)
            self.report.notes.append(f"sizes {key}: {which} ran at {_sizes_key(scaled)}, {why}")
        return scaled

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
