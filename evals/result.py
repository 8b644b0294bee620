"""Typed evaluation results: per-stage status and evidence, and the verdict.

Every stage of the cascade (load, compile, correctness, and later the
deeper verifier and timing) appends a ``StageResult``; a rejection carries a
``RejectionClass`` so callers (the CLI, the agent, the red-team tests) can
tell *why* without parsing prose.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from kgen.backends.base import KernelReport


class StageStatus(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class RejectionClass(str, Enum):
    """Why a candidate was rejected. Values are stable: JSON consumers match on them."""

    LOAD_ERROR = "load_error"  # syntax error, import error, exception at import
    NO_MODEL_NEW = "no_model_new"  # the module defines no ModelNew class
    CONSTRUCTION_ERROR = "construction_error"  # ModelNew(*init_inputs) raised
    RUNTIME_ERROR = "runtime_error"  # forward raised
    CRASH = "crash"  # the child process died (segfault, illegal memory access, abort)
    TIMEOUT = "timeout"  # killed at the hard time limit
    WRONG_OUTPUT_STRUCTURE = "wrong_output_structure"  # number of outputs, shape or dtype
    NAN_OR_INF = "nan_or_inf"  # non-finite values where the reference is finite
    MISMATCH = "numerical_mismatch"  # finite but outside tolerance
    NO_KERNEL_LAUNCH = "no_kernel_launch"  # forward launched no backend kernel
    COMPILE_ERROR = "compile_error"  # a kernel does not compile for a requested target


class Verdict(str, Enum):
    PASSED = "passed"
    REJECTED = "rejected"


class StageResult(BaseModel):
    name: str
    status: StageStatus
    message: str = ""
    seconds: float = 0.0
    evidence: dict[str, Any] = Field(default_factory=dict)


class OutputComparison(BaseModel):
    """How one output of one trial compared with the fp64 reference."""

    index: int
    shape: list[int]
    dtype: str
    rel_l2_error: float
    max_abs_error: float
    worst_index: list[int] = Field(default_factory=list)
    mismatched_fraction: float
    nonfinite_count: int = 0  # NaN/Inf where the reference is finite
    tolerance_rel_l2: float
    reference_dtype_rel_l2_error: float | None = None
    passed: bool


class Trial(BaseModel):
    """One call of the candidate at one seed and one set of sizes."""

    seed: int
    sizes: dict[str, int]
    outputs: list[OutputComparison] = Field(default_factory=list)
    launches: int = 0
    seconds: float = 0.0
    passed: bool = False


class EvalResult(BaseModel):
    """The whole evaluation of one candidate on one problem: what `kgen eval --json` prints."""

    problem: str
    problem_path: str
    candidate: str
    backend: str
    device: str
    targets: list[str] = Field(default_factory=list)
    verdict: Verdict
    rejection: RejectionClass | None = None
    reason: str = ""
    stages: list[StageResult] = Field(default_factory=list)
    trials: list[Trial] = Field(default_factory=list)
    kernels: list[KernelReport] = Field(default_factory=list)
    seconds: float = 0.0
    kgen_version: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.name == name), None)
