"""EvalResult's JSON stays what it was while its fields are declared once with the child's report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgen.evals.result import EvalResult, VerifierEvidence, VerifierReport
from kgen.evals.timeline import Span, Timeline
from kgen.evals.verdict import RejectionClass, StageResult, StageStatus, Trial, Verdict
from kgen.evals.verifier.messages import ChildReport

RECORDED = Path(__file__).resolve().parents[2] / "docs" / "gpu_runs"
SAVED = sorted(RECORDED.glob("**/eval_*.json"))


def test_there_are_results_saved_by_earlier_versions_to_read():
    assert len(SAVED) >= 10


@pytest.mark.parametrize("path", SAVED, ids=lambda p: str(p.relative_to(RECORDED)))
def test_a_result_saved_by_an_earlier_version_loads_with_its_keys_in_their_order(path: Path):
    text = path.read_text()
    result = EvalResult.model_validate_json(text)
    saved_keys = list(json.loads(text))
    written_keys = list(json.loads(result.model_dump_json()))
    assert [k for k in written_keys if k in saved_keys] == saved_keys


def test_a_result_in_todays_format_is_written_back_byte_for_byte():
    """Inherited fields come first in pydantic's own order: the JSON must not follow it."""
    current = [p for p in SAVED if EvalResult.model_validate_json(p.read_text()).memory is not None]
    assert current
    for path in current:
        text = path.read_text().strip()
        assert EvalResult.model_validate_json(text).model_dump_json(indent=2) == text, path


def test_the_report_and_the_result_share_one_declaration_of_the_verifier_fields():
    shared = set(VerifierReport.model_fields)
    assert shared == {"stages", "skipped", "notes", "trials", "kernels", "train_check", "bench", "memory",
                      "timeline", "device_name", "rejection", "inconclusive", "reason"}
    assert set(ChildReport.model_fields) == shared | {"finished"}
    for name in shared:
        assert EvalResult.model_fields[name].annotation == ChildReport.model_fields[name].annotation


def test_the_evidence_of_a_report_is_handed_over_as_it_is_and_the_verdict_is_not():
    stage = StageResult(name="correctness", status=StageStatus.FAILED, message="wrong")
    trial = Trial(seed=3, sizes={"n": 8})
    report = ChildReport(stages=[stage], trials=[trial], skipped=["sizes n=1: cannot be built"],
                         rejection=RejectionClass.MISMATCH, reason="wrong", finished=True)
    evidence = report.evidence()
    assert set(evidence) == set(VerifierEvidence.model_fields)
    assert "rejection" not in evidence and "reason" not in evidence
    result = EvalResult(problem="p", problem_path="p.py", candidate="c.py", backend="triton", device="cpu",
                        verdict=Verdict.PASSED, **evidence)
    assert result.stages[0] is stage and result.trials[0] is trial
    assert result.skipped == ["sizes n=1: cannot be built"]
    assert result.rejection is None and result.reason == ""


def test_a_timeline_is_written_last_when_it_has_spans_and_left_out_when_it_has_none():
    result = EvalResult(problem="p", problem_path="p.py", candidate="c.py", backend="triton", device="cpu",
                        verdict=Verdict.PASSED)
    assert "timeline" not in json.loads(result.model_dump_json())  # as results saved before timelines
    result.timeline = Timeline(spans=[Span(name="static", start=1.0, seconds=0.25)])
    written = json.loads(result.model_dump_json())
    assert list(written)[-1] == "timeline"
    assert written["timeline"] == {"spans": [{"name": "static", "start": 1.0, "seconds": 0.25, "gpu": False}]}
    assert EvalResult.model_validate_json(result.model_dump_json()).timeline == result.timeline


def test_the_gpu_name_and_a_reused_verification_are_written_only_when_there_are_some():
    result = EvalResult(problem="p", problem_path="p.py", candidate="c.py", backend="triton", device="cpu",
                        verdict=Verdict.PASSED)
    data = json.loads(result.model_dump_json())
    assert "device_name" not in data and "reused_verification" not in data  # earlier eval.json bytes kept
    named = result.model_copy(update={"device_name": "NVIDIA H100 80GB HBM3"})
    assert json.loads(named.model_dump_json())["device_name"] == "NVIDIA H100 80GB HBM3"
