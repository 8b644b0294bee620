"""What an executor is: the one seam between kgen's callers and where evaluations run.

Every caller (a search's batch, `kgen solve`'s problems, `kgen bench`, the self-test) hands
an executor a list of jobs and hears each result as soon as it is known. Two executors exist
(``EXECUTORS``): ``local`` (this host's GPUs, a lane each) and ``ray`` (a Ray cluster's
GPUs, an actor each). Adding one is one class here-shaped plus its entry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from kgen.core.text import counted
from kgen.errors import KgenError
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.placement import Placement
from kgen.evals.result import EvalResult

OnResult = Callable[[int, EvalResult], None]
OnStart = Callable[[int], None]
Stop = Callable[[], bool]


class LaneLost(KgenError):
    """A lane ended under a job (its process died, its node was lost): the job's verdict is
    unknown, and the fault is kgen's or the machine's, never the candidate's."""


class LaneStopped(LaneLost):
    """kgen itself ended the lane (Ctrl-C, its exit): no verdict, and nothing to try again."""


class Executor(ABC):
    """Runs evaluation jobs on some lanes and says where each ran (``EvalResult.placement``)."""

    #: the name a person chooses it by (``--executor``)
    name: str

    @abstractmethod
    def lanes(self) -> list[Placement]:
        """The lanes jobs run on now (one per GPU; one CPU lane without a GPU)."""

    @abstractmethod
    def capacity(self) -> int:
        """Jobs it runs at once, over every lane."""

    @abstractmethod
    def evaluate(self, jobs: Sequence[EvalJob], *, on_result: OnResult | None = None, stop: Stop | None = None,
                 on_start: OnStart | None = None, together: bool | None = None) -> list[EvalResult]:
        """Every job's result in the order given. ``on_result(index, result)`` hears each as
        soon as it is known; ``stop()`` is asked before each job starts, and once it says yes
        no more start (those are left out of the list); ``on_start(index)`` hears each begin.
        ``together``: several jobs at once on a device, each timed alone in its turn (None:
        when two or more are timed on a GPU). A usage error (unknown problem, missing file)
        raises as ``evaluate`` raises it."""

    @abstractmethod
    def close(self) -> None:
        """End every lane and what runs on it (Ctrl-C, the end of the process)."""

    def describe(self) -> str:
        """"4 GPUs on 1 host (executor local)": where the jobs go."""
        lanes = self.lanes()
        gpus = sum(1 for p in lanes if p.gpu_index is not None)
        where = counted(gpus, "GPU") if gpus else counted(len(lanes), "CPU lane")
        return f"{where} on {counted(len({p.host for p in lanes}), 'host')} (executor {self.name})"

    def batch_line(self, jobs: int) -> str:
        """The progress line of a batch run side by side."""
        at_once = f"{min(self.capacity(), jobs)} at a time"
        if len(self.lanes()) == 1:
            return f"evaluating {counted(jobs, 'candidate')}, {at_once}, each timed alone on the GPU"
        return f"evaluating {counted(jobs, 'candidate')}, {at_once} on {self.describe()}, each timed alone on its GPU"
