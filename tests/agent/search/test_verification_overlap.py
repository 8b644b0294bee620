"""When the winner's full-size verification may run beside the last generation: pure decisions
from the memory plans and the GPU's free memory, never taken when either is unknown."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.agent.search.verification_overlap import (
    CONTEXT_BYTES,
    is_last_generation,
    overlap_decision,
    plan_peak,
)
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.memory_plan import DEVICE_HEADROOM, ReferencePlacement, plan_memory

GB = 10**9


@pytest.mark.parametrize(("generation", "planned", "last"), [(0, 1, True), (0, 3, False), (1, 3, False),
                                                               (2, 3, True), (3, 3, False), (0, 0, False)])
def test_the_last_generation_is_the_budget_plans_last(generation, planned, last):
    assert is_last_generation(generation, planned) is last


def test_it_overlaps_where_both_plans_and_a_context_each_fit_the_free_memory():
    free = 80 * GB
    screening, screenings = 1 * GB, 5
    room = int(DEVICE_HEADROOM * free) - screenings * screening - (screenings + 1) * CONTEXT_BYTES
    assert overlap_decision(room, screening, screenings, free).overlap
    refused = overlap_decision(room + 1, screening, screenings, free)
    assert not refused.overlap and "would be needed beside 5 screening(s)" in refused.why
    # fewer screenings at once leave room for more
    assert overlap_decision(room + 1, screening, screenings - 1, free).overlap


@pytest.mark.parametrize(("full", "screening", "free", "why"), [
    (GB, GB, None, "memory is unknown"),
    (None, GB, 80 * GB, "memory plan is unknown"),
    (GB, None, 80 * GB, "memory plan is unknown"),
])
def test_anything_unknown_means_no_overlap(full, screening, free, why):
    decision = overlap_decision(full, screening, 1, free)
    assert not decision.overlap and why in decision.why


def test_a_plans_peak_is_the_largest_of_its_size_sets_with_the_reference_on_the_device():
    path = resolve_problem("softmax").path
    sets = [{"ROWS": 37, "COLS": 96}, {"ROWS": 1025, "COLS": 96}]
    expected = max(plan_memory(path, s).device_peak(ReferencePlacement.DEVICE) for s in sets)
    assert plan_peak(path, sets) == expected > 0


def test_a_problem_whose_outputs_cannot_be_sized_has_no_peak(tmp_path: Path):
    problem = tmp_path / "no_meta.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\nN = 8\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x[x > 0]\n\n"
        "def get_inputs():\n    return [torch.randn(N)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert plan_peak(problem, [{"N": 8}]) is None
