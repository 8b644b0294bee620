"""Run GPU-style Triton code in Triton's CPU interpreter as it would run on a GPU.

LLM-written kernels use idioms that stop CPU verification before any kernel
runs, or that the interpreter computes differently from the hardware. The
process that verifies on CPU calls :func:`install_interpreter_compat` (from
``TritonBackend.prepare_process``) before any candidate imports triton:

* ``@triton.autotune``: each launch takes the next config in turn instead of
  benchmarking (``interpreter_autotune``); ``autotune_coverage()`` says which
  configs a checked launch ran.
* ``tl.dot`` and element-wise bf16, TF32 operand rounding (``interpreter_numerics``).
* loop indices of ``range``/``tl.range`` are Triton integers, as in compiled
  code (``tile.to(tl.int64)`` in a persistent loop), here.
* the int32 overflow checks whose assertion the interpreter drops are not computed, here.
* ``libdevice`` functions the interpreter has no body for, and the
  grid-dependency fences ``gdc_wait``/``gdc_launch_dependents``, here.

The torch-side idioms (``x.is_cuda``, ``device="cuda"``, ``torch.cuda.*``) are
mapped only while the candidate's code runs: ``backends/cpu_devices.gpu_idioms_on_cpu``.
What still cannot run on CPU is named by :func:`needs_gpu_reason`.
"""

from __future__ import annotations

import ast
import linecache
import re
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kgen.backends.cpu_devices import gpu_idioms_on_cpu
from kgen.backends.triton.interpreter_autotune import (
    AutotuneCoverage,
    autotune_coverage,
    install_autotune_rotation,
    reset_autotune_coverage,
)
from kgen.backends.triton.interpreter_numerics import install_hardware_numerics

__all__ = [
    "AutotuneCoverage", "autotune_coverage", "gpu_idioms_on_cpu", "install_interpreter_compat",
    "needs_gpu_reason", "reset_autotune_coverage",
]

_INSTALLED = False
_LOOP_HELPER = "_kgen_triton_loop"


def install_interpreter_compat() -> None:
    """Patch Triton's interpreter for this process (idempotent); TRITON_INTERPRET=1 must be set."""
    global _INSTALLED
    if _INSTALLED:
        return
    install_autotune_rotation()
    install_hardware_numerics()
    _install_loop_indices()
    _skip_dead_overflow_checks()
    _install_libdevice()
    _INSTALLED = True


# -- integer overflow checks ------------------------------------------------------------------
def _skip_dead_overflow_checks() -> None:
    """Triton checks each int32 add, sub and mul for overflow by redoing it in int64, comparing
    the result with the int32 bounds and passing that to ``device_assert``, which drops it unless
    the kernel is built with ``debug``. The interpreter's options never set ``debug``, so the
    check changes nothing and costs about ten interpreted operations per integer operation: half
    the time of a kernel that walks a row element by element (``tile_start + i`` each step, with
    the Triton-integer loop indices below). Off here, as the check is in a GPU build without
    ``debug``; a process that does turn ``debug`` on keeps it."""
    import dataclasses

    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    if not builder.options.debug:
        builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)


# -- loop indices -----------------------------------------------------------------------------
def _install_loop_indices() -> None:
    """Compiled Triton gives ``for i in range(...)``/``tl.range`` an int32 (or int64) tensor index;
    the interpreter runs Python's ``range``, so ``i.to(tl.int64)`` fails on a plain int. The
    interpreter already rewrites each kernel's AST; one more rule wraps those loops' iterables."""
    from triton.runtime import interpreter

    base = interpreter.FunctionRewriter.ast_transformer.__class__
    interpreter.FunctionRewriter.ast_transformer = type("LoopIndexTransformer", (base,), {"visit_For": _visit_for})()
    # The rewriter copies the interpreter module's globals into each kernel's globals.
    setattr(interpreter, _LOOP_HELPER, triton_loop)


def _visit_for(self: ast.NodeTransformer, node: ast.For) -> ast.For:
    node = self.generic_visit(node)
    call = node.iter
    if isinstance(call, ast.Call) and _is_dynamic_range(call.func):
        node.iter = ast.copy_location(
            ast.Call(func=ast.Name(id=_LOOP_HELPER, ctx=ast.Load()), args=[call.func, *call.args],
                     keywords=call.keywords),
            call,
        )
    return node


def _is_dynamic_range(func: ast.expr) -> bool:
    """``range(...)`` or ``<module>.range(...)`` (``tl.range``); never ``tl.static_range``."""
    return (isinstance(func, ast.Name) and func.id == "range") or (
        isinstance(func, ast.Attribute) and func.attr == "range"
    )


#: ``tl.range``'s bounds when passed by keyword (``tl.range(pid, n, step=tl.num_programs(0))``)
_BOUND_KEYWORDS = frozenset({"arg1", "arg2", "step"})


def triton_loop(make_range: Callable, *bounds: Any, **options: Any) -> Iterator[Any]:
    """The loop's indices as Triton scalars, typed as the compiler types an induction variable:
    int64 if a bound is an int64 tensor or beyond int32, else int32. Bounds may come by
    position or, for ``tl.range``, by keyword; the other options (``num_stages``, ...) pass on."""
    import triton.language as tl
    from triton.runtime.interpreter import interpreter_builder

    named = {k: v for k, v in options.items() if k in _BOUND_KEYWORDS}
    rest = {k: v for k, v in options.items() if k not in _BOUND_KEYWORDS}
    wide = any(_is_wide(b) for b in (*bounds, *named.values()))
    dtype, make = (tl.int64, interpreter_builder.get_int64) if wide else (tl.int32, interpreter_builder.get_int32)
    ints = {k: _python_int(v) for k, v in named.items()}
    for index in make_range(*[_python_int(b) for b in bounds], **ints, **rest):
        yield tl.tensor(make(int(index)), dtype)


def _python_int(bound: Any) -> Any:
    """A scalar tensor bound (``tl.program_id(0)``) as an int. Some Triton versions' ``__index__``
    calls ``int()`` on the 1-element array, which numpy 2 refuses."""
    import triton.language as tl

    if isinstance(bound, tl.tensor):
        return int(np.asarray(bound.handle.data).reshape(-1)[0])
    return getattr(bound, "value", bound)


def _is_wide(bound: Any) -> bool:
    import triton.language as tl

    if isinstance(bound, tl.tensor):
        return bound.dtype in (tl.int64, tl.uint64)
    value = getattr(bound, "value", bound)
    return isinstance(value, int) and not -(2**31) <= value < 2**31


# -- libdevice ---------------------------------------------------------------------------------
#: libdevice symbol stem (``__nv_<stem>[f]``) -> numpy implementation
_LIBDEVICE: dict[str, Callable[..., np.ndarray]] = {
    "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "atan2": np.arctan2, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
    "exp10": lambda x: np.power(x.dtype.type(10), x), "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt,
    "fabs": np.abs, "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint,
    "nearbyint": np.rint, "round": lambda x: np.trunc(x + np.copysign(x.dtype.type(0.5), x)),
    "pow": np.power, "powi": np.power, "fmod": np.fmod, "fmin": np.fmin, "fmax": np.fmax, "hypot": np.hypot,
    "copysign": np.copysign, "fma": lambda x, y, z: (x.astype(np.float64) * y + z).astype(x.dtype),
    "isnan": lambda x: np.isnan(x).astype(np.int32), "isinf": lambda x: np.isinf(x).astype(np.int32),
    "signbit": lambda x: np.signbit(x).astype(np.int32), "div_rn": np.divide, "fdiv_rn": np.divide,
    "erf": None, "erfc": None, "saturate": lambda x: np.clip(x, 0, 1),
}


def _install_libdevice() -> None:
    """``libdevice.tanh`` and friends run through ``extern_elementwise``, which the interpreter
    refuses, and the backend-neutral ``triton.language.extra.libdevice`` stubs return None there.
    Give both a numpy body; an unlisted function raises a NotImplementedError that
    :func:`needs_gpu_reason` names. ``gdc_wait``/``gdc_launch_dependents`` order a kernel after
    its predecessor's grid: the interpreter runs launches one after another, so they are no-ops."""
    from triton.language.extra import libdevice as neutral
    from triton.language.extra.cuda import gdc
    from triton.language.extra.cuda import libdevice as cuda_libdevice
    from triton.runtime import interpreter

    interpreter.InterpreterBuilder.create_extern_elementwise = _extern_elementwise
    for name in dir(cuda_libdevice):
        member = getattr(cuda_libdevice, name)
        if callable(member) and getattr(member, "__module__", "") == cuda_libdevice.__name__:
            bound = _with_interpreter_semantic(member)
            setattr(cuda_libdevice, name, bound)
            if hasattr(neutral, name):
                setattr(neutral, name, bound)
    for module in (gdc, __import__("triton.language.extra.cuda", fromlist=["cuda"])):
        for name in ("gdc_wait", "gdc_launch_dependents"):
            if hasattr(module, name):
                setattr(module, name, _no_op)


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


def _with_interpreter_semantic(fn: Callable) -> Callable:
    """Call a ``@core.extern`` function with the interpreter's semantic, as the interpreter does
    for ``tl.*`` builtins (it patches only the modules a kernel's globals name)."""

    def call(*args: Any, _semantic: Any = None, **kwargs: Any) -> Any:
        from triton.runtime.interpreter import interpreter_semantic

        return fn(*args, _semantic=_semantic or interpreter_semantic, **kwargs)

    call.__name__ = getattr(fn, "__name__", "libdevice")
    call.__doc__ = fn.__doc__
    return call


def _extern_elementwise(self: Any, lib_name: str, lib_path: str, symbol: str, args: list, ret_type: Any,
                        is_pure: bool) -> Any:
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    stem = _libdevice_stem(symbol)
    fn = _LIBDEVICE.get(stem) if stem is not None else None
    if stem in ("erf", "erfc"):
        fn = _erf if stem == "erf" else (lambda x: 1 - _erf(x))
    if fn is None:
        raise NotImplementedError(f"extern_elementwise {symbol} (libdevice) not supported in interpreter mode")
    data = np.asarray(fn(*np.broadcast_arrays(*[a.data for a in args])))
    dtype = ret_type.scalar
    return TensorHandle(data.astype(_get_np_dtype(dtype)), dtype)


def _libdevice_stem(symbol: str) -> str | None:
    """"__nv_tanhf" -> "tanh", "__nv_powif" -> "powi", "__nv_fast_expf" -> "exp"; None if not libdevice."""
    if not symbol.startswith("__nv_"):
        return None
    stem = symbol[len("__nv_"):].removeprefix("fast_")
    if stem in _LIBDEVICE:
        return stem
    if stem.endswith("f") and stem[:-1] in _LIBDEVICE:
        return stem[:-1]
    return stem


def _erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf, otypes=[x.dtype])(x)


# -- what cannot run on CPU --------------------------------------------------------------------
_TEXT_REASONS: tuple[tuple[type, str, str], ...] = (
    (NotImplementedError, "inline_asm not supported in interpreter mode",
     "tl.inline_asm_elementwise does not run in Triton's CPU interpreter"),
    (NotImplementedError, "extern_elementwise",
     "this libdevice/extern_elementwise function does not run in Triton's CPU interpreter"),
    (RuntimeError, "active drivers", "triton.runtime.driver.active (the GPU driver) is absent in Triton's CPU interpreter"),
    (AssertionError, "Torch not compiled with CUDA enabled", "a torch.cuda API kgen does not emulate on CPU"),
    (RuntimeError, "requires CUDA support", "a torch.cuda API kgen does not emulate on CPU"),
    (RuntimeError, "Torch not compiled with CUDA enabled", "a torch.cuda API kgen does not emulate on CPU"),
)


def needs_gpu_reason(exc: BaseException) -> str | None:
    """Why ``exc`` says "the CPU interpreter cannot run this" rather than "the candidate is wrong":
    a short reason, or None. Looks through the exception's causes (the interpreter wraps a
    kernel's exception in ``InterpreterError``). Only failures that a GPU run would not have are
    named: an ordinary bug (a bad mask, a shape mismatch, an assertion the kernel makes) is None."""
    for link in _chain(exc):
        reason = _reason_for(link)
        if reason is not None:
            return reason
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < 16:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _reason_for(exc: BaseException) -> str | None:
    text = str(exc)
    for kind, needle, reason in _TEXT_REASONS:
        if isinstance(exc, kind) and needle in text:
            return _libdevice_reason(text) if needle == "extern_elementwise" else reason
    if isinstance(exc, ValueError) and "_semantic` argument must be provided" in text:
        name = _extra_function(exc)
        if name is not None:
            return f"{name} does not run in Triton's CPU interpreter"
    return _device_type_check(exc)


#: A source line that asks which device a tensor is on by its type (``x.device.type == "cuda"``,
#: ``str(x.device).startswith("cuda")``): the one idiom the CPU emulation cannot answer, since
#: ``torch.device`` is a C type the interpreter's own copies rely on.
_DEVICE_TYPE_TEST = re.compile(r"device(\.type|\))?\s*(==|!=|\.startswith\(|in\b)[^#]*cuda|cuda[^#]*(==|!=|\bin\b)[^#]*\.device")


def _device_type_check(exc: BaseException) -> str | None:
    """An assertion (or a raise right after an ``if``) about the device's type failed: on a GPU
    it holds; on the CPU ``tensor.device`` stays the CPU whatever else is emulated."""
    if not isinstance(exc, (AssertionError, ValueError, RuntimeError, TypeError)):
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    line = linecache.getline(last.filename, last.lineno).strip()
    if line.startswith("raise"):  # the test is the `if` just above the raise
        above = [linecache.getline(last.filename, n).strip() for n in (last.lineno - 1, last.lineno - 2) if n > 0]
        line = next((a for a in above if a.startswith(("if ", "elif "))), line)
    if _DEVICE_TYPE_TEST.search(line):
        return "the candidate requires `tensor.device.type == \"cuda\"`, which a CPU run cannot satisfy"
    return None


def _libdevice_reason(text: str) -> str:
    symbol = next((w for w in text.split() if w.startswith("__nv_") or w.startswith("__ocml_")), None)
    what = f"libdevice {symbol}" if symbol else "this libdevice/extern_elementwise function"
    return f"{what} does not run in Triton's CPU interpreter"


def _extra_function(exc: BaseException) -> str | None:
    """The ``triton.language.extra`` function (``tl.extra.cuda.smid``, ...) that a ``_semantic``
    error was raised for; None when it was an ordinary ``tl`` builtin called outside a kernel."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        fn = frame.f_locals.get("fn")
        module = getattr(fn, "__module__", "") or ""
        if module.startswith("triton.language.extra"):
            package = ".".join(module.split(".")[2:4])  # "extra.cuda" of triton.language.extra.cuda.utils
            return f"tl.{package}.{getattr(fn, '__name__', '?')}"
    return None
