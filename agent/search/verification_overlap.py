"""Whether the winner's full-size verification may run beside the last generation's screenings.

The final verification of the best candidate so far need not wait for the last generation:
started when that generation starts, it runs while the generation's candidates are written
and screened, and only a new best found by the generation is verified after it. Beside them
it holds device memory of its own — the full sizes, with every copy kgen's checks keep
(``evals/problem/memory_plan.py``) — so it starts only where the memory plans of both, and
a CUDA context per verifier, fit the memory NVML reports free. Anything unknown (a plan whose
outputs could not be sized, a GPU NVML cannot see) means no overlap: the verification then
runs after the generation, as it always did. These are pure functions of those figures.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from kgen.evals.problem.memory_plan import DEVICE_HEADROOM, ReferencePlacement, plan_memory

#: what one verifier process holds beyond its plan: its CUDA context, the allocator's reserve,
#: the compiled kernels (measured 0.5-0.8 GB on an H100; rounded up)
CONTEXT_BYTES = 1 << 30


class OverlapDecision(BaseModel):
    overlap: bool
    why: str


def is_last_generation(generation: int, planned_generations: int) -> bool:
    """The generation the budget plan ends with (``split_budget``: by budget or generation count)."""
    return planned_generations > 0 and generation == planned_generations - 1


def plan_peak(problem_path: str | Path, size_sets: list[dict[str, int]]) -> int | None:
    """The largest device peak over ``size_sets`` with the reference on the device (the larger
    placement: a verifier short of memory moves it to the host); None when any set's outputs
    could not be sized or its problem not loaded."""
    peaks = []
    for sizes in size_sets:
        try:
            plan = plan_memory(problem_path, sizes)
        except Exception:  # noqa: BLE001 - the problem's own code at these sizes: the plan is unknown
            return None
        if plan.outputs_bytes is None:
            return None
        peaks.append(plan.device_peak(ReferencePlacement.DEVICE))
    return max(peaks, default=None)


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def overlap_decision(full_peak: int | None, screening_peak: int | None, screenings: int,
                     free_bytes: int | None) -> OverlapDecision:
    """Overlap when the full-size verification and ``screenings`` verifiers at once at the
    screening sizes, each with its context, fit :data:`DEVICE_HEADROOM` of the free memory."""
    if free_bytes is None:
        return OverlapDecision(overlap=False, why="the GPU's memory is unknown (NVML did not answer)")
    if full_peak is None or screening_peak is None:
        return OverlapDecision(overlap=False, why="the problem's memory plan is unknown")
    need = full_peak + screenings * screening_peak + (screenings + 1) * CONTEXT_BYTES
    budget = DEVICE_HEADROOM * free_bytes
    if need > budget:
        return OverlapDecision(overlap=False, why=f"{_gb(need)} would be needed beside {screenings} screening(s), "
                                                  f"{_gb(budget)} usable")
    return OverlapDecision(overlap=True, why=f"{_gb(need)} needed beside {screenings} screening(s), "
                                             f"{_gb(budget)} usable")
