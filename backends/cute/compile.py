"""Compile one CuTe DSL host call for a target that need not be present, and say what it costs.

``cute.compile`` traces the host function with the candidate's own arguments and runs
the whole toolchain down to a cubin (ptxas included) for the architecture passed as
``--gpu-arch``, with no GPU needed. The report per kernel carries the registers, the
shared memory (static, from the cubin, plus the dynamic amount the launch asked for)
and the stack frame, and fails the kernel when the shared memory exceeds what one
block may have on that target. A compile error becomes the report's ``error``: its
first lines, which is what the fix prompt shows the model.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from kgen.backends.base import KernelReport
from kgen.backends.cute.arch import UnsupportedTargetError, cute_arch
from kgen.backends.cute.cubin import CubinError, kernel_resources
from kgen.backends.cute.launches import _tracing_kernels, _tracing_state
from kgen.backends.targets import HardwareTarget

#: a compile error is cut to this many characters (the fix prompt shows it whole)
ERROR_CHARS = 1500
#: kernel symbols are mangled as ``kernel_cutlass_<name>_<argument types>_<n>``
_MANGLED = re.compile(r"^kernel_cutlass_(?P<name>.+?)_(?:tensorptr|[a-z]+\d|i\d|f\d)")


def shared_limit_bytes(target: HardwareTarget) -> int:
    """Shared memory one block may use (opt-in maximum): the SM's carve-out less 1 KB
    the driver reserves per block on sm_80 and newer."""
    return target.shared_memory_per_sm_kb * 1024 - 1024


def readable_name(symbol: str, launched: list[str]) -> str:
    """The kernel's Python name where the mangled symbol starts with one the trace launched."""
    for name in sorted(launched, key=len, reverse=True):
        if symbol.startswith(f"kernel_cutlass_{name}_"):
            return name
    match = _MANGLED.match(symbol)
    return match.group("name") if match else symbol


def error_text(exc: BaseException) -> str:
    """The DSL's message without its decoration, cut to a prompt-sized piece."""
    text = str(exc).strip() or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text = f"{text}\ncaused by: {str(cause).strip()}"
    text = "\n".join(line.rstrip() for line in text.splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}"[:ERROR_CHARS]


def compile_call(function: Any, args: tuple, kwargs: dict, target: HardwareTarget, dump_dir: Path) -> list[KernelReport]:
    """One report per kernel the call builds for ``target`` (or one failed report)."""
    import cutlass.cute as cute

    name = getattr(function, "__name__", "cute_jit")
    try:
        arch = cute_arch(target)
    except UnsupportedTargetError as exc:
        return [KernelReport(kernel=name, target=target.name, ok=False, error=str(exc))]
    dump_dir.mkdir(parents=True, exist_ok=True)
    launched: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(dir=dump_dir) as scratch:
        try:
            with _tracing_kernels(function):
                compiled = cute.compile(
                    function, *args, **kwargs, options=f"--gpu-arch {arch} --keep-cubin --dump-dir {scratch}"
                )
                launched = list(_tracing_state.kernels or [])
        except Exception as exc:  # noqa: BLE001 - any DSL or ptxas error is the candidate's compile error
            return [KernelReport(kernel=name, target=target.name, ok=False, error=error_text(exc))]
        return _reports(compiled, launched, target, name)


def _cubin_bytes(compiled: Any) -> bytes | None:
    artifacts = getattr(compiled, "artifacts", None)
    cubin = getattr(artifacts, "CUBIN", None)
    if isinstance(cubin, bytes):
        return cubin
    if isinstance(cubin, str) and Path(cubin).is_file():
        return Path(cubin).read_bytes()
    return None


def _reports(compiled: Any, launched: list[tuple[str, dict[str, Any]]], target: HardwareTarget,
             name: str) -> list[KernelReport]:
    data = _cubin_bytes(compiled)
    names = [kernel for kernel, _ in launched]
    dynamic = {kernel: options.get("smem") for kernel, options in launched}
    if data is None:
        kernels = [readable_name(k, names) for k in getattr(compiled, "kernel_info", {})] or [name]
        return [KernelReport(kernel=k, target=target.name, ok=True) for k in kernels]
    try:
        resources = kernel_resources(data)
    except (CubinError, ValueError, IndexError) as exc:
        return [KernelReport(kernel=name, target=target.name, ok=True, error=f"resources unreadable: {exc}")]
    limit = shared_limit_bytes(target)
    reports = []
    for kernel in resources:
        readable = readable_name(kernel.name, names)
        smem = dynamic.get(readable)
        shared = kernel.static_shared_bytes + (smem if isinstance(smem, int) else 0)
        over = shared > limit
        reports.append(
            KernelReport(
                kernel=readable,
                target=target.name,
                ok=not over,
                registers=kernel.registers,
                spills=None,
                shared_bytes=shared,
                error=(f"needs {shared} bytes of shared memory per block; {target.name} allows {limit}"
                       if over else None),
            )
        )
    return reports or [KernelReport(kernel=name, target=target.name, ok=True)]
