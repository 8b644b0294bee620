"""The CuTe DSL implementation of kgen's Backend protocol.

CuTe kernels have no CPU interpreter: on a CPU kgen compiles every host call the
candidate makes for each target (real cubins, ptxas included) and the verdict is
"compiled, not run". On a GPU they run, and every host call is counted as the launches
of the kernels its trace launched.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from kgen.backends.base import KernelLaunch, KernelReport
from kgen.backends.device import Device
from kgen.backends.module_loading import load_module_from_file
from kgen.backends.targets import DEFAULT_TARGET, HardwareTarget, resolve_target


class CuteBackend:
    """CuTe DSL kernels (``nvidia-cutlass-dsl``): compiled anywhere, run on NVIDIA sm_80+."""

    name = "cute"

    def __init__(self) -> None:
        #: target name -> reports of the kernels the recorded calls built for it
        self._reports: dict[str, list[KernelReport]] = {}
        #: targets every recorded call is compiled for (``compile_during_calls``)
        self._compile_targets: list[HardwareTarget] = []

    def prepare_process(self, device: Device) -> None:
        """The compile cache only in kgen's folder for it (``BackendInfo.cache_env``; the
        sandbox refuses writes elsewhere), and on a CPU an architecture for the candidate's
        own ``cute.compile`` calls (no GPU to ask)."""
        if not os.environ.get("CUTE_DSL_CACHE_DIR"):
            # no cache folder of kgen's: none at all (the DSL's default is a shared /tmp folder)
            os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
        if not device.is_gpu:
            from kgen.backends.cute.arch import cute_arch

            os.environ.setdefault("CUTE_DSL_ARCH", cute_arch(resolve_target(DEFAULT_TARGET)))
        from kgen.backends.cute.launches import install_hooks

        install_hooks()

    def load_candidate(self, path: Path) -> types.ModuleType:
        return load_module_from_file(Path(path))

    def warm_up(self, device: Device) -> None:
        """Compile one tiny kernel: the DSL's first compile loads its compiler libraries and
        starts their threads, which must not happen inside the candidate's first call."""
        from kgen.backends.cute.warm_up import compile_tiny_kernel

        compile_tiny_kernel(device)

    def record_launches(
        self, execute: bool = True, on_skip: Callable[[list[Any]], None] | None = None,
        compile_for: list[HardwareTarget] | None = None,
    ) -> AbstractContextManager:
        """Every CuTe host call inside the block as launches (``launches.py``); with
        ``compile_for``, each distinct call is compiled for those targets too and the
        reports are kept for :meth:`cross_compile`."""
        return self._recording(execute, on_skip, compile_for)

    @contextmanager
    def _recording(self, execute, on_skip, compile_for):
        from kgen.backends.cute.launches import record_launches

        with record_launches(execute, on_skip, compile_for or self._compile_targets) as log:
            try:
                yield log
            finally:
                for target, reports in log.reports.items():
                    self._reports.setdefault(target, []).extend(reports)

    #: cross-compiling needs the candidate's calls themselves (their arguments shape the
    #: trace): the evaluation makes one under ``compile_during_calls`` first
    compiles_from_calls = True

    def cross_compile(
        self, module: types.ModuleType, launches: list[KernelLaunch], target: HardwareTarget
    ) -> list[KernelReport]:
        """The reports the recorded calls produced for ``target``, each distinct one once
        (empty: no call was compiled for it)."""
        unique = {r.model_dump_json(): r for r in self._reports.get(target.name, [])}
        return list(unique.values())

    def compile_error(self, exc: BaseException) -> str | None:
        """The DSL's (or ptxas's) error as the fix prompt should see it; None for any other error."""
        module = type(exc).__module__ or ""
        if not (module.startswith(("cutlass", "_mlir")) or type(exc).__name__.startswith("DSL")):
            return None
        from kgen.backends.cute.compile import error_text

        return error_text(exc)

    def compile_during_calls(self, targets: list[HardwareTarget]) -> AbstractContextManager:
        """While active, every recorded call is also compiled for ``targets``."""
        return self._compiling_for(targets)

    @contextmanager
    def _compiling_for(self, targets):
        previous, self._compile_targets = self._compile_targets, list(targets)
        try:
            yield
        finally:
            self._compile_targets = previous

    def interpreter_limit(self, exc: BaseException) -> str | None:
        """No CPU interpreter: a CPU evaluation never runs a CuTe kernel, so nothing raised is
        the emulation's limit."""
        return None

    def device_emulation(self, device: Device, target: HardwareTarget | None) -> AbstractContextManager | None:
        """On the CPU, ``torch.cuda.*`` answered as ``target`` would (``backends/cpu_devices.py``)."""
        if device.is_gpu:
            return None
        from kgen.backends.cpu_devices import gpu_idioms_on_cpu

        return gpu_idioms_on_cpu(target)

    def report_progress(self, path: Path) -> None:
        """Nothing runs on the CPU, so there is no kernel progress to report."""

    def find_tunables(self, source: str, target: HardwareTarget | None = None) -> list:
        """Module-level knob constants: threads, rows per CTA, tiles, stages, copy width
        (``tunables.py``)."""
        from kgen.backends.cute.tunables import find_tunables

        return find_tunables(source, target)

    def strategy_features(self, source: str) -> dict[str, str]:
        """Read from the module's syntax tree (``features.py``)."""
        from kgen.backends.cute.features import strategy_features

        return strategy_features(source)
