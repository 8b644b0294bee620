"""The Backend protocol: what evaluation needs from Triton, CuTe DSL or any later backend.

Evaluation code talks to this protocol only, so a new backend slots in by
implementing it and registering in ``kgen.backends.registry``.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from kgen.backends.device import Device

if TYPE_CHECKING:
    from kgen.backends.targets import HardwareTarget
    from kgen.backends.tunables import Tunable


class KernelLaunch(BaseModel):
    """One launch of a backend kernel, as seen by the launch recorder."""

    kernel: str
    grid: list[int] = Field(default_factory=list)
    #: argument name -> backend type string (e.g. Triton's "*bf16", "i32") for runtime args
    signature: dict[str, str] = Field(default_factory=dict)
    #: argument name -> value for compile-time constants (constexprs)
    constants: dict[str, Any] = Field(default_factory=dict)
    #: compile options the launch asked for (num_warps, num_stages, ...)
    options: dict[str, Any] = Field(default_factory=dict)
    #: argument name -> value facts the backend specializes on (Triton: "D" = pointer or int
    #: divisible by 16, "1" = int equal to 1); cross-compiling needs them to build what the GPU builds
    specialization: dict[str, str] = Field(default_factory=dict)


class KernelReport(BaseModel):
    """A kernel compiled for one hardware target: the resources it needs, or why it failed."""

    kernel: str
    target: str
    ok: bool
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    error: str | None = None


@runtime_checkable
class LaunchLog(Protocol):
    launches: list[KernelLaunch]


@runtime_checkable
class Backend(Protocol):
    """What evaluation asks of a kernel backend."""

    name: str
    #: whether cross-compiling needs the candidate's own calls (their arguments shape what is
    #: built): the evaluation then calls it once under :meth:`compile_during_calls`
    compiles_from_calls: bool

    def prepare_process(self, device: Device) -> None:
        """Set up the process before the backend is imported (e.g. the CPU interpreter)."""

    def load_candidate(self, path: Path) -> types.ModuleType:
        """Import a candidate module from its file (kernels need their source on disk)."""

    def warm_up(self, device: Device) -> None:
        """Load what the first kernel launch would load (the GPU driver's libraries) before
        any candidate code runs: loading may start a helper process, which the sandbox refuses
        once candidate code is on the stack. A no-op where nothing needs loading."""

    def record_launches(
        self, execute: bool = True, on_skip: Callable[[list[Any]], None] | None = None
    ) -> AbstractContextManager[LaunchLog]:
        """Count and describe every kernel launch made inside the context; with
        ``execute=False``, record the launches without running them and hand each
        one's tensor arguments to ``on_skip``."""

    def cross_compile(
        self, module: types.ModuleType, launches: list[KernelLaunch], target: HardwareTarget
    ) -> list[KernelReport]:
        """Compile each launched kernel for a target that need not be present."""

    def compile_during_calls(self, targets: list[HardwareTarget]) -> AbstractContextManager:
        """While active, each distinct kernel call recorded is also compiled for ``targets``
        and :meth:`cross_compile` answers from those builds; a no-op where launch records
        suffice."""

    def compile_error(self, exc: BaseException) -> str | None:
        """``exc`` as a compile error the fix prompt can use, or None when it is not the
        toolchain's compile error."""

    def interpreter_limit(self, exc: BaseException) -> str | None:
        """Why ``exc``, raised while a candidate ran on the CPU, is the CPU emulation's limit and
        not the kernel's fault (a short reason), or None when the candidate itself failed."""

    def device_emulation(self, device: Device, target: HardwareTarget | None) -> AbstractContextManager | None:
        """What the candidate's code sees of the GPU on a run without one (``torch.cuda`` queries
        answered as ``target`` would), entered only while candidate code runs; None: nothing."""

    def report_progress(self, path: Path) -> None:
        """Where a CPU run writes its heartbeat (kernel work still advancing), so that a slow
        kernel killed at the time limit can be told from a hung one; a no-op where none exists."""

    def strategy_features(self, source: str) -> dict[str, str]:
        """Coarse features of a candidate's strategy (kernels, tensor cores, persistent, block
        class, ...): the search keeps the fastest kernel of each combination (MAP-Elites), so
        a different idea survives beside the leader. Empty when the source cannot be read."""

    def find_tunables(self, source: str, target: HardwareTarget | None) -> list[Tunable]:
        """The knobs of a kernel source that change its speed and never its results (launch
        warps and stages, literal tile sizes, programs per SM), in source order, each with
        the exact source spans to rewrite and its choices for ``target`` (None: the widest
        any target allows); the offline search (``agent/search/mutation.py``) moves them. Empty when
        the source has none or does not parse."""
