"""The local executor: every GPU of this host, a lane each.

With one GPU (or none) the lane is the caller's own process, exactly as kgen ran before
there were executors: no extra process, no extra start-up. With two or more, each GPU gets
a lane process (``lane_process.py``) that sees only its card (``CUDA_VISIBLE_DEVICES``),
keeps its own warm verifiers and gives each verified candidate its turn alone on that card;
the jobs of every caller are spread over them by ``dispatch.py``, which replaces a lane
process that dies and tries its job once more elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from kgen.backends.device import Device
from kgen.errors import KgenError, KgenUsageError
from kgen.evals.executors.dispatch import LaneDispatcher, LaneHandle
from kgen.evals.executors.interface import Executor, LaneLost, LaneStopped, OnResult, OnStart, Stop
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.lane import LaneRunner, default_slots, result_of, side_by_side
from kgen.evals.executors.lane_process import READY
from kgen.evals.placement import Placement, host_name, visible_gpu_indices
from kgen.evals.result import EvalResult
from kgen.evals.sandbox import lifecycle
from kgen.evals.sandbox.box import signal_name

#: seconds a lane process may take to import torch and kgen and say it is ready
LANE_START_TIMEOUT_S = 120.0


def lane_gpus(device: Device, gpus: int | None) -> list[int]:
    """The GPU indices to give a lane each: every visible one, or the first ``gpus``."""
    if not device.is_gpu:
        return []
    visible = visible_gpu_indices()
    if gpus is not None and gpus > len(visible):
        raise KgenUsageError(f"--gpus {gpus}: this host shows {len(visible)} GPU(s) "
                             f"({', '.join(map(str, visible)) or 'none'})")
    return visible[:gpus] if gpus is not None else visible


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, device: Device, gpus: int | None = None, slots: int | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.device = device
        indices = lane_gpus(device, gpus)
        self._slots = slots or default_slots(device, max(1, len(indices)))
        self._dispatcher: LaneDispatcher | None = None
        self._own: LaneRunner | None = None
        if len(indices) >= 2:
            self._dispatcher = LaneDispatcher(lambda i: ProcessLane(indices[i], self._slots), len(indices), say=say)
        else:
            index = indices[0] if indices else None
            lane = f"gpu{index}" if index is not None else "cpu0"
            self._own = LaneRunner(Placement(host=host_name(), lane=lane, gpu_index=index), self._slots,
                                   shares_files=True)

    def lanes(self) -> list[Placement]:
        if self._dispatcher is not None:
            return self._dispatcher.lanes()
        return [self._own.placement]

    def handles(self) -> list[LaneHandle]:
        """The lane processes now (none when the lane is this process)."""
        return self._dispatcher.handles() if self._dispatcher is not None else []

    def capacity(self) -> int:
        return self._dispatcher.capacity() if self._dispatcher is not None else self._slots

    def evaluate(self, jobs: Sequence[EvalJob], *, on_result: OnResult | None = None, stop: Stop | None = None,
                 on_start: OnStart | None = None, together: bool | None = None) -> list[EvalResult]:
        on_result = on_result or (lambda index, result: None)
        stop = stop or (lambda: False)
        on_start = on_start or (lambda index: None)
        if together is None:
            together = bool(jobs) and side_by_side(jobs[0].options, len(jobs), self.device)
        if self._dispatcher is not None:
            return self._dispatcher.evaluate(jobs, on_result, stop, on_start, together=together)
        return run_in_process(self._own, jobs, on_result, stop, on_start, together)

    def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.close()
        if self._own is not None:
            self._own.close()


def run_in_process(runner: LaneRunner, jobs: Sequence[EvalJob], on_result: OnResult, stop: Stop,
                   on_start: OnStart, together: bool) -> list[EvalResult]:
    """The caller's own process as the lane: one job after another, or ``slots`` side by side
    with turns when ``together``."""
    results: list[EvalResult | None] = [None] * len(jobs)

    def one(index: int) -> None:
        if stop():
            return
        on_start(index)
        result = runner.run(jobs[index], together=together)
        results[index] = result
        on_result(index, result)

    if not together:
        for index in range(len(jobs)):
            if stop():
                break
            one(index)
    else:
        with ThreadPoolExecutor(max_workers=min(runner.slots, len(jobs)), thread_name_prefix="kgen-verify") as pool:
            for future in [pool.submit(one, index) for index in range(len(jobs))]:
                future.result()  # a usage error raises here, as it would one by one
    return [r for r in results if r is not None]


class ProcessLane(LaneHandle):
    """A lane process on one GPU of this host, and the thread that reads its replies."""

    def __init__(self, index: int, slots: int, gpu: bool = True) -> None:
        """Lane ``gpu<index>`` on that card, or with ``gpu=False`` CPU lane ``cpu<index>``
        (tests: the whole lane machinery without a GPU)."""
        self.slots = slots
        name = f"{'gpu' if gpu else 'cpu'}{index}"
        self._log = Path(tempfile.mkstemp(prefix=f"kgen-lane-{name}-", suffix=".log")[1])
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(index) if gpu else ""}
        parent = os.getpid()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kgen.evals.executors.lane_process", "--lane", name,
             *(["--gpu-index", str(index)] if gpu else []), "--slots", str(slots), "--parent", str(parent)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=(log := self._log.open("wb")), env=env,
            # no parent-death signal: Linux sends it when the *thread* that started the child
            # ends, and lanes are started from short-lived threads; the lane's watchdog polls
            # for its parent instead (``lifecycle.start_parent_watchdog``)
            start_new_session=True, text=True,
        )
        log.close()  # the lane writes it; this process only reads its tail
        lifecycle.register(self._proc.pid, f"kgen lane {name} (pid {self._proc.pid})")
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._next = 0
        self._lost: str | None = None
        ready: Future = Future()
        self._reader = threading.Thread(target=self._read, args=(ready,), daemon=True, name=f"kgen-lane-{name}")
        self._reader.start()
        try:
            self.placement = Placement.model_validate(ready.result(timeout=LANE_START_TIMEOUT_S))
        except Exception as exc:
            self.close()
            raise KgenError(f"lane {name}'s process did not start: {exc}; its log: {self.log_tail()}") from exc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def run(self, job: EvalJob, *, together: bool) -> EvalResult:
        future: Future = Future()
        with self._lock:
            if self._lost is not None:
                raise LaneLost(self._lost)
            ident, self._next = self._next, self._next + 1
            self._pending[ident] = future
            try:
                self._proc.stdin.write(json.dumps({"id": ident, "together": together,
                                                   "job": job.model_dump(mode="json")}) + "\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self._pending.pop(ident, None)
                raise LaneLost(f"its process no longer reads jobs ({exc})") from exc
        return result_of(future.result(), job, self.placement)

    def _read(self, ready: Future) -> None:
        for line in self._proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if READY in message:
                ready.set_result(message[READY])
                continue
            with self._lock:
                future = self._pending.pop(message.get("id"), None)
            if future is not None:
                future.set_result(message)
        code = self._proc.wait()
        stopped = lifecycle.stopped_by(self._proc.pid)  # kgen's own stop ended it (Ctrl-C, exit)
        why = stopped or (f"its process ended ({_exit_words(code)})" + (f": {tail}" if (tail := self.log_tail()) else ""))
        with self._lock:
            self._lost = why
            pending, self._pending = list(self._pending.values()), {}
        if not ready.done():
            ready.set_exception(RuntimeError(why))
        for future in pending:
            future.set_exception(LaneStopped(why) if stopped else LaneLost(why))

    def log_tail(self, limit: int = 400) -> str:
        try:
            text = self._log.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        lines = [line for line in text.splitlines() if line.strip()]
        return (lines[-1] if lines else "")[:limit]

    def close(self) -> None:
        with self._lock:
            self._lost = self._lost or "closed by kgen"
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)  # its handlers end its verifiers
                self._proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        lifecycle.unregister(self._proc.pid)
        self._log.unlink(missing_ok=True)


def _exit_words(code: int) -> str:
    name = signal_name(code)
    return f"killed by {name}" if name else f"exit code {code}"
