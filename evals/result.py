"""What the verifier found, and the whole evaluation of one candidate.

``VerifierReport`` declares once what the verifier child reports (``verifier/messages.py``'s
``ChildReport`` extends it) and what ``EvalResult`` carries to the CLI, the agent and the
knowledge base; ``EvalResult`` adds who was judged, where, and the verdict the parent
reached from the report and the child's exit. The vocabulary both are written in is
``verdict.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from kgen.backends.base import KernelReport
from kgen.backends.device import Device
from kgen.evals.placement import Placement
from kgen.evals.problem.memory_plan import MemoryReport
from kgen.evals.problem.policies import Policies
from kgen.evals.timeline import Timeline
from kgen.evals.timing.bench_result import BenchResult
from kgen.evals.verdict import (
    InconclusiveCause,
    RejectionClass,
    ResultModel,
    StageResult,
    Trial,
    Verdict,
)


class VerifierEvidence(ResultModel):
    """What the verifier's stages recorded, handed from the child's report to ``EvalResult``
    as it is: the parent adds to it (a stage the child died in) but never re-decides it."""

    stages: list[StageResult] = Field(default_factory=list)
    #: trials not run and why (a generated size set the reference cannot run, an output the
    #: distribution makes unrepresentable in its dtype)
    skipped: list[str] = Field(default_factory=list)
    #: what a reader of the verdict should know that decided nothing: a low-signal problem, a
    #: check that could not judge this problem, data movement a lenient policy allowed
    notes: list[str] = Field(default_factory=list)
    trials: list[Trial] = Field(default_factory=list)
    kernels: list[KernelReport] = Field(default_factory=list)
    #: the training check's loss curves and verdict, when it ran
    train_check: dict[str, Any] | None = None
    #: timings at the default sizes (candidate, eager, torch.compile), speed-of-light; GPU only
    bench: BenchResult | None = None
    #: device memory the evaluation held: peak over the problem's inputs + outputs (``memory_plan.py``)
    memory: MemoryReport | None = None
    #: where the evaluation's seconds went (``timeline.py``): the child's spans, to which the
    #: parent adds its own; empty in results saved before timelines were recorded
    timeline: Timeline = Field(default_factory=Timeline)
    #: the GPU model the verifier ran on, as the driver names it ("NVIDIA H100 80GB HBM3"); None
    #: on a CPU run. Timing names it too (``bench.device_name``), but a verification without
    #: timing must still say where it passed: a record of it is keyed by the GPU model
    device_name: str | None = None

    def evidence(self) -> dict[str, Any]:
        """The evidence fields by name, the very objects (no copies): what a result built
        from a report starts with."""
        return {name: getattr(self, name) for name in VerifierEvidence.model_fields}


class ReusedVerification(BaseModel):
    """A verification not repeated: the same code passed the same checks (sizes, policies,
    backend, GPU model, kgen and toolchain versions) before, and its passing result stands
    (``agent/search/verification_record.py`` keeps those records)."""

    device_name: str
    verified_at: datetime
    run_id: str
    #: what that verification took, which this result did not spend again
    seconds: float = 0.0

    def describe(self) -> str:
        return (f"verified at full sizes on {self.device_name} on {self.verified_at.date().isoformat()} "
                f"(run {self.run_id}), same code: not repeated")


class VerifierReport(VerifierEvidence):
    """The evidence and the verifier's reason to stop: a rejection, or no verdict and why.
    In ``EvalResult`` these are the final verdict's, which the parent decides (a child that
    crashed, timed out or was stopped reported neither)."""

    rejection: RejectionClass | None = None
    #: set when the verdict is inconclusive: what stopped the harness
    inconclusive: InconclusiveCause | None = None
    reason: str = ""


#: The order of ``EvalResult``'s keys in its JSON since the first saved eval.json: who was
#: judged, the verdict, then the evidence. Keys not named here follow in declaration order.
_SAVED_KEY_ORDER = (
    "problem", "problem_path", "candidate", "backend", "device", "targets", "verdict", "rejection",
    "inconclusive", "policies", "reason", "stages", "trials", "skipped", "notes", "kernels", "train_check", "bench",
    "memory", "seconds", "prestarted", "kgen_version", "timeline",
)


class EvalResult(VerifierReport):
    """The whole evaluation of one candidate on one problem: what `kgen eval --json` prints."""

    problem: str
    problem_path: str
    candidate: str
    backend: str
    device: Device
    targets: list[str] = Field(default_factory=list)
    verdict: Verdict
    #: the policies the candidate was judged under (``evals/problem/policies.py``)
    policies: Policies = Field(default_factory=Policies)
    seconds: float = 0.0
    #: the verifier was a spare started ahead of need (``worker_pool.py``): its start-up is not in ``seconds``
    prestarted: bool = False
    kgen_version: str = ""
    #: set when this result is an earlier passing verification of the same code, not repeated
    reused_verification: ReusedVerification | None = None
    #: the host, lane and GPU it ran on (``evals/executors/``); None in results saved before
    placement: Placement | None = None

    @model_serializer(mode="wrap")
    def _in_saved_key_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Inherited fields come first in pydantic's order; the JSON keeps its own, so
        ``kgen eval --json`` and eval.json files written before and after compare line by line."""
        data = handler(self)
        if not data.get("notes", True):
            del data["notes"]  # written only when there are some: earlier results keep their bytes
        if not data.get("timeline", {}).get("spans", True):
            del data["timeline"]  # likewise: a result without spans reads as one saved before them
        for key in ("device_name", "reused_verification", "placement"):
            if key in data and data[key] is None:
                del data[key]  # written only when known, for the same reason
        return {key: data[key] for key in _SAVED_KEY_ORDER if key in data} | data

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @property
    def outcome(self) -> str:
        """The verdict in one word: "passed", the rejection class, or "inconclusive (cause)"."""
        if self.verdict is Verdict.REJECTED:
            return self.rejection.value if self.rejection is not None else "rejected"
        if self.verdict is Verdict.INCONCLUSIVE and self.inconclusive is InconclusiveCause.COMPILED_NOT_RUN:
            return "compiled, not run"
        if self.verdict is Verdict.INCONCLUSIVE:
            return f"inconclusive ({self.inconclusive.value if self.inconclusive else 'unknown'})"
        return "passed"

    def compiles_for(self, target: str) -> bool | None:
        """Whether every kernel compiled for ``target`` (None: it was not compiled for it)."""
        reports = [k for k in self.kernels if k.target == target]
        return all(k.ok for k in reports) if reports else None

    @property
    def cut_short(self) -> bool:
        """kgen's own stop ended the verifier: the result says nothing about the candidate and
        must not be kept where a resumed run would read it instead of verifying again."""
        return self.inconclusive is InconclusiveCause.STOPPED

    @property
    def exit_code(self) -> int:
        """What `kgen eval` exits with: 0 passed, 1 rejected, 3 inconclusive (2 is bad usage)."""
        return {Verdict.PASSED: 0, Verdict.REJECTED: 1, Verdict.INCONCLUSIVE: 3}[self.verdict]

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.name == name), None)
