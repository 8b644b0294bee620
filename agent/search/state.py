"""The graph's state as typed models, and the checkpoint that keeps it between steps.

Every node reads :class:`RunState` (LangGraph validates the checkpointed values into it
before each step) and returns a partial update of the same fields, models included:
nothing downstream parses a dict or validates a model again. Two fields are written by
several branches of one step and merged by their reducers: ``candidates`` (each ``produce``
branch adds its record) and ``usage`` (each model call's ledger adds its tokens).

The checkpointer is LangGraph's SQLite saver; its serializer rebuilds a model from the
checkpoint only when the model's class is on an explicit allow-list (:data:`STATE_MODELS`),
so a resumed run gets back the same models, and a class that is not kgen's own state is
never imported from a checkpoint file.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field

from kgen.agent.candidates import CandidateRecord, CandidateTask
from kgen.agent.llm.prompt_context import PromptExample, PromptGuidance
from kgen.agent.llm.usage import UsageLedger
from kgen.agent.search.archive import SearchArchive
from kgen.agent.spec.kernel_spec import KernelSpec

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.checkpoint.sqlite import SqliteSaver

    from kgen.agent.run_directory import RunDirectory


class Winner(BaseModel):
    """A target's winner after full verification, and what the knowledge base made of it."""

    candidate: str
    #: the write-back's outcome ("added_best k-...") or why there was none ("not written: ...")
    kb: str = ""


def merge_candidates(left: dict[str, CandidateRecord],
                     right: dict[str, CandidateRecord]) -> dict[str, CandidateRecord]:
    """Records by id, a later record of a candidate replacing its earlier one."""
    return {**left, **right}


def merge_usage(left: UsageLedger | dict, right: UsageLedger) -> UsageLedger:
    """Both ledgers' calls in a new ledger (neither argument is changed: ``left`` is the
    checkpointed value). A checkpoint written before the state was typed holds ``left`` as
    the ledger's dict, and a run resumed from it still adds up its cost."""
    merged = UsageLedger.model_validate(left).model_copy(deep=True)
    merged.merge(right)
    return merged


class RunState(BaseModel):
    """What the graph knows between steps; every field has its empty value before the step
    that fills it."""

    #: the request read (``spec`` step); None before it
    spec: KernelSpec | None = None
    #: the input dtype the kernels are made for (the spec's first, else the problem's)
    dtype: str = ""
    #: target -> (knowledge-base id, source) of the known kernel generation 0 re-measures
    baselines: dict[str, tuple[str, str]] = Field(default_factory=dict)
    #: offline, for a problem with no kernel of its own: target -> (knowledge-base id, source,
    #: description) of other problems' kernels whose reference computes this one's, the first
    #: being the target's baseline; generation 0 verifies them all
    library: dict[str, list[tuple[str, str, str]]] = Field(default_factory=dict)
    #: target -> the knowledge base's examples and guidance notes for its prompts
    examples: dict[str, list[PromptExample]] = Field(default_factory=dict)
    guidance: dict[str, list[PromptGuidance]] = Field(default_factory=dict)
    generation: int = 0
    #: the generation's planned tasks, handed one each to the ``produce`` branches
    tasks: list[CandidateTask] = Field(default_factory=list)
    candidates: Annotated[dict[str, CandidateRecord], merge_candidates] = Field(default_factory=dict)
    usage: Annotated[UsageLedger, merge_usage] = Field(default_factory=UsageLedger)
    #: why the search stopped ("" while it goes on)
    stop_reason: str = ""
    winners: dict[str, Winner] = Field(default_factory=dict)
    #: the search's archive per target, updated after each generation; None before the first
    archive: SearchArchive | None = None

    @property
    def records(self) -> list[CandidateRecord]:
        return list(self.candidates.values())


class TaskInput(BaseModel):
    """What one ``produce`` branch sees: its task and the slice of state its prompt needs."""

    task: CandidateTask
    spec: KernelSpec
    dtype: str
    examples: list[PromptExample] = Field(default_factory=list)
    guidance: list[PromptGuidance] = Field(default_factory=list)
    #: the task's parents that are candidates of this run (a ``kb:`` parent is not)
    parents: dict[str, CandidateRecord] = Field(default_factory=dict)


#: Every model class a checkpoint holds at its top (a model's own fields are stored as plain
#: values inside it): the state's fields' models, and the ``produce`` branches' input.
STATE_MODELS: tuple[type[BaseModel], ...] = (
    KernelSpec, PromptExample, PromptGuidance, CandidateTask, CandidateRecord, UsageLedger, Winner,
    SearchArchive, TaskInput,
)


def checkpoint_serde() -> JsonPlusSerializer:
    """LangGraph's serializer, rebuilding kgen's state models and no other class of its own."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=STATE_MODELS)


def open_checkpointer(run: RunDirectory) -> tuple[SqliteSaver, sqlite3.Connection]:
    """The run's checkpoint database, and its connection (the caller closes it)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    connection = sqlite3.connect(str(run.checkpoints), check_same_thread=False)
    return SqliteSaver(connection, serde=checkpoint_serde()), connection

