"""Warm verifier processes: a spare child started ahead of need, so the next evaluation skips
the child's start-up (importing torch and triton, and on a GPU creating the CUDA context).

A spare is started exactly as a cold child is (``box.start_boxed``: the same scrubbed
environment, resource limits, network namespace and a box directory of its own), but with
``--wait``: it does the start-up work, then reads one JSON line from stdin carrying its real
arguments and runs as a cold child would. The evaluation that takes it copies the candidate
into the spare's box first; nothing of the candidate exists when the spare starts, so a
spare carries nothing from one candidate to the next (each spare serves one evaluation).

Spares are kept per :class:`WorkerSpec` key: the module, device, backend, the environment
the child would see and the limits fixed at start. A spare whose key differs from what a
cold child would get now (an environment variable changed, other limits) is never used.

Spares are started from one long-lived thread: Linux's parent-death signal fires when the
*thread* that forked the child ends, so a spare started from a short-lived worker thread
would be killed with it. Spares are registered with ``lifecycle`` like every boxed
child (a signal to kgen, or kgen's death, ends them) and removed, directory included, at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from kgen.backends.device import Device
from kgen.backends.registry import backend_info, get_backend
from kgen.evals.problem.memory_plan import warm_meta
from kgen.evals.sandbox.box import READY_FILE, SandboxLimits, Spare, child_environment, start_boxed
from kgen.evals.sandbox.scratch import new_workdir

#: Kinds of spare kept at once (a kind is a :class:`WorkerSpec` key); a new kind ends the oldest.
MAX_KINDS = 2
#: Spares kept of one kind: a batch uses one per verifier it runs at once (``evals/batch.py``).
MAX_PER_KIND = 8
#: The flag that makes the verifier child wait for its arguments on stdin.
WAIT_FLAG = "--wait"
#: Environment entries that name the spare's own box: not part of what makes two spares alike.
_BOX_ENTRIES = ("HOME", "TMPDIR")
#: How long ``take`` waits for a spare whose start was asked for but has not happened yet.
PENDING_START_WAIT_S = 30.0


class WorkerSpec(BaseModel):
    """Everything a spare must share with the cold child it stands in for."""

    model_config = ConfigDict(frozen=True)

    module: str = "kgen.evals.verifier.child"
    device: Device
    backend: str
    extra_env: dict[str, str] = Field(default_factory=dict)
    limits: SandboxLimits = Field(default_factory=SandboxLimits)

    def key(self) -> tuple:
        """The environment is read now: a spare started under another environment differs.

        The timeout and output tail are applied by the parent after the hand-over, so they
        are not part of the key; every limit fixed at the child's start is."""
        env = child_environment(Path("."), self.extra_env)
        environment = tuple(sorted((k, v) for k, v in env.items() if k not in _BOX_ENTRIES))
        fixed = self.limits.model_dump(exclude={"timeout_s", "output_tail_bytes"})
        return (self.module, self.device, self.backend, environment, tuple(sorted(fixed.items())))

    def wait_args(self) -> list[str]:
        return [WAIT_FLAG, self.device.value, self.backend]


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[tuple, list[Spare]] = {}
        self._pending: dict[tuple, list[Future]] = {}
        self._requests: queue.Queue[tuple[WorkerSpec, tuple, Future]] = queue.Queue()
        self._starter: threading.Thread | None = None

    def prestart(self, spec: WorkerSpec, count: int = 1) -> None:
        """Ask for ``count`` spares matching ``spec`` (up to :data:`MAX_PER_KIND`), counting
        those kept and those being started."""
        key = spec.key()
        futures: list[Future] = []
        with self._lock:
            have = len(self._spares.get(key, [])) + len(self._pending.get(key, []))
            for _ in range(max(0, min(count, MAX_PER_KIND) - have)):
                future: Future = Future()
                self._pending.setdefault(key, []).append(future)
                futures.append(future)
            if futures and self._starter is None:
                self._starter = threading.Thread(target=self._serve, name="kgen-spare-starter", daemon=True)
                self._starter.start()
                atexit.register(self.close)
        for future in futures:
            self._requests.put((spec, key, future))

    def take(self, spec: WorkerSpec) -> Spare | None:
        """A spare matching ``spec`` now, alive (waiting for one being started); None when
        there is none (start cold)."""
        key = spec.key()
        while True:
            with self._lock:
                kept = self._spares.get(key, [])
                spare = kept.pop(0) if kept else None
                pending = (self._pending.get(key) or [None])[0] if spare is None else None
            if spare is not None:
                if spare.alive():
                    return spare
                spare.discard()
                continue
            if pending is None:
                return None
            try:
                pending.result(timeout=PENDING_START_WAIT_S)
            except Exception:  # noqa: BLE001 - a spare that failed to start only means a cold start
                return None

    def trim(self, spec: WorkerSpec, keep: int) -> None:
        """End all but ``keep`` spares of ``spec``'s kind (the oldest are kept: most ready);
        starts asked for are waited for first (a start is a fork, not the start-up)."""
        key = spec.key()
        with self._lock:
            pending = list(self._pending.get(key, []))
        for future in pending:
            try:
                future.result(timeout=PENDING_START_WAIT_S)
            except BaseException:  # noqa: BLE001 - it failed to start (kgen stopping too): nothing to trim
                pass
        with self._lock:
            kept = self._spares.get(key, [])
            extra, self._spares[key] = kept[keep:], kept[:keep]
        for spare in extra:
            spare.discard()

    def wait_ready(self, spec: WorkerSpec, timeout_s: float) -> int:
        """Wait until every spare of ``spec``'s kind has finished starting (or died), up to
        ``timeout_s``: a spare still importing torch or making its CUDA context beside a timed
        run would disturb what is measured. Returns how many are ready."""
        import time

        key = spec.key()
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                pending = list(self._pending.get(key, []))
                kept = list(self._spares.get(key, []))
            starting = [s for s in kept if s.alive() and not s.ready()]
            if (not pending and not starting) or time.monotonic() > deadline:
                return sum(1 for s in kept if s.alive() and s.ready())
            time.sleep(0.05)

    def close(self) -> None:
        """End every spare and remove its directory (at exit, or when asked); starts under way
        are waited for and ended too."""
        while True:
            with self._lock:
                spares = [s for kept in self._spares.values() for s in kept]
                self._spares.clear()
                pending = [f for futures in self._pending.values() for f in futures]
            for spare in spares:
                spare.discard()
            if not pending:
                return
            for future in pending:
                try:
                    future.result(timeout=PENDING_START_WAIT_S)
                except BaseException:  # noqa: BLE001 - it failed to start (kgen stopping too): nothing to end
                    pass

    def spares(self) -> list[Spare]:
        with self._lock:
            return [s for kept in self._spares.values() for s in kept]

    def _resolve(self, key: tuple, future: Future) -> None:
        futures = self._pending.get(key, [])
        if future in futures:
            futures.remove(future)
        if not futures:
            self._pending.pop(key, None)

    def _serve(self) -> None:
        while True:
            spec, key, future = self._requests.get()
            try:
                spare = self._start(spec, key)
            # reported through the future (take() starts cold); BaseException: a start refused
            # because kgen is stopping must still end the future that close() waits on
            except BaseException as exc:  # noqa: BLE001
                with self._lock:
                    self._resolve(key, future)
                future.set_exception(exc)
                continue
            with self._lock:
                self._resolve(key, future)
                self._spares[key] = [*self._spares.pop(key, []), spare]  # the newest kind last
                evicted = [s for k in list(self._spares)[:-MAX_KINDS] for s in self._spares.pop(k)]
            for old in evicted:
                old.discard()
            future.set_result(None)

    @staticmethod
    def _start(spec: WorkerSpec, key: tuple) -> Spare:
        workdir = new_workdir()
        try:
            proc, isolated = start_boxed(
                spec.module, spec.wait_args(), spec.limits, workdir / "box", spec.extra_env, stdin=subprocess.PIPE
            )
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return Spare(key=key, proc=proc, workdir=workdir, network_isolated=isolated)


_POOL = _Pool()


def prestart(spec: WorkerSpec, count: int = 1) -> None:
    """Start spares for ``spec`` in the background (``count`` in all), for the next evaluations to take."""
    _POOL.prestart(spec, count)


def trim(spec: WorkerSpec, keep: int) -> None:
    """End all but ``keep`` spares of ``spec``'s kind."""
    _POOL.trim(spec, keep)


def wait_ready(spec: WorkerSpec, timeout_s: float) -> int:
    """Wait for the spares of ``spec``'s kind to finish starting; how many are ready."""
    return _POOL.wait_ready(spec, timeout_s)


def starts_during_run(spec: WorkerSpec, timed: bool, turns: bool = False) -> bool:
    """Whether the next spare starts while the current candidate runs, or only after it.

    A spare starting up imports torch and triton (CPU-heavy) and, on a GPU, creates a CUDA
    context (device memory the run's memory plan counted as free): beside a timed run or a GPU
    run it would perturb what is measured or judged. A CPU run times nothing, so overlapping
    hides the whole start-up even when evaluations follow each other with no pause. A run
    that takes turns on the GPU (``gpu_turns.py``) shares it with other verifiers by design and
    is timed with every other process stopped, a spare starting up included."""
    return turns or (not timed and not spec.device.is_gpu)


def take(spec: WorkerSpec) -> Spare | None:
    """A spare started for the same kind of child, or None."""
    return _POOL.take(spec)


def close() -> None:
    """End all spares now (they are also ended at exit and by the signal handlers)."""
    _POOL.close()


def spares() -> list[Spare]:
    """The spares kept now (for diagnostics and tests)."""
    return _POOL.spares()


# ----------------------------------------------------------------------------------------
# Child side: start up, then wait for the arguments
# ----------------------------------------------------------------------------------------


def wait_for_arguments(wait_args: Sequence[str], stdin=None) -> list[str] | None:
    """In the spare: do the start-up a cold child would do first, then read its arguments.

    ``wait_args`` is ``[device, backend]``. The backend prepares the process before anything
    imports triton (on the CPU the interpreter is chosen at import). None when kgen closed
    stdin without a request (the spare was discarded)."""
    device, backend = Device(wait_args[0]), wait_args[1]
    import importlib

    get_backend(backend).prepare_process(device)
    import torch

    for toolchain in backend_info(backend).requires:
        importlib.import_module(toolchain)  # the same first-import work the cold child does
    if device.is_gpu:
        torch.cuda.init()  # the driver and torch's CUDA state; no context is made yet
        torch.cuda.synchronize(device.value)  # the device's primary context, which the run reuses
    import torch._dynamo  # noqa: F401 - the first op under kgen's torch-op recorder imports it (1-4 s)

    warm_meta()  # the memory plan's first meta forward (seconds in a fresh process)
    Path(READY_FILE).write_text("")  # in the box (the cwd): start-up done, only waiting now
    stdin = sys.stdin if stdin is None else stdin
    line = stdin.readline()
    _detach_stdin()
    if not line.strip():
        return None
    return [str(a) for a in json.loads(line)["args"]]


def _detach_stdin() -> None:
    """As a cold child: stdin is /dev/null once the arguments are read."""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError:
        pass
