"""The verifier's vocabulary: stage status, rejection classes, inconclusive causes, the
verdict, and one trial's comparison with the fp64 reference.

Every stage of the cascade (static rules, load, correctness, compile, training check,
timing) appends a ``StageResult``; a rejection carries a ``RejectionClass`` so callers
(the CLI, the agent, the red-team tests) can tell *why* without parsing prose. The bottom
of ``evals/``: every room may import it, it imports none of them.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class ResultModel(BaseModel):
    """Results carry measured floats, and a wrong kernel's error can be Inf or NaN:
    JSON keeps them as the constants Infinity/NaN instead of turning them into null."""

    model_config = ConfigDict(ser_json_inf_nan="constants")


class Word(str, Enum):
    """A word of the verifier's vocabulary: printed as itself (``passed``), also in an f-string.
    A ``str`` enum prints as ``Verdict.PASSED`` (Python 3.11 made f-strings do so too), which a
    script's ``print(result.verdict)`` showed its reader; the value is what JSON holds too."""

    def __str__(self) -> str:
        return str(self.value)


class StageStatus(Word):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class RejectionClass(Word):
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
    # The verification table's classes (DESIGN.md): what must never pass.
    UNWRITTEN_OUTPUT = "unwritten_output"  # output (or leftover memory) never written by the kernel
    PARTIAL_OUTPUT = "partial_output"  # part of the output never written (wrong grid)
    INPUT_MUTATION = "input_mutation"  # an input changed during the call
    STALE_OUTPUT = "stale_output"  # caching across calls: an output from other inputs
    NOT_A_KERNEL = "not_a_kernel"  # torch math on the forward path, fallback, ghost kernel
    FORBIDDEN_CONSTRUCT = "forbidden_construct"  # caches, streams, monkey-patching, threads, I/O
    LOW_PRECISION_ACCUMULATION = "low_precision_accumulation"  # bf16/fp16 accumulators
    SHAPE_SPECIALISATION = "shape_specialisation"  # right at the default sizes only
    INPUT_DISTRIBUTION = "input_distribution_failure"  # right only on some input distributions
    DEFERRED_WORK = "deferred_work"  # output still changing after return (side stream, async)
    TIMING_ATTACK = "timing_attack"  # patched timers, side streams hiding work from timing
    TRAINING_DIVERGENCE = "training_divergence"  # training with its gradient drifts from reference
    SANDBOX_VIOLATION = "sandbox_violation"  # threads, processes, files outside, network
    LAYOUT_BLINDNESS = "layout_blindness"  # wrong on the problem's own strided inputs, right on contiguous copies
    CHECKER_DETECTION = "checker_detection"  # right while instrumented, wrong in an uninstrumented call
    OUTPUT_ALIASES_INPUT = "output_aliases_input"  # an output shares storage with an argument
    OUTPUT_ALIASES_OUTPUT = "output_aliases_output"  # two outputs share storage where the reference's do not
    STATE_MUTATION = "state_mutation"  # forward changed module or candidate state the reference leaves alone
    STALE_WEIGHTS = "stale_weights"  # wrong once the weights change: a copy of them was taken earlier
    ENVIRONMENT_DEPENDENT = "environment_dependent"  # wrong when only the clock (or environment) differs
    OUT_OF_BOUNDS_WRITE = "out_of_bounds_write"  # wrote past the end of a buffer it allocated
    HARDCODED_ARGUMENT = "hardcoded_argument"  # right with the problem's eps / slope / dim, wrong with another
    INPUT_INSENSITIVE = "input_insensitive"  # a near-constant answer on a low-signal problem: does not follow its inputs
    RACE_CONDITION = "race_condition"  # outputs change beyond tolerance with the programs' scheduling (GPU)


class Rejected(Exception):
    """Raised inside the verifier's child process when a check rejects the candidate.

    Defined here, not in the child module, so that the child (run as ``__main__``) and the
    modules it calls raise and catch one class."""

    def __init__(self, rejection: RejectionClass, message: str, evidence: dict[str, Any] | None = None):
        super().__init__(message)
        self.rejection = rejection
        #: recorded on the failed stage (the static rules' every violation, ...)
        self.evidence = dict(evidence or {})


class InconclusiveCause(Word):
    """Why no verdict could be reached: the harness's limits, never the candidate's fault."""

    NEEDS_GPU = "needs_gpu"  # the CPU interpreter cannot run what the kernel uses; a GPU can judge it
    HARNESS_ERROR = "harness_error"  # kgen's own work failed (a bug or a limit of the verifier)
    CPU_TIME_LIMIT = "cpu_time_limit"  # the CPU interpreter's time limit came while the kernel still advanced
    OUT_OF_MEMORY = "out_of_memory"  # the device ran out of memory; whose allocation is not known
    HARNESS_OOM = "harness_oom"  # kgen's own checks (reference, copies, comparison) did not fit
    CANDIDATE_OOM = "candidate_oom"  # the candidate's call exhausted memory while kgen stayed within its plan
    STOPPED = "stopped"  # kgen itself was stopped (a signal, its exit) and ended the verifier mid-run
    WORKER_KILLED = "worker_killed"  # the verifier was killed from outside kgen (e.g. the host's out-of-memory killer)
    #: compiled for the targets and watched, but not run: the backend's kernels cannot run on a CPU
    COMPILED_NOT_RUN = "compiled_not_run"


class Inconclusive(Exception):
    """Raised inside the verifier's child when the harness, not the candidate, cannot go on."""

    def __init__(self, cause: InconclusiveCause, message: str):
        super().__init__(message)
        self.cause = cause


class SkipTrial(Exception):
    """A trial the reference itself cannot judge: recorded, never held against the candidate."""


class Verdict(Word):
    PASSED = "passed"
    REJECTED = "rejected"
    #: no verdict: the harness could not judge (``EvalResult.inconclusive`` says why)
    INCONCLUSIVE = "inconclusive"


class StageResult(ResultModel):
    name: str
    status: StageStatus
    message: str = ""
    seconds: float = 0.0
    evidence: dict[str, Any] = Field(default_factory=dict)


class OutputComparison(ResultModel):
    """How one output of one trial compared with the fp64 reference."""

    index: int
    shape: list[int]
    dtype: str
    rel_l2_error: float
    max_abs_error: float
    worst_index: list[int] = Field(default_factory=list)
    mismatched_fraction: float
    mismatched_count: int = 0
    nonfinite_count: int = 0  # NaN/Inf where the reference is finite
    tolerance_rel_l2: float
    reference_dtype_rel_l2_error: float | None = None
    passed: bool


class Trial(ResultModel):
    """One call of the candidate at one seed and one set of sizes."""

    seed: int
    sizes: dict[str, int]
    distribution: str = "normal"
    #: arguments other than sizes set to other values than the problem's (``init_arguments.py``)
    arguments: dict[str, int | float] = Field(default_factory=dict)
    outputs: list[OutputComparison] = Field(default_factory=list)
    launches: int = 0
    seconds: float = 0.0
    passed: bool = False

    @model_serializer(mode="wrap")
    def _without_default_arguments(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if not data.get("arguments", True):
            del data["arguments"]  # written only for a trial that varied some: earlier results keep their bytes
        return data
