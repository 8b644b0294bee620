"""What the parent and the trusted baseline job say to each other.

The baselines a candidate is compared with (eager PyTorch, ``torch.compile``, Liger, quack) are
timed by a job of their own (``baselines/job.py``), a boxed child that loads no candidate
code: no candidate's process writes the figures it is judged against. The parent
(``baselines/service.py``) writes a :class:`BaselineRequest`, the job writes back
:class:`BaselineFigures`, which ``baselines/merge.py`` folds into the candidate's bench.

Read by the parent: nothing here imports torch or a toolchain.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kgen.backends.device import Device
from kgen.backends.registry import DEFAULT_BACKEND
from kgen.evals.problem.policies import Policies
from kgen.evals.timing.bench_result import Measurement

#: The baselines the job times, in the order they are built and reported.
BASELINES = ("eager", "torch.compile", "liger", "quack")

#: How the figures came to be: measured now, reused from the store after the eager re-check,
#: measured again because the re-check found drift, or not measured at all (no GPU, a failure).
FiguresOrigin = Literal["measured", "reused", "remeasured_after_drift", "not_measured"]


class BaselineRequest(BaseModel):
    """One job: the problem at its bench sizes on one device, under the candidate's policies."""

    problem_path: str
    sizes: dict[str, int]
    device: Device = Device.CPU
    #: the candidates' backend: its toolchains' versions are part of what makes figures comparable
    backend: str = DEFAULT_BACKEND
    policies: Policies = Field(default_factory=Policies)
    #: the inputs' seed (the figures do not depend on values, only on shapes and dtypes)
    seed: int = 0
    #: where the job asks for its turn alone on the GPU (``sandbox/gpu_turns.py``); None: no turns
    turn_dir: str | None = None
    #: the persistent store (``baselines/kept_figures.py``); None: measured, not kept
    store_dir: str | None = None


class BaselineFigures(BaseModel):
    """The baselines' measurements, or why each is missing; what a candidate's bench receives."""

    #: the store key the figures were measured under (None when the job did not get that far)
    key: str | None = None
    device_name: str = ""
    sizes: dict[str, int] = Field(default_factory=dict)
    #: "eager", "torch.compile", "liger", "quack" -> its measurement (``reused`` and ``age_s`` set when
    #: it came from the store)
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    #: a baseline that was not measured ("liger": "not measured: ..."), drift found by the
    #: re-check ("baselines drift"), the store's own notes ("baselines store"), the GPU shared
    errors: dict[str, str] = Field(default_factory=dict)
    origin: FiguresOrigin = "not_measured"
    #: the eager re-check of a stored entry: its median and the interval it was judged against
    recheck: str | None = None
    #: other processes seen on the GPU while the job timed (figures then not kept)
    shared_gpu: str | None = None
    #: seconds per phase ("build", "wait", "measure", ...): what the job cost
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    #: the versions the figures were timed with: torch and each baseline library
    versions: dict[str, str] = Field(default_factory=dict)
    #: the job reached its end (a missing or unfinished report: it died on the way)
    finished: bool = False


def not_measured(why: str, names: tuple[str, ...] = BASELINES, **fields: object) -> BaselineFigures:
    """Figures with every baseline missing for one reason: no GPU, a failed job."""
    return BaselineFigures.model_validate({
        "errors": {name: f"not measured: {why}" for name in names}, "origin": "not_measured", **fields,
    })
