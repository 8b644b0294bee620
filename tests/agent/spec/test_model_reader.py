"""Request sentence -> KernelSpec by a model, whose answer is checked before it is believed.
``complete_json`` is the caller's injected model, scripted here."""

from __future__ import annotations

import pytest

from kgen.agent.spec.kernel_spec import SpecError
from kgen.agent.spec.model_reader import SpecDraft, parse_request_with_model
from kgen.evals.problem.catalog import catalog


class ScriptedModel:
    """Returns a fixed draft and keeps what it was asked."""

    def __init__(self, draft):
        self.draft = draft
        self.calls: list[tuple[str, str, type]] = []

    def __call__(self, system, user, model_cls):
        self.calls.append((system, user, model_cls))
        return self.draft


def test_model_answer_for_a_catalog_problem_is_normalised():
    model = ScriptedModel(
        SpecDraft(problem="rmsnorm_backward", operation="rmsnorm bwd", backend="CuTe DSL",
                  targets=["H100", "mi300"], dtypes=["bf16"], shapes={"hidden": 8192})
    )
    spec = parse_request_with_model("CuTe RMSNorm bwd, hidden 8192, for H100 and MI300", model)
    assert (spec.problem, spec.backend, spec.targets, spec.dtypes, spec.shapes, spec.source) == (
        "rmsnorm_backward", "cute", ["h100", "mi300x"], ["bfloat16"], {"HIDDEN": 8192}, "model",
    )
    system, user, cls = model.calls[0]
    assert cls is SpecDraft
    assert all(info.name in system for info in catalog()) and "mi300x" in system
    assert "CuTe RMSNorm bwd, hidden 8192, for H100 and MI300" in user


def test_model_answer_for_a_new_operation_asks_for_a_reference_problem():
    model = ScriptedModel(SpecDraft(problem=None, operation="RMSNorm fused with a residual add, forward"))
    spec = parse_request_with_model("rmsnorm + residual add", model, default_target="a100")
    assert spec.problem == "" and spec.needs_reference_problem
    assert spec.operation == "RMSNorm fused with a residual add, forward" and spec.source == "model"
    assert spec.targets == ["a100"] and "no target named: using a100" in spec.notes


def test_hallucinated_problem_falls_back_to_the_matcher():
    model = ScriptedModel(SpecDraft(problem="rmsnorm_backward_v2", operation="x", targets=["h100"]))
    spec = parse_request_with_model("rmsnorm backward for h100", model)
    assert spec.problem == "rmsnorm_backward" and spec.source == "matcher"
    assert "rmsnorm_backward_v2" in spec.notes[0]


def test_hallucinated_problem_with_no_matcher_answer_raises():
    model = ScriptedModel({"problem": "sandwich_forward", "operation": "a sandwich"})
    with pytest.raises(SpecError, match="the model named 'sandwich_forward'.*no catalog problem matches"):
        parse_request_with_model("make me a sandwich", model)


def test_model_answer_in_the_wrong_direction_is_not_believed():
    model = ScriptedModel(SpecDraft(problem="rmsnorm_forward", operation="rmsnorm", targets=["h100"]))
    spec = parse_request_with_model("rmsnorm grad for h100", model)
    assert spec.problem == "rmsnorm_backward"
    assert "rmsnorm_forward, a forward, for a backward request" in spec.notes[0]


def test_model_answer_with_unknown_target_or_backend_raises():
    with pytest.raises(SpecError, match="unknown hardware target 'h900'"):
        parse_request_with_model("softmax", ScriptedModel(SpecDraft(problem="softmax", operation="s", targets=["h900"])))
    with pytest.raises(SpecError, match="unknown backend 'cuda'"):
        parse_request_with_model("softmax", ScriptedModel(SpecDraft(problem="softmax", operation="s", backend="cuda")))
