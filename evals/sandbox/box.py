"""A box for untrusted candidate code: a child process that can only cost itself.

The child gets a hard wall-clock timeout (its whole process group is killed),
a registration that ends it with kgen (``lifecycle.py``: signal handlers, a
parent-death signal and a watchdog), an environment built from an allow-list with anything that looks like a
credential removed, a fresh temporary working directory as its HOME and
TMPDIR, resource limits (no core dumps, bounded file size, bounded address
space on CPU runs) and, where the OS allows an unprivileged or root
``unshare -n``, a network namespace with no interfaces at all.

A child may also be started ahead of need (``worker_pool.py`` keeps them): it is boxed
exactly as a cold one (same environment, limits and box directory) and only waits for its
arguments; :class:`Spare` is such a child, which :func:`run_python_module` can be handed.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from kgen.evals.sandbox import gpu_turns
from kgen.evals.sandbox.lifecycle import (
    PARENT_PID_ENV,
    die_with_parent,
    raise_if_ending,
    register,
    stopped_by,
    unregister,
)

#: Environment variables a candidate may see (prefixes end in "_").
ENV_ALLOW = (
    "PATH", "LANG", "LANGUAGE", "TERM", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME",
    "VIRTUAL_ENV", "CONDA_PREFIX", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_", "CUTE_", "KGEN_",
)
#: Names that look like credentials are dropped even when allowed above.
SECRET_PATTERN = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)

#: The file a spare writes in its box once its start-up is done and it only waits.
READY_FILE = ".kgen-spare-ready"


class SandboxLimits(BaseModel):
    timeout_s: float = 300.0
    #: bytes kept from each of stdout and stderr (the rest is read from disk, never held)
    output_tail_bytes: int = 4000
    #: the largest file the child may write (stdout and stderr are files too)
    max_file_bytes: int = 64 * 1024 * 1024
    #: address-space cap; None where CUDA's large virtual mappings make it unusable
    max_address_space_bytes: int | None = None
    isolate_network: bool = True


class SandboxOutcome(BaseModel):
    returncode: int | None
    timed_out: bool
    signal_name: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    seconds: float
    network_isolated: bool
    workdir: str
    #: the child was a spare started ahead of need (its imports were done before the request)
    prestarted: bool = False
    #: seconds of ``seconds`` the child spent stopped for other verifiers' turns on the GPU
    #: or waiting for its own (``gpu_turns.py``): not counted against its time limit
    paused_s: float = 0.0
    #: kgen ended the child itself because kgen was stopping (a signal to kgen, its exit):
    #: the child's death says nothing about the candidate
    stopped_by: str | None = None


def scrubbed_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    base = os.environ if base is None else base
    env = {}
    for name, value in base.items():
        allowed = any(name == a or (a.endswith("_") and name.startswith(a)) for a in ENV_ALLOW)
        if allowed and not SECRET_PATTERN.search(name):
            env[name] = value
    return env


@lru_cache(maxsize=1)
def network_isolation_prefix() -> tuple[str, ...]:
    """``unshare -n`` if it works here (it needs root or user namespaces), else nothing."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    try:
        probe = subprocess.run([unshare, "-n", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ()
    return (unshare, "-n") if probe.returncode == 0 else ()


def _limit_resources(limits: SandboxLimits, parent_pid: int) -> None:
    """Runs in the child between fork and exec."""
    die_with_parent(parent_pid)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
    if limits.max_address_space_bytes:
        cap = limits.max_address_space_bytes
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _tail(path: Path, limit: int) -> tuple[str, int]:
    size = path.stat().st_size if path.exists() else 0
    if size == 0:
        return "", 0
    with path.open("rb") as fh:
        fh.seek(max(0, size - limit))
        text = fh.read().decode("utf-8", errors="replace")
    return (("…" + text) if size > limit else text), size


def signal_name(returncode: int | None) -> str | None:
    """The signal that ended a process, by its return code (None: it exited)."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def child_environment(workdir: Path, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a boxed child sees: the allow-list, the box as HOME and TMPDIR, and kgen's pid."""
    env = scrubbed_environment()
    # No bytecode caches: the candidate's first `import triton` must not write into site-packages.
    env.update({"HOME": str(workdir), "TMPDIR": str(workdir), "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra_env or {})
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


def start_boxed(
    module: str,
    args: Sequence[str],
    limits: SandboxLimits,
    workdir: Path,
    extra_env: Mapping[str, str] | None = None,
    stdin: int | IO | None = subprocess.DEVNULL,
) -> tuple[subprocess.Popen, bool]:
    """Start ``python -m module args...`` in the box ``workdir``, registered to die with kgen.

    The one place a boxed child is started, cold or spare. Returns the process and whether
    its network is isolated. Its stdout and stderr go to files in the box."""
    raise_if_ending()  # kgen is stopping: no new verifier
    workdir.mkdir(parents=True, exist_ok=True)
    env = child_environment(workdir, extra_env)
    parent_pid = os.getpid()
    prefix = network_isolation_prefix() if limits.isolate_network else ()
    argv = [*prefix, sys.executable, "-m", module, *args]
    with (workdir / "stdout.txt").open("wb") as out, (workdir / "stderr.txt").open("wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            stdin=stdin,
            stdout=out,
            stderr=err,
            start_new_session=True,  # its own process group: a timeout kills its children too
            preexec_fn=lambda: _limit_resources(limits, parent_pid),
        )
    register(proc.pid, f"{module} (pid {proc.pid})")
    return proc, bool(prefix)


def run_python_module(
    module: str,
    args: Sequence[str],
    limits: SandboxLimits,
    extra_env: Mapping[str, str] | None = None,
    workdir: Path | None = None,
    spare: Spare | None = None,
    turn_dir: Path | None = None,
) -> SandboxOutcome:
    """Run ``python -m module args...`` in the box and wait for it (or kill it).

    ``spare``: a child of the same kind already started in ``workdir`` (``worker_pool.take``);
    it is handed ``args`` instead of starting a cold one, unless it has died meanwhile.
    ``turn_dir``: where the child asks for turns alone on the GPU (``gpu_turns.py``); the
    seconds it spends stopped for others' turns or waiting for its own are not counted
    against ``limits.timeout_s``."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="kgen-box-"))
    start = time.monotonic()
    proc = spare.hand_over(args) if spare is not None and spare.box == workdir else None
    prestarted = proc is not None
    if proc is not None:
        network_isolated = spare.network_isolated
    else:
        if spare is not None:
            spare.discard(remove_dir=False)  # its box is this run's box: the cold child reuses it
        proc, network_isolated = start_boxed(module, args, limits, workdir, extra_env)
    watch = gpu_turns.watch_turn(turn_dir, proc.pid)
    try:
        timed_out = _wait(proc, limits.timeout_s, start, watch)
    finally:
        # after a timeout, an exit (its children left behind) or an interrupt of kgen itself
        if watch is not None:
            watch.release()
        kill_group(proc)
        excluded = watch.excluded_seconds() if watch is not None else gpu_turns.paused_seconds(proc.pid)
        gpu_turns.forget(proc.pid)
    raise_if_ending()  # a child cut short by kgen's own stop is no verdict on the candidate
    stopped = stopped_by(proc.pid) if proc.returncode == -signal.SIGKILL else None  # else it ended first
    stdout_tail, stdout_bytes = _tail(workdir / "stdout.txt", limits.output_tail_bytes)
    stderr_tail, stderr_bytes = _tail(workdir / "stderr.txt", limits.output_tail_bytes)
    return SandboxOutcome(
        returncode=proc.returncode,
        timed_out=timed_out,
        signal_name=None if timed_out else signal_name(proc.returncode),
        stdout_tail=stdout_tail,
        stderr_tail=stderr_tail,
        stdout_bytes=stdout_bytes,
        stderr_bytes=stderr_bytes,
        seconds=time.monotonic() - start,
        paused_s=round(excluded, 3),
        network_isolated=network_isolated,
        workdir=str(workdir),
        prestarted=prestarted,
        stopped_by=stopped,
    )


#: How often the parent looks at a child that may ask for a turn on the GPU...
TURN_POLL_S = 0.005
#: ...and at one that may not (only to see whether its time limit, less its pauses, ran out).
IDLE_POLL_S = 0.05


def _wait(proc: subprocess.Popen, timeout_s: float, start: float, watch: gpu_turns.TurnWatch | None) -> bool:
    """Wait for the child to end; True when its time limit ran out first. The limit counts
    only the seconds the child could run: not those it was stopped for another verifier's
    turn on the GPU, nor those it waited for its own (``gpu_turns.py``)."""
    poll_s = TURN_POLL_S if watch is not None else IDLE_POLL_S
    while True:
        try:
            proc.wait(timeout=poll_s)
            if watch is not None:
                watch.poll(alive=False)
            return False
        except subprocess.TimeoutExpired:
            if watch is not None:
                watch.poll(alive=True)
        excluded = watch.excluded_seconds() if watch is not None else gpu_turns.paused_seconds(proc.pid)
        if time.monotonic() - start - excluded > timeout_s:
            return True


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group, reap it, and forget it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    unregister(proc.pid)


@dataclass
class Spare:
    """A started child waiting for its arguments; ``workdir/box`` is its HOME, TMPDIR and cwd."""

    key: tuple
    proc: subprocess.Popen
    workdir: Path
    network_isolated: bool

    @property
    def box(self) -> Path:
        return self.workdir / "box"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        """Its start-up (imports, CUDA context) is done: it uses no CPU or GPU until handed a run."""
        return (self.box / READY_FILE).exists()

    def hand_over(self, args: Sequence[str]) -> subprocess.Popen | None:
        """Give the waiting child its arguments; None (and the spare ended) if it already died."""
        if not self.alive():
            self.discard(remove_dir=False)
            return None
        try:
            self.proc.stdin.write((json.dumps({"args": list(args)}) + "\n").encode())
            self.proc.stdin.close()  # the candidate reads nothing more from kgen
        except (BrokenPipeError, OSError, ValueError):
            self.discard(remove_dir=False)
            return None
        return self.proc

    def discard(self, remove_dir: bool = True) -> None:
        """End the spare's process group (and, unless its box is in use, remove its directory)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        kill_group(self.proc)
        if remove_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
