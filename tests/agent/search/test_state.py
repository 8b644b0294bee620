"""The graph's typed state: its models come back from a SQLite checkpoint as the same models,
without a warning, and a run interrupted after a step resumes from that checkpoint.

What a person relies on: ``kgen resume`` continues a killed run with exactly the state it
had (the spec, every candidate's record, the archive, what the models cost), and a checkpoint
file never makes kgen import a class that is not one of its state models.
"""

from __future__ import annotations

import logging
import random

import pytest
from pydantic import BaseModel

from kgen.agent.candidates import CandidateRecord, CandidateTask
from kgen.agent.llm.prompt_context import PromptExample, PromptGuidance
from kgen.agent.llm.usage import ModelUsage, UsageLedger
from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import RunOptions
from kgen.agent.search.archive import SearchArchive
from kgen.agent.search.graph import Runner, execute
from kgen.agent.search.state import (
    STATE_MODELS,
    RunState,
    TaskInput,
    Winner,
    checkpoint_serde,
    merge_candidates,
    merge_usage,
    open_checkpointer,
)
from kgen.agent.spec.kernel_spec import KernelSpec

H100 = "NVIDIA H100 80GB HBM3"
SPEC = KernelSpec(request="Triton softmax for H100", problem="softmax", operation="softmax forward",
                  targets=["h100", "mi300x"], dtypes=["bfloat16"], shapes={"N": 4096}, source="matcher",
                  notes=["read 'N=4096'"])


def _record(cid: str, **fields) -> CandidateRecord:
    return CandidateRecord(id=cid, generation=int(cid[1]), target="h100", kind="sweep", origin="mutation",
                           parent_ids=["kb:k-1"], **fields)


def _full_state() -> RunState:
    """A state with every field set, as a run has it after a few generations."""
    passed = _record("g0-c00", status="evaluated", verdict="passed", time_ms=1.5, device_name=H100,
                     speedup_vs_compile=1.2, same_speed_as=["eager"], compiles_for={"mi300x": True},
                     kernels=["_k on h100: 32 registers/thread"], seconds=12.5)
    rejected = _record("g0-c01", status="evaluated", verdict="rejected", rejection="output_mismatch",
                       reason="rel-L2 0.3")
    archive = SearchArchive.new(SPEC.targets, islands=2)
    archive.update([passed, rejected], lambda record: {"kernels": "1"}, 0)
    return RunState(
        spec=SPEC, dtype="bfloat16", baselines={"h100": ("k-1", "source of k-1")},
        examples={"h100": [PromptExample(source="x", problem="softmax", backend="triton", target="h100",
                                         summary="1.5 ms on h100")]},
        guidance={"h100": [PromptGuidance(title="tiles", text="use 128-wide tiles")]},
        generation=1,
        tasks=[CandidateTask(id="g1-c00", generation=1, target="h100", kind="mutate", origin="mutation",
                             parent_ids=["g0-c00"], source="print(1)")],
        candidates={"g0-c00": passed, "g0-c01": rejected},
        usage=UsageLedger(models={"openai:gpt-5": ModelUsage(calls=2, input_tokens=300, output_tokens=40,
                                                            seconds=1.5, cost_usd=0.01, unpriced_calls=0)}),
        stop_reason="budget spent", winners={"h100": Winner(candidate="g0-c00", kb="added_best k-2")},
        archive=archive,
    )


@pytest.fixture
def serde_warnings(monkeypatch, caplog) -> pytest.LogCaptureFixture:
    """The serializer's warnings, each one logged again here: LangGraph logs a type's warning
    once per process, so one an earlier test triggered would otherwise go unseen."""
    from langgraph.checkpoint.serde import jsonplus

    monkeypatch.setattr(jsonplus, "_warned_unregistered_types", set())
    monkeypatch.setattr(jsonplus, "_warned_blocked_types", set())
    monkeypatch.setattr(jsonplus, "_warned_unreconstructable_types", set())
    caplog.set_level(logging.WARNING, logger="langgraph")
    return caplog


def _langgraph_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("langgraph") and r.levelno >= logging.WARNING]


def test_every_state_model_round_trips_through_the_checkpoint_serializer(serde_warnings):
    state = _full_state()
    task_input = TaskInput(task=state.tasks[0], spec=SPEC, dtype="bfloat16", examples=state.examples["h100"],
                           guidance=state.guidance["h100"], parents={"g0-c00": state.candidates["g0-c00"]})
    values = [state.spec, state.examples["h100"][0], state.guidance["h100"][0], state.tasks[0],
              state.candidates["g0-c00"], state.usage, state.winners["h100"], state.archive, task_input]
    assert {type(v) for v in values} == set(STATE_MODELS)  # the allow-list is exactly the state's models
    serde = checkpoint_serde()
    for value in values:
        back = serde.loads_typed(serde.dumps_typed(value))
        assert type(back) is type(value) and back == value
    assert _langgraph_warnings(serde_warnings) == []


def test_a_class_not_on_the_allow_list_is_never_rebuilt_from_a_checkpoint(serde_warnings):
    """The allow-list is explicit: a model kgen does not list comes back as its plain values."""

    class Stranger(BaseModel):
        name: str = "x"

    serde = checkpoint_serde()
    back = serde.loads_typed(serde.dumps_typed(Stranger()))
    assert back == {"name": "x"}
    assert any("Stranger" in message for message in _langgraph_warnings(serde_warnings))


def test_the_state_round_trips_through_a_sqlite_checkpoint(tmp_path, serde_warnings):
    """The whole state written by a graph step into the run's SQLite checkpoint and read back
    by a new checkpointer (a resumed process): the same models, equal, and no warning."""
    from langgraph.graph import END, START, StateGraph

    run = RunDirectory(tmp_path)
    state = _full_state()
    graph = StateGraph(RunState)
    graph.add_node("fill", lambda _: dict(state))
    graph.add_edge(START, "fill")
    graph.add_edge("fill", END)
    config = {"configurable": {"thread_id": run.run_id}}
    saver, connection = open_checkpointer(run)
    try:
        graph.compile(checkpointer=saver).invoke(RunState(), config)
    finally:
        connection.close()

    saver, connection = open_checkpointer(run)
    try:
        values = saver.get_tuple(config).checkpoint["channel_values"]
    finally:
        connection.close()
    restored = RunState.model_validate(values)
    assert isinstance(values["spec"], KernelSpec) and isinstance(values["usage"], UsageLedger)
    assert isinstance(values["archive"], SearchArchive) and isinstance(values["winners"]["h100"], Winner)
    assert all(isinstance(r, CandidateRecord) for r in values["candidates"].values())
    assert isinstance(values["tasks"][0], CandidateTask) and isinstance(values["examples"]["h100"][0], PromptExample)
    assert restored == state
    assert restored.archive.targets["h100"].parents(0, random.Random(0)) == ["g0-c00"]
    assert _langgraph_warnings(serde_warnings) == []


def test_branches_merge_their_records_and_their_usage():
    """Two ``produce`` branches of one step each add a record and a ledger: both kept, the
    checkpointed ledger left as it was."""
    before = UsageLedger(models={"m": ModelUsage(calls=1, input_tokens=10)})
    merged = merge_usage(before, UsageLedger(models={"m": ModelUsage(calls=2, input_tokens=5)}))
    assert merged.models["m"].calls == 3 and merged.models["m"].input_tokens == 15
    assert before.models["m"].calls == 1
    # a checkpoint from before the state was typed holds the ledger as its dict
    legacy = merge_usage(before.model_dump(mode="json"), UsageLedger(models={"m": ModelUsage(calls=2)}))
    assert legacy.models["m"].calls == 3 and legacy.total_calls == 3
    earlier, later = _record("g0-a"), _record("g0-a", status="no_code")
    assert merge_candidates({"g0-a": earlier}, {"g0-b": _record("g0-b")}).keys() == {"g0-a", "g0-b"}
    assert merge_candidates({"g0-a": earlier}, {"g0-a": later}) == {"g0-a": later}


def test_select_leaves_the_checkpointed_archive_as_it_was(tmp_path):
    """The archive a step starts from is the checkpoint's: a select that updates it works on a
    copy, so a step that fails half-way leaves nothing half-changed behind."""
    state = _full_state().model_copy(update={"stop_reason": "", "generation": 1})
    before = state.archive.model_copy(deep=True)
    options = RunOptions(request="softmax", models=["openai:gpt-5"], budget=40, generations=8, device="cpu")
    newer = _record("g1-c00", status="evaluated", verdict="passed", time_ms=1.0, device_name=H100)
    update = Runner(RunDirectory(tmp_path), options).select(
        state.model_copy(update={"candidates": {**state.candidates, "g1-c00": newer}}))
    assert update["archive"].targets["h100"].best().candidate == "g1-c00"
    assert state.archive == before


@pytest.mark.slow
def test_a_run_interrupted_after_a_step_resumes_from_its_typed_checkpoint(tmp_path, monkeypatch, serde_warnings):
    """Killed while selecting, after its candidate was evaluated: the checkpoint holds the
    evaluated record as a model, and a new Runner (``kgen resume``) selects, persists and
    reports from it without verifying the candidate again."""
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    options = RunOptions(request="Triton softmax for H100", models=[], budget=1, generations=1, device="cpu",
                         kb=str(tmp_path / "kb"))
    run = RunDirectory.create(tmp_path / "runs", tmp_path / "run")
    first = Runner(run, options)

    def killed(state: RunState) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(first, "select", killed)
    with pytest.raises(KeyboardInterrupt):
        execute(first, lambda state: None)
    saver, connection = open_checkpointer(run)
    try:
        values = saver.get_tuple({"configurable": {"thread_id": run.run_id}}).checkpoint["channel_values"]
    finally:
        connection.close()
    record = values["candidates"]["g0-c00"]
    assert isinstance(record, CandidateRecord) and record.status == "evaluated" and record.passed
    assert isinstance(values["spec"], KernelSpec) and values["spec"].problem == "softmax"
    evaluated = run.candidate_eval("g0-c00").stat().st_mtime_ns

    reported: list[RunState] = []
    resumed = Runner(run, options)
    lines: list[str] = []
    resumed.progress = lines.append
    final = execute(resumed, reported.append, resume=True)
    assert [s.winners for s in reported] == [final.winners]
    assert final.winners["h100"].candidate == "g0-c00" and final.stop_reason
    assert final.candidates["g0-c00"] == record
    assert not any(line.startswith("evaluating") for line in lines)
    assert run.candidate_eval("g0-c00").stat().st_mtime_ns == evaluated
    assert _langgraph_warnings(serde_warnings) == []
