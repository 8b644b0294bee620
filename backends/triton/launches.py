"""Record every Triton kernel launch made inside a ``with record_launches() as log:`` block.

kgen rejects a candidate whose forward launches no kernel, so the recorder must
not miss launches. It patches, at class level and only while at least one
recorder is active, the points every launch goes through in Triton 3.4-3.9:

* ``triton.runtime.jit.JITFunction.run`` — every launch of a ``@triton.jit``
  kernel on a GPU (``kernel[grid](...)`` calls it; so do ``@triton.autotune``
  and ``@triton.heuristics`` wrappers, which end in ``self.fn.run``).
  ``warmup=True`` calls compile without launching and are not recorded.
* ``triton.runtime.interpreter.GridExecutor.__call__`` — every launch under
  ``TRITON_INTERPRET=1``. In Triton 3.4 ``InterpretedFunction.run`` is an
  instance attribute and ``InterpretedFunction.__getitem__`` bypasses ``run``;
  both end in ``GridExecutor``, so patching it catches all interpreter launches
  in every version. (``InterpretedFunction.__call__`` is a device-function call
  from inside a kernel, not a launch.)
* ``triton.compiler.compiler.CompiledKernel.__getitem__`` — launches of an
  already compiled kernel (``kernel.warmup(...)[grid](...)``), GPU only.

Autotuning: ``Autotuner._bench`` is patched to mark the launches it makes while
benchmarking configs. Those go to ``log.autotune_launches``, not
``log.launches``; the launch the autotuner then makes with the chosen config is
an ordinary entry of ``log.launches``. So ``len(log.launches)`` counts the
launches the program asked for (one per ``kernel[grid](...)`` call), whether or
not the autotuner had to benchmark first, and cross-compiling builds the
configurations that actually ran.

The patches are process-wide: while any recorder is open, a launch from any
thread is added to every open log (nested recorders each see the launches made
inside them).

Each launch is described by a :class:`~kgen.backends.base.KernelLaunch`:
kernel name (the Python function's ``__name__``), grid as ints, the runtime
arguments' Triton types (``"*bf16"``, ``"i32"``, ``"fp32"`` ...), the declared
``tl.constexpr`` arguments' values (plus runtime ``None`` arguments, which
Triton also treats as constants), the compile options passed (``num_warps``,
``num_stages`` ...), and the value facts Triton specializes on
(``specialization``: ``"D"`` pointer/int divisible by 16, ``"1"`` int equal to 1).
Constant values are stored JSON-safe: a ``tl.dtype`` becomes ``"tl.float16"``
and a kernel passed as a constexpr becomes ``"triton.jit:<name>"``.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kgen.backends.base import KernelLaunch

#: names of run() keywords that are launch plumbing, not kernel arguments or compile options
_PLUMBING = frozenset({"grid", "warmup"})

#: torch / numpy dtype names -> Triton type names (mirrors triton._utils.type_canonicalisation_dict)
_DTYPE_NAMES = {
    "bool": "u1", "int1": "u1", "uint1": "u1", "i1": "u1",
    "float8e4nv": "fp8e4nv", "float8e5": "fp8e5", "float8e4b15": "fp8e4b15",
    "float8_e4m3fn": "fp8e4nv", "float8e4b8": "fp8e4b8", "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2": "fp8e5", "float8e5b16": "fp8e5b16", "float8_e5m2fnuz": "fp8e5b16",
    "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32",
    "double": "fp64", "float64": "fp64", "int8": "i8", "int16": "i16", "int": "i32",
    "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
}
_TL_DTYPE_ATTRS = (
    "float16", "bfloat16", "float32", "float64", "int1", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "float8e4nv", "float8e5", "float8e4b15", "float8e4b8",
    "float8e5b16",
)
_SCALAR_TYPES = frozenset(
    {"u1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32", "fp64"}
)


@dataclass(eq=False)  # compared by identity: two logs with equal contents are different logs
class TritonLaunchLog:
    """What one ``record_launches()`` block saw (implements ``kgen.backends.base.LaunchLog``)."""

    #: launches the program made, in order (including an autotuner's final, chosen-config launch)
    launches: list[KernelLaunch] = field(default_factory=list)
    #: launches ``@triton.autotune`` made while benchmarking candidate configs
    autotune_launches: list[KernelLaunch] = field(default_factory=list)

    @property
    def kernel_names(self) -> list[str]:
        """Distinct kernels launched, in first-launch order."""
        return list(dict.fromkeys(launch.kernel for launch in self.launches))


# ----------------------------------------------------------------------------------------
# Patch management: installed when the first recorder opens, restored when the last closes.
# ----------------------------------------------------------------------------------------

_lock = threading.RLock()
_active: list[TritonLaunchLog] = []
_restore: list[tuple[type, str, Any]] = []
_local = threading.local()
#: > 0 while a ``record_launches(execute=False)`` block is open: launches are recorded, not run
_suppressing = 0

#: kernel name -> the JITFunction last launched under that name (for in-process cross-compiling)
_KERNEL_OBJECTS: dict[str, Any] = {}


#: called with every tensor argument of a launch that is recorded but not run
_skip_hooks: list[Callable[[list[Any]], None]] = []


@contextlib.contextmanager
def record_launches(
    execute: bool = True, on_skip: Callable[[list[Any]], None] | None = None
) -> Iterator[TritonLaunchLog]:
    """Record every Triton kernel launch made inside the block (see the module docstring).

    With ``execute=False`` launches are recorded but not run: the verifier's ghost check
    (does the output change when no kernel runs?) and recording the launch configuration
    at full sizes without paying for it in the CPU interpreter. ``on_skip`` then hears the
    tensor arguments of each launch not run (the ghost check poisons them: whatever a
    kernel could have written must not look written).
    """
    global _suppressing
    log = TritonLaunchLog()
    with _lock:
        if not _active:
            _install()
        _active.append(log)
        if not execute:
            _suppressing += 1
            if on_skip is not None:
                _skip_hooks.append(on_skip)
    try:
        yield log
    finally:
        with _lock:
            if not execute:
                _suppressing -= 1
                if on_skip is not None:
                    _skip_hooks.remove(on_skip)
            _active.remove(log)
            if not _active:
                _uninstall()


def _patch(cls: type, name: str, make_wrapper) -> None:
    original = cls.__dict__.get(name)
    if original is None:
        return
    _restore.append((cls, name, original))
    setattr(cls, name, make_wrapper(original))


def _install() -> None:
    import triton  # noqa: F401 - the backend's prepare_process has chosen interpret mode by now

    try:
        from triton.runtime.jit import JITFunction

        _patch(JITFunction, "run", _wrap_jit_run)
    except ImportError:  # pragma: no cover - every supported Triton has it
        pass
    try:
        from triton.runtime.interpreter import GridExecutor

        _patch(GridExecutor, "__call__", _wrap_grid_executor_call)
    except ImportError:  # pragma: no cover
        pass
    try:
        from triton.compiler.compiler import CompiledKernel

        _patch(CompiledKernel, "__getitem__", _wrap_compiled_getitem)
    except ImportError:  # pragma: no cover
        pass
    try:
        from triton.runtime.autotuner import Autotuner

        _patch(Autotuner, "_bench", _wrap_autotuner_bench)
    except ImportError:  # pragma: no cover
        pass


def _uninstall() -> None:
    while _restore:
        cls, name, original = _restore.pop()
        setattr(cls, name, original)


# ----------------------------------------------------------------------------------------
# Wrappers
# ----------------------------------------------------------------------------------------


def _skipped(args, kwargs) -> None:
    """Tell the skip hooks which tensors a launch that was not run received."""
    if not _skip_hooks:
        return
    import torch

    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    for hook in list(_skip_hooks):
        hook(tensors)


def _depth() -> int:
    return getattr(_local, "depth", 0)


@contextlib.contextmanager
def _inside_launch() -> Iterator[bool]:
    """Yields True for the outermost launch on this thread (nested ones are not recorded twice)."""
    depth = _depth()
    _local.depth = depth + 1
    try:
        yield depth == 0
    finally:
        _local.depth = depth


def _wrap_jit_run(original):
    def run(self, *args, **kwargs):
        if _suppressing and not kwargs.get("warmup", False):
            if _depth() == 0:
                params = getattr(self, "params", None) or []
                constexprs = [p.name for p in params if getattr(p, "is_constexpr", False)] if params else None
                _record(self.fn, args, kwargs, kwargs.get("grid"), constexprs)
                _skipped(args, kwargs)
            return None
        with _inside_launch() as outermost:
            result = original(self, *args, **kwargs)
        # warmup compiles without launching; None means a jit_cache_hook skipped the launch
        if outermost and not kwargs.get("warmup", False) and result is not None:
            _KERNEL_OBJECTS[self.fn.__name__] = self
            params = getattr(self, "params", None) or []
            constexprs = [p.name for p in params if getattr(p, "is_constexpr", False)] if params else None
            _record(self.fn, args, kwargs, kwargs.get("grid"), constexprs)
        return result

    run.__wrapped__ = original
    return run


def _wrap_grid_executor_call(original):
    def __call__(self, *args, **kwargs):
        launching = not kwargs.get("warmup", False)
        if _suppressing and launching:
            if _depth() == 0:
                _record(self.fn, args, kwargs, self.grid, getattr(self, "constexprs", None))
                _skipped(args, kwargs)
            return None
        with _inside_launch() as outermost:
            result = original(self, *args, **kwargs)
        if outermost and launching:
            constexprs = getattr(self, "constexprs", None)
            _record(self.fn, args, kwargs, self.grid, constexprs)
        return result

    __call__.__wrapped__ = original
    return __call__


def _wrap_compiled_getitem(original):
    def __getitem__(self, grid):
        runner = original(self, grid)

        def recorded_runner(*args, **kwargs):
            if _suppressing:
                if _depth() == 0:
                    _record_compiled(self, grid, args)
                    _skipped(args, kwargs)
                return None
            with _inside_launch() as outermost:
                result = runner(*args, **kwargs)
            if outermost:
                _record_compiled(self, grid, args)
            return result

        return recorded_runner

    __getitem__.__wrapped__ = original
    return __getitem__


def _wrap_autotuner_bench(original):
    def _bench(self, *args, **kwargs):
        _local.benchmarking = getattr(_local, "benchmarking", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.benchmarking -= 1

    _bench.__wrapped__ = original
    return _bench


def _add(launch: KernelLaunch) -> None:
    benchmarking = getattr(_local, "benchmarking", 0) > 0
    with _lock:
        for log in _active:
            (log.autotune_launches if benchmarking else log.launches).append(launch)


# ----------------------------------------------------------------------------------------
# Describing a launch
# ----------------------------------------------------------------------------------------


def _record(fn, args, kwargs, grid, constexpr_names=None) -> None:
    try:
        launch = describe_launch(fn, args, kwargs, grid, constexpr_names)
    except Exception as exc:  # noqa: BLE001 - describing must never lose the launch itself
        launch = KernelLaunch(
            kernel=getattr(fn, "__name__", str(fn)), options={"describe_error": f"{type(exc).__name__}: {exc}"}
        )
    _add(launch)


def describe_launch(fn, args, kwargs, grid, constexpr_names=None) -> KernelLaunch:
    """A KernelLaunch for ``fn[grid](*args, **kwargs)``; ``fn`` is the kernel's Python function."""
    sig = inspect.signature(fn)
    names = list(sig.parameters)
    call_kwargs = {k: v for k, v in kwargs.items() if k in sig.parameters}
    bound = sig.bind_partial(*args, **call_kwargs)
    bound.apply_defaults()
    values = dict(bound.arguments)

    if constexpr_names is None:
        constexpr_names = [n for n, p in sig.parameters.items() if _is_constexpr_annotation(p.annotation)]
    constexpr_set = set(constexpr_names)
    annotations = {n: p.annotation for n, p in sig.parameters.items()}

    signature: dict[str, str] = {}
    constants: dict[str, Any] = {}
    specialization: dict[str, str] = {}
    for name in names:
        if name not in values:
            continue
        value = values[name]
        if name in constexpr_set:
            constants[name] = constant_to_json(value)
            continue
        ty, spec = triton_type_of(value, annotations.get(name))
        if ty == "constexpr":
            constants[name] = constant_to_json(value)
        else:
            signature[name] = ty
            if spec:
                specialization[name] = spec

    options = {
        k: v
        for k, v in kwargs.items()
        if k not in sig.parameters and k not in _PLUMBING and isinstance(v, (int, float, str, bool, type(None)))
    }
    return KernelLaunch(
        kernel=fn.__name__,
        grid=_grid_ints(grid, values),
        signature=signature,
        constants=constants,
        options=options,
        specialization=specialization,
    )


def _record_compiled(kernel, grid, args) -> None:
    """A launch of an already compiled kernel: CompiledKernel[grid](*runtime_args)."""
    try:
        src = kernel.src
        arg_names = list(getattr(src.fn, "arg_names", []))
        constant_names = {arg_names[k[0]] for k in getattr(src, "constants", {}) if isinstance(k, tuple) and len(k) == 1}
        signature = {k: str(v) for k, v in src.signature.items() if k not in constant_names and v != "constexpr"}
        constants = {
            arg_names[k[0]]: constant_to_json(v)
            for k, v in getattr(src, "constants", {}).items()
            if isinstance(k, tuple) and len(k) == 1
        }
        md = kernel.metadata
        launch = KernelLaunch(
            kernel=getattr(src.fn, "__name__", kernel.name),
            grid=[int(g) for g in grid],
            signature=signature,
            constants=constants,
            options={"num_warps": md.num_warps, "num_stages": md.num_stages},
        )
    except Exception:  # noqa: BLE001
        launch = KernelLaunch(kernel=str(getattr(kernel, "name", "compiled_kernel")), grid=[int(g) for g in grid])
    _add(launch)


def _grid_ints(grid, values: dict[str, Any]) -> list[int]:
    if grid is None:
        return []
    if callable(grid):
        grid = grid(dict(values))
    if isinstance(grid, int):
        grid = (grid,)
    return [int(g) for g in grid]


def _is_constexpr_annotation(annotation) -> bool:
    if annotation is inspect.Parameter.empty or annotation is None:
        return False
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return "constexpr" in str(text)


def _annotation_type(annotation) -> str:
    """The scalar Triton type an annotation names ("i64", "fp32", ...), or ""."""
    if annotation is inspect.Parameter.empty or annotation is None:
        return ""
    try:
        from triton.runtime.jit import _normalize_ty

        text = _normalize_ty(annotation)
    except Exception:  # noqa: BLE001
        text = annotation if isinstance(annotation, str) else str(annotation)
    text = str(text).removeprefix("tl.")
    text = _DTYPE_NAMES.get(text, text)
    return text if text in _SCALAR_TYPES else ""


def dtype_name(dtype) -> str:
    """Triton's name for a torch/numpy/triton dtype: torch.bfloat16 -> "bf16"."""
    text = str(dtype).split(".")[-1]
    return _DTYPE_NAMES.get(text, text)


def triton_type_of(value, annotation=None) -> tuple[str, str]:
    """(Triton type string, specialization key) of one runtime argument, as Triton's binder sees it.

    The key is "D" when a pointer or int is divisible by 16, "1" when an int equals
    1 (Triton compiles such an int as the constant 1), "" otherwise.
    """
    annotated = _annotation_type(annotation)
    if value is None:
        return "constexpr", ""
    if isinstance(value, bool):
        return "u1", ""
    if isinstance(value, int):
        if annotated in ("fp16", "bf16", "fp32", "fp64", "u1"):
            return annotated, ""
        if value == 1:
            spec = "1"
        else:
            spec = "D" if value % 16 == 0 else ""
        if annotated:
            return annotated, spec
        if -(2**31) <= value <= 2**31 - 1:
            return "i32", spec
        if 2**63 <= value <= 2**64 - 1:
            return "u64", spec
        return "i64", spec
    if isinstance(value, float):
        return (annotated or "fp32"), ""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        try:
            aligned = int(value.data_ptr()) % 16 == 0
        except Exception:  # noqa: BLE001
            aligned = False
        return "*" + dtype_name(value.dtype), ("D" if aligned else "")
    cls = type(value).__name__
    if cls == "constexpr" or cls in ("JITFunction", "InterpretedFunction", "Autotuner", "Heuristics"):
        return "constexpr", ""
    if hasattr(value, "base") and hasattr(value, "block_shape"):  # TensorDescriptor
        return f"tensordesc<{dtype_name(value.base.dtype)}{list(value.block_shape)}>", ""
    if isinstance(value, tuple):
        inner = [triton_type_of(v)[0] for v in value]
        return "(" + ",".join(inner) + ")", ""
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:  # numpy scalar
        return triton_type_of(value.item(), annotation)
    return f"unsupported<{cls}>", ""


def constant_to_json(value) -> Any:
    """A constexpr value in a JSON-safe form cross-compiling can turn back into the value."""
    cls = type(value).__name__
    if cls == "constexpr":
        value = getattr(value, "value", value)
        cls = type(value).__name__
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if cls in ("JITFunction", "InterpretedFunction", "Autotuner", "Heuristics"):
        inner = value
        while hasattr(inner, "fn") and not callable(getattr(inner, "__code__", None)):
            inner = inner.fn
        return f"triton.jit:{getattr(inner, '__name__', cls)}"
    try:
        import triton.language as tl

        if isinstance(value, tl.dtype):
            for attr in _TL_DTYPE_ATTRS:
                if getattr(tl, attr, None) == value:
                    return f"tl.{attr}"
            return f"tl.dtype:{value.name}"
    except Exception:  # noqa: BLE001
        pass
    if isinstance(value, (tuple, list)):
        return [constant_to_json(v) for v in value]
    return repr(value)
