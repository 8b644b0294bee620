"""Every call of a CuTe DSL host function, seen from inside the DSL: count, skip or compile it.

A CuTe candidate's ``forward`` reaches the GPU in one of two ways: it calls a
``@cute.jit`` function directly (the DSL traces, compiles and runs it), or it calls an
executor that ``cute.compile`` returned. Both pass through two DSL methods, which are
wrapped here once per process:

* ``BaseDSL._func``: a ``@cute.jit`` call from Python (a call nested inside a trace is
  the DSL's own business and passes through), including ``cute.compile``'s;
* ``JitCompiledFunction.__call__``: a compiled executor run.

While a recorder is active each such call becomes one ``KernelLaunch`` per kernel
it launches (names and launch configurations are read while the DSL traces, from
``KernelLauncher.launch``). With ``execute=False`` the call is not run: the ghost
check hears its tensor arguments, and a CPU evaluation, where CuTe kernels cannot
run, still gets the kernels compiled. With ``compile_for`` every distinct call is
also compiled for each named target through ``cute.compile``, with the very
arguments the candidate passed, so what is compiled is what would run.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kgen.backends.base import KernelLaunch, KernelReport
from kgen.backends.targets import HardwareTarget


class CuteLaunchLog:
    """What one recorder saw: launches in call order, and compile reports per target."""

    def __init__(self) -> None:
        self.launches: list[KernelLaunch] = []
        self.reports: dict[str, list[KernelReport]] = {}


class _Recorder:
    def __init__(self, execute: bool, on_skip: Callable[[list[Any]], None] | None,
                 compile_for: list[HardwareTarget], dump_dir: Path):
        self.execute = execute
        self.on_skip = on_skip
        self.compile_for = compile_for
        self.dump_dir = dump_dir
        self.log = CuteLaunchLog()
        #: (function, argument key, target) already compiled by this recorder
        self.compiled: set[tuple[int, str, str]] = set()


_state = threading.local()
_INSTALL_LOCK = threading.Lock()
_installed = False
#: kernels (name, launch options) a host function launched when last traced, by function id
#: (an executor's call looks its kernels up here: it is not traced again)
_KERNELS_OF: dict[int, list[tuple[str, dict[str, Any]]]] = {}


def _active() -> _Recorder | None:
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


def _busy() -> bool:
    """Inside a call kgen is already handling (its own compiles re-enter the DSL)."""
    return getattr(_state, "busy", 0) > 0


@contextmanager
def _handling() -> Iterator[None]:
    _state.busy = getattr(_state, "busy", 0) + 1
    try:
        yield
    finally:
        _state.busy -= 1


def _tracing() -> bool:
    from cutlass._mlir import ir

    return ir.Context.current is not None and ir.InsertionPoint.current is not None


# -- what a call is made of -----------------------------------------------------------------

def _torch_tensors(args: tuple, kwargs: dict) -> list[Any]:
    """The torch tensors behind a call's arguments (a ``from_dlpack`` tensor remembers its source)."""
    import torch

    found = []
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor):
            found.append(value)
        else:
            source = getattr(value, "_kgen_source", None)
            if isinstance(source, torch.Tensor):
                found.append(source)
    return found


def _describe(value: Any) -> str:
    """A short type string for a launch signature: ``tensor<bf16,(16384,4096)>``, ``Int32``."""
    source = getattr(value, "_kgen_source", None)
    if source is not None and hasattr(source, "dtype"):
        return f"tensor<{str(source.dtype).replace('torch.', '')},{tuple(source.shape)},{tuple(source.stride())}>"
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return f"tensor<{str(value.dtype).replace('torch.', '')},{tuple(value.shape)}>"
    return type(value).__name__


def _call_key(args: tuple, kwargs: dict) -> str:
    parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in sorted(kwargs.items())]
    for value in [*args, *kwargs.values()]:
        if isinstance(value, (bool, int, float)):
            parts.append(repr(value))  # a Python scalar may be a compile-time constant
    return "|".join(parts)


def _signature(args: tuple) -> dict[str, str]:
    return {f"arg{i}": _describe(a) for i, a in enumerate(args)}


def _static(value: Any) -> Any:
    """A launch dimension as a plain value where the trace knew it, else a marker."""
    if isinstance(value, (list, tuple)):
        return [_static(v) for v in value]
    return value if isinstance(value, int) else "dynamic"


# -- the wrapped DSL methods --------------------------------------------------------------

def _record(recorder: _Recorder, function: Any, args: tuple, kwargs: dict) -> None:
    kernels = _KERNELS_OF.get(id(function)) or [(getattr(function, "__name__", "cute_jit"), {})]
    for name, options in kernels:
        grid = options.get("grid")
        recorder.log.launches.append(
            KernelLaunch(
                kernel=name,
                grid=[g for g in grid if isinstance(g, int)] if isinstance(grid, list) else [],
                signature=_signature(args),
                options={k: v for k, v in options.items() if k != "grid"},
            )
        )


def _compile_for_targets(recorder: _Recorder, function: Any, args: tuple, kwargs: dict) -> None:
    from kgen.backends.cute.compile import compile_call

    key = _call_key(args, kwargs)
    for target in recorder.compile_for:
        mark = (id(function), key, target.name)
        if mark in recorder.compiled:
            continue
        recorder.compiled.add(mark)
        with _handling():
            reports = compile_call(function, args, kwargs, target, recorder.dump_dir)
        recorder.log.reports.setdefault(target.name, []).extend(reports)


def _wrapped_func(original: Callable) -> Callable:
    def _func(self, funcBody, *args, **kwargs):  # noqa: N803 - the DSL's own parameter name
        if _busy() or _tracing():
            return original(self, funcBody, *args, **kwargs)
        recorder = _active()
        if kwargs.get("compile_only"):
            return _candidate_compile(original, self, recorder, funcBody, args, kwargs)
        if recorder is None:
            return original(self, funcBody, *args, **kwargs)
        _compile_for_targets(recorder, funcBody, args, kwargs)
        if not recorder.execute:
            _record(recorder, funcBody, args, kwargs)
            if recorder.on_skip is not None:
                recorder.on_skip(_torch_tensors(args, kwargs))
            return None
        with _handling(), _tracing_kernels(funcBody):
            result = original(self, funcBody, *args, **kwargs)
        _record(recorder, funcBody, args, kwargs)
        return result

    return _func


def _candidate_compile(original: Callable, dsl: Any, recorder: _Recorder | None, function: Any,
                       args: tuple, kwargs: dict) -> Any:
    """The candidate's own ``cute.compile``, wherever it runs (``forward``, ``__init__``, import):
    the executor remembers what it was compiled from, so that its calls can be named and
    compiled for the targets later, and with a recorder active that happens now."""
    call_kwargs = {k: v for k, v in kwargs.items() if k not in ("compile_only", "no_cache")}
    if recorder is not None:
        _compile_for_targets(recorder, function, args, call_kwargs)
    with _tracing_kernels(function):
        compiled = original(dsl, function, *args, **kwargs)
    try:
        compiled._kgen_compiled_from = (function, args, call_kwargs)
    except AttributeError:
        pass
    return compiled


def _wrapped_call(original: Callable) -> Callable:
    def __call__(self, *args, **kwargs):
        recorder = _active()
        if recorder is None or _busy():
            return original(self, *args, **kwargs)
        source = getattr(self, "_kgen_compiled_from", None)
        function = source[0] if source is not None else self
        if source is not None:
            # compiled for the targets from the arguments of its own compile (which may have
            # been fake tensors made in __init__): what runs is what that compile built
            _compile_for_targets(recorder, *source)
        if not recorder.execute:
            _record(recorder, function, args, kwargs)
            if recorder.on_skip is not None:
                recorder.on_skip(_torch_tensors(args, kwargs))
            return None
        with _handling():
            result = original(self, *args, **kwargs)
        _record(recorder, function, args, kwargs)
        return result

    return __call__


_tracing_state = threading.local()


@contextmanager
def _tracing_kernels(function: Any) -> Iterator[None]:
    """Collect the kernels ``function`` launches while the DSL traces it. A direct call
    traces on every call (the DSL looks its cache up by the traced module's hash); an
    executor from ``cute.compile`` does not, and keeps what its compile's trace found."""
    previous = getattr(_tracing_state, "kernels", None)
    _tracing_state.kernels = []
    try:
        yield
        if _tracing_state.kernels:
            _KERNELS_OF[id(function)] = list(_tracing_state.kernels)
    finally:
        _tracing_state.kernels = previous


def _wrapped_launch(original: Callable) -> Callable:
    def launch(self, *args, **kwargs):
        collected = getattr(_tracing_state, "kernels", None)
        if collected is not None:
            options: dict[str, Any] = {}
            for name in ("grid", "block", "cluster", "smem"):
                if name in kwargs:
                    options[name] = _static(kwargs[name])
            collected.append((getattr(self.funcBody, "__name__", "cute_kernel"), options))
        return original(self, *args, **kwargs)

    return launch


def _wrapped_tensor_init(original: Callable) -> Callable:
    def __init__(self, tensor, *args, **kwargs):
        original(self, tensor, *args, **kwargs)
        self._kgen_source = tensor

    return __init__


def install_hooks() -> None:
    """Wrap the DSL's entry points once per process (before any candidate imports it)."""
    global _installed
    with _INSTALL_LOCK:
        if _installed:
            return
        from cutlass.base_dsl.dsl import BaseDSL
        from cutlass.base_dsl.jit_executor import JitCompiledFunction
        from cutlass.cute import runtime
        from cutlass.cutlass_dsl.cutlass import KernelLauncher

        BaseDSL._func = _wrapped_func(BaseDSL._func)
        JitCompiledFunction.__call__ = _wrapped_call(JitCompiledFunction.__call__)
        KernelLauncher.launch = _wrapped_launch(KernelLauncher.launch)
        runtime._Tensor.__init__ = _wrapped_tensor_init(runtime._Tensor.__init__)
        _installed = True


def default_dump_dir() -> Path:
    """Where ``--keep-cubin`` puts the cubins kgen reads resources from: a folder of this
    process's in the temporary directory (the compiler writes it, not the candidate)."""
    return Path(tempfile.gettempdir()) / f"kgen-cute-{os.getpid()}"


@contextmanager
def record_launches(
    execute: bool = True,
    on_skip: Callable[[list[Any]], None] | None = None,
    compile_for: list[HardwareTarget] | None = None,
    dump_dir: Path | None = None,
) -> Iterator[CuteLaunchLog]:
    """Record (and with ``execute=False`` skip) every CuTe host call made inside the block;
    with ``compile_for``, compile each distinct call for those targets as well."""
    install_hooks()
    recorder = _Recorder(execute, on_skip, list(compile_for or []), Path(dump_dir or default_dump_dir()))
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    stack.append(recorder)
    try:
        yield recorder.log
    finally:
        stack.remove(recorder)
