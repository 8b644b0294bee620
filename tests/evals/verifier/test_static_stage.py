"""The static stage on a real context: the candidate's source judged before any of it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.static_stage import STATIC_SHOWN, StaticStage

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"


def test_a_kernel_with_no_forbidden_construct_passes(open_verifier):
    ctx = open_verifier(CANDIDATES / "relu_kernelbench_solution.py")
    StaticStage().run(ctx)
    [stage] = ctx.report.stages
    assert (stage.name, stage.status, stage.message) == ("static", StageStatus.PASSED, "no forbidden construct found")
    assert ctx.module is None  # judged from the source: nothing was imported
    assert ctx.report_path.is_file()  # and saved for the parent at once


def test_torch_doing_the_math_is_rejected_with_every_violation_in_the_evidence(open_verifier):
    ctx = open_verifier(CANDIDATES / "redteam_torch_inside.py")
    with pytest.raises(Rejected) as caught:
        StaticStage().run(ctx)
    assert caught.value.rejection is RejectionClass.NOT_A_KERNEL
    violations = caught.value.evidence["violations"]
    assert violations and all({"rule", "line", "message"} <= set(v) for v in violations)
    assert len(str(caught.value).splitlines()) == min(len(violations), STATIC_SHOWN)
    assert "(rule torch-math, line" in str(caught.value)
    assert ctx.report.stages == []  # the child records the failed stage, not the stage itself


def test_a_syntax_error_is_a_load_error_naming_the_line(open_verifier):
    ctx = open_verifier(CANDIDATES / "syntax_error.py")
    with pytest.raises(Rejected, match="syntax error in syntax_error.py line 4") as caught:
        StaticStage().run(ctx)
    assert caught.value.rejection is RejectionClass.LOAD_ERROR


def test_the_harness_self_test_turns_the_kernel_rules_off(open_verifier):
    ctx = open_verifier(CANDIDATES / "redteam_torch_inside.py", reference_self_test=True)
    StaticStage().run(ctx)
    assert ctx.report.stages[0].message == "self-test: the reference as the candidate, kernel rules off"
