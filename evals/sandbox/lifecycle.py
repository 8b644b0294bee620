"""Nothing left behind: a verifier child never outlives the kgen process that started it.

The sandbox starts each child in a session of its own (so a timeout can kill the child's
whole process group), which also means a signal to kgen's own process group never reaches
it. Without the three guards below, ``kill -TERM`` on ``kgen eval`` (or Ctrl-C on an agent
run) left the child running, holding the GPU memory it had allocated; a hung candidate left
that way ran forever.

* **Registry and handlers** (parent side): every live sandbox process group is registered;
  SIGTERM, SIGINT and SIGHUP to kgen kill each registered group before kgen itself stops
  (then chain: SIGINT becomes ``KeyboardInterrupt`` as before, SIGTERM/SIGHUP call the
  previous handler or exit with 128 + the signal number). ``atexit`` does the same for a
  normal exit with something still registered. Python runs a handler wherever the main
  thread is, and some places (a weakref callback inside an import, a ``__del__``) print its
  exception and go on: seen here, a Ctrl-C that kgen then ignored while it verified every
  remaining candidate. So an ending signal is also remembered: no verifier starts after it
  (one registered after it is killed at once), and :func:`raise_if_ending` raises it again
  where kgen is about to start more work. Python would print the swallowed exception as
  "Exception ignored ... Traceback"; that is kgen's own stop going on as designed, not an
  error, so the unraisable hook leaves it unprinted. Two places where raising does harm are
  known and avoided (the exception then comes at the next checkpoint):

  - a child process being started (seen in CI: the handler ran at the entry of logging's
    after-fork hook, so the hook never ran and logging's lock stayed taken); the child,
    registered after the signal, is killed at once;
  - code run by ``exec`` or ``eval`` of a string (seen in about one Ctrl-C in four during
    an evaluation: dataclasses builds methods that way while torch imports a module). A
    KeyboardInterrupt that leaves such code marks the process as ended by an unhandled
    Ctrl-C, and CPython then kills it with SIGINT at exit, whatever exit code kgen asked
    for, after kgen had handled the interrupt and said how to resume.
* **Parent-death signal** (child side, Linux): ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` between
  fork and exec, so even ``kill -KILL`` on kgen, where no handler runs, takes the child down.
* **Watchdog** (child side, any OS): a daemon thread polls the parent pid and kills the
  child's own process group (grandchildren included) when the parent is gone.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

#: Linux prctl option: the signal the kernel sends this process when its parent thread dies.
PR_SET_PDEATHSIG = 1
#: How often the child's watchdog checks that its parent is still there.
WATCHDOG_INTERVAL_S = 0.5
#: Signals that end kgen and, first, its children.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Environment variable carrying the parent's pid to the child's watchdog.
PARENT_PID_ENV = "KGEN_PARENT_PID"

# re-entrant: the signal handler takes it in the main thread, perhaps while that thread holds it
_lock = threading.RLock()
_groups: dict[int, str] = {}  # process-group id -> what it is, for the message
_stopped: dict[int, str] = {}  # process-group id -> why kgen itself ended it (kgen's own stop)
_installed = False
_previous: dict[int, object] = {}
_ending: int | None = None  # the signal that is ending kgen, once one is
_previous_unraisablehook = sys.unraisablehook


# ----------------------------------------------------------------------------------------
# Parent side: the registry of live children, and the handlers that end them
# ----------------------------------------------------------------------------------------


def register(pgid: int, what: str) -> None:
    """A sandbox child's process group is alive and must not outlive kgen."""
    with _lock:
        _stopped.pop(pgid, None)  # a reused pid: nothing of an earlier child's end applies
        _groups[pgid] = what
    if _ending is not None:  # started as kgen was told to stop: it ends with the others
        kill_registered(_received(_ending))


def unregister(pgid: int) -> None:
    with _lock:
        _groups.pop(pgid, None)


def live_groups() -> dict[int, str]:
    with _lock:
        return dict(_groups)


def kill_registered(why: str = "kgen exited") -> list[str]:
    """SIGKILL every registered process group; what was stopped, for the message.

    ``why`` is remembered per group: a child killed here died of kgen's own stop, and the
    thread still waiting on it must say so (``stopped_by``) instead of judging the candidate."""
    with _lock:
        groups = dict(_groups)
        _groups.clear()
        _stopped.update(dict.fromkeys(groups, why))
    stopped = []
    for pgid, what in groups.items():
        try:
            os.killpg(pgid, signal.SIGKILL)
            stopped.append(what)
        except (ProcessLookupError, PermissionError):
            continue
    return stopped


def stopped_by(pgid: int) -> str | None:
    """Why kgen ended this child's group itself (a signal to kgen, its exit), or None."""
    with _lock:
        return _stopped.pop(pgid, None)


def _received(signum: int) -> str:
    """Why kgen ended its children on a signal, as ``stopped_by`` reports it."""
    return f"kgen received {signal.Signals(signum).name}"


def _on_signal(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    stopped = kill_registered(_received(signum))
    if stopped:
        sys.stderr.write(f"kgen: {name} received; stopped {len(stopped)} verifier process(es): {', '.join(stopped)}\n")
        sys.stderr.flush()
    previous = _previous.get(signum)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signum, frame)  # a handler installed before kgen's decides what happens next
        return
    if previous == signal.SIG_IGN and signum != signal.SIGINT:
        return
    global _ending
    _ending = signum
    if signum != signal.SIGINT:
        sys.stderr.write(f"kgen: stopped by {name}\n")
        sys.stderr.flush()
    if _harmful_to_raise_in(frame):
        return  # raised at the next checkpoint (the sandbox asks once the child it started is killed)
    _raise_for(signum)


def _harmful_to_raise_in(frame: FrameType | None) -> bool:
    """The signal landed inside ``Popen``'s start of a child, or inside code run from a
    string by ``exec`` / ``eval`` (the module docstring says what raising does there)."""
    start = subprocess.Popen._execute_child.__code__
    while frame is not None:
        code = frame.f_code
        if code is start or (code.co_filename == "<string>" and code.co_name == "<module>"):
            return True
        frame = frame.f_back
    return False


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)  # not os._exit: temporary directories are still removed


def ending() -> str | None:
    """Why kgen is stopping, once an ending signal came (None until then): work that would
    start now (a lane to replace, a job to retry) is not started."""
    return _received(_ending) if _ending is not None else None


def raise_if_ending() -> None:
    """Raise again the exception of an ending signal that kgen received (``KeyboardInterrupt``
    for SIGINT, else ``SystemExit``): called where kgen would start more work, so that a
    handler's exception swallowed where it landed still ends kgen there."""
    if _ending is not None:
        _raise_for(_ending)


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """Print what Python could not raise, except an ending signal's own exception: that one
    :func:`raise_if_ending` raises again where kgen next starts work."""
    ours = unraisable.exc_type is not None and issubclass(unraisable.exc_type, (KeyboardInterrupt, SystemExit))
    if ours and _ending is not None:
        return
    _previous_unraisablehook(unraisable)


def install_signal_handlers() -> bool:
    """End registered children on SIGTERM, SIGINT and SIGHUP, then behave as before.

    Idempotent; a no-op (False) outside the main thread, where Python cannot set handlers.
    """
    global _installed, _previous_unraisablehook
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        if _installed:
            return True
        _installed = True
    for signum in ENDING_SIGNALS:
        _previous[signum] = signal.getsignal(signum)
        signal.signal(signum, _on_signal)
    _previous_unraisablehook = sys.unraisablehook
    sys.unraisablehook = _unraisable
    atexit.register(kill_registered)
    return True


# ----------------------------------------------------------------------------------------
# Finding a kgen process's verifiers after it is gone (a run resumed after SIGKILL)
# ----------------------------------------------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, Linux): a pid and its start time name one
    process for good, where a bare pid may since belong to another. None where unknown."""
    try:
        text = open(f"/proc/{pid}/stat").read()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def is_running(pid: int, started: int | None = None) -> bool:
    """The process ``pid`` exists (and, when ``started`` is known, is the one that started then)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    if started is not None:
        now = start_ticks(pid)
        return now is None or now == started
    return True


def verifiers_of(parent_pid: int) -> list[int]:
    """Processes that a kgen process with pid ``parent_pid`` started as verifiers (their
    environment names it, ``PARENT_PID_ENV``) and that still run: after a SIGKILL of kgen they
    end within a watchdog interval; one still running would verify beside a resumed run."""
    needle = f"{PARENT_PID_ENV}={parent_pid}".encode()
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = open(f"/proc/{entry}/environ", "rb").read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


# ----------------------------------------------------------------------------------------
# Child side: die with the parent
# ----------------------------------------------------------------------------------------


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def die_with_parent(parent_pid: int) -> None:
    """Between fork and exec: ask the kernel for SIGKILL when the parent dies (Linux), and
    exit at once if the parent is already gone (the signal would never come)."""
    libc = _libc()
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _watch(parent_pid: int, interval_s: float, on_orphaned: Callable[[], None]) -> None:
    while True:
        if os.getppid() != parent_pid:
            on_orphaned()
            return
        time.sleep(interval_s)


def _kill_own_group() -> None:
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(1)


def start_parent_watchdog(parent_pid: int | None = None, interval_s: float = WATCHDOG_INTERVAL_S) -> bool:
    """In the child: a daemon thread that kills this process group once the parent is gone.

    ``parent_pid`` defaults to the pid the sandbox passed in :data:`PARENT_PID_ENV` (a
    network-isolation wrapper may sit between); False when no parent pid is known.
    """
    if parent_pid is None:
        text = os.environ.get(PARENT_PID_ENV, "")
        if not text.isdigit():
            return False
        parent_pid = int(text)
    if os.getppid() != parent_pid:
        _kill_own_group()
    thread = threading.Thread(
        target=_watch, args=(parent_pid, interval_s, _kill_own_group), name="kgen-parent-watchdog", daemon=True
    )
    thread.start()
    return True
