"""The verifier's context: declared fields only, opened as the child opens it, saved whole."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kgen.evals.problem.policies import Precision
from kgen.evals.verdict import StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage
from kgen.evals.verifier.messages import ChildReport

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"


def test_the_context_refuses_an_attribute_nobody_declared(open_verifier):
    ctx = open_verifier(CANDIDATES / "relu_kernelbench_solution.py")
    ctx.worst = 0.5  # declared: fine
    with pytest.raises(AttributeError):
        ctx.worst_error = 0.5  # a typo, or state a stage tries to keep on the side
    assert not hasattr(ctx, "__dict__")
    assert "worst_error" not in VerifierContext.__dataclass_fields__


def test_an_opened_context_holds_what_the_stages_start_from(open_verifier, tmp_path):
    ctx = open_verifier(CANDIDATES / "relu_kernelbench_solution.py", seeds=[5])
    assert ctx.device.type == "cpu" and ctx.backend.name == "triton"
    assert ctx.candidate_path.parent == tmp_path / "box"  # the copy in the box, not the original
    assert ctx.sizes_now == ctx.behaviour_sizes == ctx.request.size_sets[0]
    assert ctx.precision is Precision.IEEE and ctx.module is None and ctx.report == ChildReport()


def test_a_recorded_stage_is_saved_for_the_parent_at_once(open_verifier):
    ctx = open_verifier(CANDIDATES / "relu_kernelbench_solution.py")
    record_stage(ctx, "static", StageStatus.PASSED, "fine", time.monotonic() - 1.0, note="evidence")
    saved = ChildReport.model_validate_json(ctx.report_path.read_text())
    [stage] = saved.stages
    assert (stage.name, stage.message, stage.evidence) == ("static", "fine", {"note": "evidence"})
    assert stage.seconds >= 1.0 and saved.memory is not None and not saved.finished
