"""What the parent and the verifier child say to each other: the request the harness writes
before starting the child, and the report the child writes back (after every stage and
every trial, so a child the candidate kills still leaves its evidence).

Read by the parent (``evals/harness.py``): nothing here imports torch or a toolchain.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from kgen.backends.device import Device
from kgen.backends.registry import DEFAULT_BACKEND
from kgen.evals.problem.init_arguments import ArgumentVariation
from kgen.evals.problem.policies import Policies
from kgen.evals.result import VerifierReport

#: Beside the report: the backend's heartbeat on a CPU run (``Backend.report_progress``).
HEARTBEAT_FILE = "heartbeat"
#: The stages the child runs, in order (``child.py`` builds them; a test holds the two together):
#: the parent names the one a killed child was in by the first of these it has not finished.
STAGES = ("static", "load", "correctness", "compile", "train_check", "timing")


class ChildRequest(BaseModel):
    problem_path: str
    candidate_path: str
    backend: str = DEFAULT_BACKEND
    device: Device = Device.CPU
    seeds: list[int]
    size_sets: list[dict[str, int]]
    #: indices of size sets kgen made up: skipped, not failed, if the reference cannot run them
    generated_size_sets: list[int] = Field(default_factory=list)
    #: index of a generated set -> one-constant-at-a-time sets to try if the reference cannot run it
    fallback_size_sets: dict[int, list[dict[str, int]]] = Field(default_factory=dict)
    #: index of a size set -> why it is tried, added to a rejection at it (a ``threshold`` set
    #: names the candidate's comparison it crosses: ``evals/problem/threshold_sets.py``)
    size_set_notes: dict[int, str] = Field(default_factory=dict)
    #: sizes for the precision-probe distributions (a long reduction axis); None: the first set
    probe_sizes: dict[str, int] | None = None
    distributions: bool = True
    #: constructor (and forward) arguments other than sizes, each varied in one trial after the size sets
    argument_variations: list[ArgumentVariation] = Field(default_factory=list)
    targets: list[str] = Field(default_factory=list)
    #: compiled for too; a failure there is recorded, not a rejection (``EvalOptions``)
    also_compile_for: list[str] = Field(default_factory=list)
    #: sizes whose kernel launches are compiled for the targets (the problem's defaults)
    compile_sizes: dict[str, int] | None = None
    train_check: bool = False
    #: time the candidate and the baselines at the problem's default sizes (GPU only)
    bench: bool = False
    bench_sizes: dict[str, int] | None = None
    workdir: str = "."
    policies: Policies = Field(default_factory=Policies)
    #: the harness self-test: the candidate is the problem's own reference, so the rules that
    #: demand a kernel are off (static rules, launches, torch compute, the ghost check)
    reference_self_test: bool = False
    #: a run's folder of timings kept for the run (``baseline_cache.py``): the device's copy
    #: bandwidth and matmul rate (the baselines are the trusted baseline job's); None: measure here
    baseline_cache_dir: str | None = None
    #: where this verifier asks kgen for a turn alone on the GPU before it times the candidate
    #: (``evals/sandbox/gpu_turns.py``): verifiers of a batch share the GPU for their trials and
    #: take turns to be timed; None: it runs by itself and times when it gets there
    turn_dir: str | None = None
    #: the current best candidate's median (ms): the candidate's timing may stop once it is
    #: clearly slower or faster (``timing/stopping.py``); baselines are never ranked
    rank_against_ms: float | None = None


class ChildReport(VerifierReport):
    """The verifier's report (``VerifierReport``), and whether the child got to its end."""

    finished: bool = False
