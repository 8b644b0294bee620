"""Inside the box: police what the candidate's own code does while it runs.

The sandbox process already has no network (where the OS allows), no
credentials and a throw-away directory. This guard adds, through a Python
audit hook that the candidate cannot remove, a record (and a refusal) of:

* starting processes (``subprocess``, ``os.system``, ``fork``, ``exec``, spawn)
  when the innermost caller outside the standard library is the candidate
  (Triton running its own compiler is fine; the candidate doing it is not);
* opening files for writing outside the box's directory and the compiler's
  cache;
* any socket connection or bind;
* threads still running after the candidate returns (work hidden from the
  timer, or a background cache).

Each refused action raises ``PermissionError`` in the candidate and leaves a
``GuardViolation``; one violation rejects the candidate.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import threading
from contextlib import AbstractContextManager
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from kgen.backends.registry import all_backend_info

_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
     "os.exec", "pty.spawn", "os.startfile"}
)
_NETWORK_EVENTS = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_STDLIB = tuple({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})
#: Installed packages. Where Python is installed as many images install it, they sit inside the
#: standard library's folder (/usr/local/lib/python3.12/site-packages), and a prefix test alone
#: would count Triton's frames as the standard library's: Triton building its launcher with gcc
#: would then look like the candidate starting a process.
_PACKAGES = tuple({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                   *(p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages"))})


def is_standard_library(filename: str, stdlib: tuple[str, ...] = _STDLIB, packages: tuple[str, ...] = _PACKAGES) -> bool:
    """A frame of the standard library (skipped when asking who called), not of a package
    installed beside it."""
    return filename.startswith(stdlib) and not filename.startswith(packages)


class GuardViolation(BaseModel):
    action: str
    detail: str


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class CandidateGuard:
    """Install once per child process; switch on around the candidate's code with ``watching()``."""

    def __init__(
        self, candidate_path: Path, writable_dirs: list[Path], emulation: AbstractContextManager | None = None
    ):
        """``emulation``: entered while the guard is on, so only the candidate's code sees it
        (the backend's GPU idioms on a CPU run: ``Backend.device_emulation``)."""
        self.candidate_file = str(Path(candidate_path).resolve())
        self.writable = tuple(str(Path(d).resolve()) for d in writable_dirs)
        self.violations: list[GuardViolation] = []
        self._active = False
        self._inside = threading.local()
        self._threads_before = 0
        self._python_threads_before: set[int] = set()
        self._emulation = emulation

    def install(self) -> None:
        _compiler_tool_dirs()
        sys.addaudithook(self._hook)

    def __enter__(self) -> CandidateGuard:
        self._threads_before = _thread_count()
        self._python_threads_before = {t.ident for t in threading.enumerate() if t.ident}
        self._active = True
        if self._emulation is not None:
            self._emulation.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._emulation is not None:
            self._emulation.__exit__(*exc)
        self._active = False
        new_python = [
            t for t in threading.enumerate() if t.ident and t.ident not in self._python_threads_before and t.is_alive()
        ]
        if new_python:
            names = ", ".join(t.name for t in new_python)
            self.violations.append(
                GuardViolation(action="thread", detail=f"left {len(new_python)} thread(s) running after forward returned: {names}")
            )

    def native_threads_added(self) -> int:
        """Threads the process gained since the last ``__enter__`` (libraries may add some once)."""
        return _thread_count() - self._threads_before

    # -- the audit hook ---------------------------------------------------------------
    def _hook(self, event: str, args: tuple) -> None:
        if not self._active or getattr(self._inside, "busy", False):
            return
        if event not in _PROCESS_EVENTS and event not in _NETWORK_EVENTS and event != "open":
            return
        self._inside.busy = True
        try:
            self._judge(event, args)
        finally:
            self._inside.busy = False

    def _judge(self, event: str, args: tuple) -> None:
        if event in _NETWORK_EVENTS:
            self._refuse("network", f"{event} {args[1:2]!r}")
        elif event in _PROCESS_EVENTS:
            if not _is_compiler_tool(args) and self._candidate_is_caller():
                self._refuse("process", f"{event} {_short(args)} (called from {self._callers()})")
        elif event == "open" and _is_write(args):
            path = str(args[0])
            if isinstance(args[0], int):
                return
            resolved = os.path.realpath(path)
            if not resolved.startswith(self.writable) and self._candidate_is_caller():
                self._refuse("file", f"opened {path} for writing outside the sandbox directory")

    def _candidate_is_caller(self) -> bool:
        """Is the innermost frame outside the standard library the candidate's own code?"""
        frame = sys._getframe(3)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename == __file__ or is_standard_library(filename) or filename.startswith("<frozen"):
                frame = frame.f_back
                continue
            return os.path.realpath(filename) == self.candidate_file
        return False

    def _callers(self) -> str:
        """The innermost non-standard-library frames: evidence for a refusal."""
        names, frame = [], sys._getframe(1)
        while frame is not None and len(names) < 3:
            filename = frame.f_code.co_filename
            if not (filename == __file__ or is_standard_library(filename) or filename.startswith("<frozen")):
                names.append(f"{os.path.basename(filename)}:{frame.f_lineno}")
            frame = frame.f_back
        return " < ".join(names) or "unknown"

    def _refuse(self, action: str, detail: str) -> None:
        self.violations.append(GuardViolation(action=action, detail=detail))
        raise PermissionError(f"kgen sandbox: {action} not allowed for candidates ({detail})")


@lru_cache(maxsize=1)
def _compiler_tool_dirs() -> tuple[str, ...]:
    """Where the kernel compilers keep their own tools (Triton's ptxas, ld.lld, ...): the
    package folders of every registered backend's toolchain (``BackendInfo.requires``).
    Found once, when the guard is installed, not inside the audit hook."""
    dirs: list[str] = []
    for info in all_backend_info():
        for name in info.requires:
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                dirs += [os.path.realpath(p) + os.sep for p in spec.submodule_search_locations]
    return tuple(dirs)


def _is_compiler_tool(args: tuple) -> bool:
    """A process event that runs a tool shipped inside the kernel compiler's package
    (Triton runs ptxas for every GPU compile): the compiler's work, whoever launched the kernel."""
    executable = args[0] if args else None
    if isinstance(executable, bytes):
        executable = executable.decode(errors="replace")
    if not isinstance(executable, str) or not executable:
        return False
    return os.path.realpath(executable).startswith(_compiler_tool_dirs())


def _is_write(args: tuple) -> bool:
    mode = args[1] if len(args) > 1 else "r"
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _short(args: tuple) -> str:
    text = repr(args)
    return text if len(text) < 120 else text[:117] + "..."
