"""The executor a kgen process evaluates with: chosen once, opened on first use, closed at exit.

A command (`kgen run`, `kgen solve`, `kgen bench`, ``kgen.generate``) says which executor
its evaluations use with :func:`choose`; the evaluations themselves (a search's batch, the
self-test) ask :func:`executor_for` and get the one open executor for their device. Lanes
are expensive to start (a process or an actor per GPU, each loading torch), so they live as
long as the process and serve every problem of a suite.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from kgen.backends.device import Device, resolve_device
from kgen.evals.executors.interface import Executor
from kgen.evals.harness import EvalOptions
from kgen.evals.result import EvalResult

ExecutorName = Literal["local", "ray"]


class ExecutorChoice(BaseModel):
    """Which executor, and what it may use: the ``executor``, ``ray_address`` and ``gpus``
    options (``kgen.core.option_table``)."""

    executor: ExecutorName = "local"
    #: the Ray cluster: "auto" (RAY_ADDRESS, else a cluster started on this machine), or HOST:PORT / ray://HOST:PORT
    ray_address: str | None = None
    #: how many GPUs (a lane each); None: every one the executor finds
    gpus: int | None = Field(default=None, ge=1)

    @classmethod
    def of(cls, options: object) -> ExecutorChoice:
        """The choice a run's options, the settings or a command's parsed flags (a mapping)
        hold, under the options' own names."""
        if isinstance(options, Mapping):
            return cls(**{name: options[name] for name in cls.model_fields if name in options})
        return cls(**{name: getattr(options, name) for name in cls.model_fields if hasattr(options, name)})


_lock = threading.RLock()
_choice = ExecutorChoice()
_open: dict[tuple, Executor] = {}
_say: Callable[[str], None] | None = None


def choose(choice: ExecutorChoice, say: Callable[[str], None] | None = None) -> None:
    """The executor this process's evaluations use from now on (an open one of another
    choice is closed). ``say`` hears lane events (a lost lane, a retry)."""
    global _choice, _say
    with _lock:
        if choice != _choice:
            close_all()
        _choice, _say = choice, say


def preflight(choice: ExecutorChoice) -> None:
    """What can be said wrong about ``choice`` before any work starts: Ray missing, its cluster
    unreachable (a usage error, in seconds rather than after the run has begun)."""
    if choice.executor == "ray":
        from kgen.evals.executors.ray_lanes import connect

        connect(choice.ray_address)


def chosen() -> ExecutorChoice:
    return _choice


def executor_for(device: Device, targets: Sequence[str] = ()) -> Executor:
    """The open executor for ``device`` (and, on Ray, the first target's GPU model), opened
    now if it is not."""
    with _lock:
        key = (_choice.model_dump_json(), device, tuple(targets[:1]) if _choice.executor == "ray" else ())
        if key not in _open:
            _open[key] = _open_executor(_choice, device, targets)
        return _open[key]


def evaluate_one(problem: str | Path, candidate: str | Path, options: EvalOptions) -> EvalResult:
    """``harness.evaluate``'s signature, run on the process's executor: one evaluation (a
    winner's full-size verification) goes where the batches go, and beside them when its
    options ask for turns."""
    from kgen.evals.executors.jobs import EvalJob

    device = resolve_device(options.device)
    options = options.model_copy(update={"device": device})
    results = executor_for(device, options.targets).evaluate([EvalJob.of(problem, candidate, options)],
                                                             together=False)
    return results[0]


def _open_executor(choice: ExecutorChoice, device: Device, targets: Sequence[str]) -> Executor:
    say = _say or (lambda line: None)
    if choice.executor == "ray":
        from kgen.evals.executors.ray_lanes import RayExecutor

        return RayExecutor(device, choice.ray_address, targets=targets, gpus=choice.gpus, say=say)
    from kgen.evals.executors.local import LocalExecutor

    return LocalExecutor(device, gpus=choice.gpus, say=say)


def close_all() -> None:
    """End every open executor's lanes (the process ends, or another executor is chosen)."""
    with _lock:
        executors = list(_open.values())
        _open.clear()
    for executor in executors:
        executor.close()


atexit.register(close_all)
