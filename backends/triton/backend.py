"""The Triton implementation of kgen's Backend protocol."""

from __future__ import annotations

import os
import sys
import types
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from kgen.backends.base import KernelLaunch, KernelReport
from kgen.backends.device import Device
from kgen.backends.module_loading import load_module_from_file
from kgen.backends.targets import HardwareTarget
from kgen.backends.tunables import Tunable


class TritonBackend:
    """Triton kernels: run on a CUDA/ROCm GPU, or on CPU tensors through ``TRITON_INTERPRET=1``."""

    name = "triton"
    #: launch records carry what cross-compiling needs (``cross_compile.py``)
    compiles_from_calls = False

    def prepare_process(self, device: Device) -> None:
        """Choose Triton's mode for this process; call it before anything imports triton.

        On the CPU this sets ``TRITON_INTERPRET=1`` (kernels run in Triton's CPU
        interpreter, patched by ``interpreter_compat`` to run GPU-style code); on a GPU
        (CUDA or ROCm: torch calls both "cuda") it removes it. Triton reads
        the variable when ``@triton.jit`` decorates a function, and decorates its
        own library (``tl.sum``, ``tl.cdiv``, ...) when ``triton.language`` is
        first imported, so setting it later is too late: if triton is already
        imported in the other mode this raises ``RuntimeError``.
        """
        want_interpret = not device.is_gpu
        if want_interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)
        mode = _imported_mode()
        if mode is not None and mode != want_interpret:
            have = "the CPU interpreter" if mode else "GPU (JIT) mode"
            raise RuntimeError(
                f"triton was imported in {have} before prepare_process({device.value!r}); "
                "call prepare_process before importing triton (or torch modules that import it)"
            )
        if want_interpret:
            # GPU-style candidates (autotune, bf16/TF32 dots, persistent loops) run in the
            # interpreter as on a GPU; patched before any candidate imports triton.
            from kgen.backends.triton.interpreter_compat import install_interpreter_compat

            install_interpreter_compat()

    def load_candidate(self, path: Path) -> types.ModuleType:
        return load_module_from_file(Path(path))

    def record_launches(self, execute: bool = True, on_skip=None) -> AbstractContextManager:
        """Every Triton launch inside the block, as ``log.launches`` (see ``launches.py``);
        with ``execute=False`` the launches are recorded but not run (``on_skip`` hears
        their tensor arguments)."""
        from kgen.backends.triton.launches import record_launches

        return record_launches(execute, on_skip)

    def device_emulation(self, device: Device, target: HardwareTarget | None) -> AbstractContextManager | None:
        """On the CPU: ``x.is_cuda``, ``device="cuda"``, ``torch.cuda.*`` answered as one GPU of
        ``target`` (default H100) would (``backends/cpu_devices.py``)."""
        if device.is_gpu:
            return None
        from kgen.backends.cpu_devices import gpu_idioms_on_cpu

        return gpu_idioms_on_cpu(target)

    def warm_up(self, device: Device) -> None:
        """On a GPU, Triton's driver utilities: building them looks libcuda up with
        ``ldconfig -p`` (cached for the process), which would otherwise happen inside the
        candidate's first launch, a subprocess the sandbox refuses there."""
        if device.is_gpu:
            from triton.runtime import driver

            driver.active.utils  # noqa: B018 - the property builds and loads the utilities
            driver.active.get_current_device()

    def report_progress(self, path: Path) -> None:
        """In the CPU interpreter: every kernel program start counts (``interpreter_progress.py``)."""
        if os.environ.get("TRITON_INTERPRET") == "1":
            from kgen.backends.triton.interpreter_progress import install_progress_heartbeat

            install_progress_heartbeat(path)

    def strategy_features(self, source: str) -> dict[str, str]:
        """Read from the module's syntax tree (``features.py``)."""
        from kgen.backends.triton.features import strategy_features

        return strategy_features(source)

    def find_tunables(self, source: str, target: HardwareTarget | None = None) -> list[Tunable]:
        """Launch keywords, ``triton.Config`` / constexpr block sizes (``tunables.py``)."""
        from kgen.backends.triton.tunables import find_tunables

        return find_tunables(source, target)

    def compile_during_calls(self, targets: list[HardwareTarget]) -> AbstractContextManager:
        """Nothing to do: Triton cross-compiles from the launch records afterwards."""
        return nullcontext()

    def compile_error(self, exc: BaseException) -> str | None:
        """Triton compiles at the launch, inside the candidate's call: its errors are runtime
        errors with Triton's own message, which the fix prompt shows as they are."""
        return None

    def interpreter_limit(self, exc: BaseException) -> str | None:
        """What Triton's CPU interpreter cannot run (``interpreter_compat.needs_gpu_reason``)."""
        from kgen.backends.triton.interpreter_compat import needs_gpu_reason

        return needs_gpu_reason(exc)

    def cross_compile(
        self, module: types.ModuleType, launches: list[KernelLaunch], target: HardwareTarget
    ) -> list[KernelReport]:
        """Compile each distinct launched kernel for ``target`` (see ``cross_compile.py``)."""
        from kgen.backends.triton.cross_compile import cross_compile

        return cross_compile(module, launches, target)

    def cross_compile_many(
        self, module: types.ModuleType, launches: list[KernelLaunch], targets: list[HardwareTarget]
    ) -> dict[str, list[KernelReport]]:
        """:meth:`cross_compile` for several targets in one go: target name -> reports."""
        from kgen.backends.triton.cross_compile import cross_compile_many

        return cross_compile_many(module, launches, targets)


def _imported_mode() -> bool | None:
    """Whether the already-imported triton.language was built for the interpreter (None: not imported)."""
    standard = sys.modules.get("triton.language.standard")
    if standard is None:
        return None
    fn = getattr(standard, "cdiv", None) or getattr(standard, "sum", None)
    if fn is None:
        return None
    return type(fn).__name__ == "InterpretedFunction"
