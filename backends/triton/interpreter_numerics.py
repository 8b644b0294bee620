"""Make Triton's CPU interpreter round like the GPU does, where it does not.

The interpreter keeps bfloat16 values as their raw ``uint16`` bits (numpy has
no bfloat16), and hands those bits straight to numpy: ``tl.dot`` of two bf16
blocks multiplies the *integers* (off by ~1e9), and bf16 ``+ - * /``,
comparisons and ``max``/``min`` work on bit patterns too. A GPU computes bf16
products exactly and accumulates a dot in fp32; element-wise bf16 arithmetic
rounds each result back to bf16. Here bf16 operands are widened to fp32 (exact),
computed in fp32, and rounded back to bf16 (round-to-nearest-even) where the
result is bf16.

An fp32 ``tl.dot`` defaults to ``input_precision="tf32"`` on NVIDIA GPUs: the
tensor cores read each operand with a 10-bit mantissa. The interpreter computes
in full fp32, so a kernel whose accuracy depends on the difference would look
better on CPU than on the GPU. Here both operands are cut to TF32 (the low 13
mantissa bits dropped, as measured on an H100: see ``f32_to_tf32_operand``) before the
product when the dot's precision is TF32 (what ``tl.dot`` passes down when
neither ``input_precision="ieee"``, ``allow_tf32=False`` nor
``TRITON_F32_DEFAULT`` says otherwise); "tf32x3" (three TF32 passes, near-fp32)
and "ieee" stay in fp32. fp16 dots were already right (numpy widens them to the
fp32 accumulator's type).

An fp32 value cast to bf16 (``x.to(tl.bfloat16)``, or stored through a bf16 pointer)
rounds to nearest even on a GPU; the interpreter cuts the low 16 bits off (and its
round-to-nearest mode rounds half up without carrying into the exponent). A correct
kernel's bf16 outputs came out up to one bf16 step low on the CPU, more error than the GPU
gives: here the cast rounds to nearest even, and ``fp_downcast_rounding="rtz"`` truncates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

_ORIGINALS: dict[str, Callable] = {}
_ELEMENTWISE = ("binary_op", "ternary_op", "unary_op", "create_fma", "create_rsqrt", "create_erf")


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) to the fp32 values they hold (exact)."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp32 values to bfloat16 bit patterns, rounding to nearest even (NaN stays a quiet NaN)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(np.isnan(values), np.uint32(0x7FC0), rounded).astype(np.uint16)


def f32_to_tf32_operand(values: np.ndarray) -> np.ndarray:
    """fp32 values as an NVIDIA tensor core reads them for a TF32 dot: the 13 low mantissa bits
    dropped (10 left), Inf and NaN unchanged. Truncation, not rounding: on an H100 (Triton 3.6) a
    32x256 @ 256x16 fp32 ``tl.dot`` has rel-L2 error 7.95e-4 against fp64; truncating both operands
    gives 7.94e-4 on the same data, rounding them to nearest even 2.7e-4."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    return np.where(special, bits, bits & np.uint32(0xFFFFE000)).view(np.float32)


def install_hardware_numerics() -> None:
    """Patch the interpreter's builder (dot, element-wise bf16); idempotent."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if _ORIGINALS:
        return
    for name in ("create_dot", "create_masked_load", "create_masked_store", "cast_impl", "create_fp_to_fp",
                 *_ELEMENTWISE):
        _ORIGINALS[name] = getattr(builder, name)
    builder.create_dot = _hardware_dot
    builder.cast_impl = _rounding_cast
    builder.create_fp_to_fp = _rounding_fp_to_fp
    builder.create_masked_load = _boolean_mask_load
    builder.create_masked_store = _boolean_mask_store
    builder.binary_op = _bf16_binary
    builder.ternary_op = _bf16_ternary
    builder.create_fma = _bf16_fma
    for name in ("unary_op", "create_rsqrt", "create_erf"):
        setattr(builder, name, _bf16_unary(_ORIGINALS[name]))
    reduce_ops = interpreter.ReduceOps
    _ORIGINALS["reduce_sum"], _ORIGINALS["reduce_min_max"] = reduce_ops.sum, reduce_ops.min_max
    reduce_ops.sum = _bf16_reduce_sum
    reduce_ops.min_max = _bf16_reduce_min_max


def uninstall_hardware_numerics() -> None:
    from triton.runtime import interpreter

    for name, original in _ORIGINALS.items():
        if name == "reduce_sum":
            interpreter.ReduceOps.sum = original
        elif name == "reduce_min_max":
            interpreter.ReduceOps.min_max = original
        else:
            setattr(interpreter.InterpreterBuilder, name, original)
    _ORIGINALS.clear()


def _bf16_reduce_sum(self: Any, input: Any) -> Any:
    """``tl.sum`` of bf16 values (kept here as their 16-bit patterns): summed in fp32, rounded to
    bf16 once. NumPy summed the bit patterns as integers (``[-1, -2, 0.5, -0.25]`` gave 1e37)."""
    data = input.handle.data
    if not (_is_bf16(input.handle) and data.dtype == np.uint16):
        return _ORIGINALS["reduce_sum"](self, input)
    total = np.sum(bf16_bits_to_f32(data), axis=self.axis, keepdims=self.keep_dims, dtype=np.float32)
    return self.to_tensor(f32_to_bf16_bits(np.asarray(total, dtype=np.float32)), input.dtype)


def _bf16_reduce_min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
    """``tl.max``/``tl.min``/``tl.argmax``/``tl.argmin`` of bf16 values compared as numbers, not as
    bit patterns (a negative bf16's pattern is a large unsigned integer)."""
    import triton.language as tl

    value = input[0] if isinstance(input, tuple) else input
    data = value.handle.data
    if not (_is_bf16(value.handle) and data.dtype == np.uint16):
        return _ORIGINALS["reduce_min_max"](self, input, val_reduce_op, idx_reduce_op)
    widened = bf16_bits_to_f32(data)
    found = []
    if val_reduce_op:
        extreme = np.asarray(val_reduce_op(widened, axis=self.axis, keepdims=self.keep_dims), dtype=np.float32)
        found.append(self.to_tensor(f32_to_bf16_bits(extreme), value.dtype))
    if idx_reduce_op:
        found.append(self.to_tensor(idx_reduce_op(widened, axis=self.axis, keepdims=self.keep_dims), tl.int32))
    return tuple(found) if len(found) == 2 else found[0]


def _as_boolean_mask(mask: Any) -> Any:
    """A mask as the compiler types it: i1. The interpreter can leave a comparison with a
    constexpr combined by ``&`` as int32 0/1 (``(pid < M) & (offs < N)`` with ``M: tl.constexpr``),
    which its loads and stores then refuse; on a GPU the same mask is a plain predicate."""
    data = getattr(mask, "data", None)
    if isinstance(data, np.ndarray) and data.dtype != np.bool_ and np.issubdtype(data.dtype, np.integer):
        import triton.language as tl

        return type(mask)(data != 0, tl.int1)
    return mask


def _boolean_mask_load(self: Any, ptrs: Any, mask: Any, other: Any, *args: Any) -> Any:
    return _ORIGINALS["create_masked_load"](self, ptrs, _as_boolean_mask(mask), other, *args)


def _boolean_mask_store(self: Any, ptrs: Any, value: Any, mask: Any, *args: Any) -> Any:
    return _ORIGINALS["create_masked_store"](self, ptrs, value, _as_boolean_mask(mask), *args)


def _is_bf16(handle: Any) -> bool:
    import triton.language as tl

    return getattr(handle.dtype, "scalar", handle.dtype) == tl.bfloat16


def _tf32_precision() -> Any:
    from triton._C.libtriton import ir

    return ir.INPUT_PRECISION.TF32


def _hardware_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
    """``create_dot`` as tensor cores compute it: bf16 operands exact into an fp32 accumulator,
    fp32 operands read as TF32 when the precision says so."""
    from triton.runtime.interpreter import TensorHandle

    if _is_bf16(a) and _is_bf16(b):
        product = np.matmul(bf16_bits_to_f32(a.data), bf16_bits_to_f32(b.data), dtype=np.float32)
        return TensorHandle((product + d.data).astype(d.data.dtype), d.dtype.scalar)
    if a.data.dtype == np.float32 and b.data.dtype == np.float32 and input_precision == _tf32_precision():
        a = TensorHandle(f32_to_tf32_operand(a.data), a.dtype.scalar)
        b = TensorHandle(f32_to_tf32_operand(b.data), b.dtype.scalar)
    return _ORIGINALS["create_dot"](self, a, b, d, input_precision, max_num_imprecise_acc)


def _f32_to_bf16(src: Any, dst_type: Any) -> Any | None:
    """The handle of an fp32 (or fp64) -> bf16 cast rounded to nearest even, or None for other
    casts. fp64 goes through fp32 first, as Triton lowers it: the interpreter's own cast would
    reinterpret the fp64 value's bits (1.73 became 9.2e-41, negatives NaN patterns)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if src.dtype.scalar not in (tl.float32, tl.float64) or dst_type.scalar != tl.bfloat16:
        return None
    return TensorHandle(f32_to_bf16_bits(np.asarray(src.data).astype(np.float32)), dst_type.scalar)


def _rounding_cast(self: Any, src: Any, dst_type: Any) -> Any:
    """``cast_impl`` (``.to()``, the implicit cast of a store) with fp32 -> bf16 rounded as a GPU rounds."""
    cast = _f32_to_bf16(src, dst_type)
    return cast if cast is not None else _ORIGINALS["cast_impl"](self, src, dst_type)


def _rounding_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
    """``create_fp_to_fp`` (``.to(..., fp_downcast_rounding=...)``): fp32 -> bf16 rounded to nearest
    even unless the kernel asks for round-towards-zero."""
    from triton._C.libtriton import ir
    from triton.runtime.interpreter import TensorHandle

    if rounding_mode == ir.ROUNDING_MODE.RTZ and _f32_to_bf16(src, dst_type) is not None:
        bits = np.asarray(src.data, dtype=np.float32).view(np.uint32) >> np.uint32(16)
        return TensorHandle(bits.astype(np.uint16), dst_type.scalar)
    cast = _f32_to_bf16(src, dst_type)
    return cast if cast is not None else _ORIGINALS["create_fp_to_fp"](self, src, dst_type, rounding_mode)


def _widen(handle: Any) -> Any:
    """A bf16 handle's values as fp32 (exact); other handles' data as they are."""
    return bf16_bits_to_f32(handle.data) if _is_bf16(handle) and handle.data.dtype == np.uint16 else handle.data


def _bf16_result(values: np.ndarray, dtype: Any) -> Any:
    """A handle of type ``dtype`` (bf16) for fp32 ``values`` (rounded to bf16 bits); booleans
    (comparisons) stay as they are, as the interpreter keeps them."""
    from triton.runtime.interpreter import TensorHandle

    if values.dtype == np.bool_:
        return TensorHandle(values, dtype)
    return TensorHandle(f32_to_bf16_bits(values.astype(np.float32)), dtype)


def _any_bf16(*handles: Any) -> bool:
    return any(_is_bf16(h) and h.data.dtype == np.uint16 for h in handles)


def _bf16_binary(self: Any, lhs: Any, rhs: Any, op: Callable) -> Any:
    """``binary_op``: bf16 operands computed in fp32, a float result rounded back to bf16."""
    if not _any_bf16(lhs, rhs):
        return _ORIGINALS["binary_op"](self, lhs, rhs, op)
    return _bf16_result(op(_widen(lhs), _widen(rhs)), lhs.dtype.scalar)


def _bf16_ternary(self: Any, first: Any, second: Any, third: Any, op: Callable) -> Any:
    """``ternary_op`` (select, clamp) with bf16 values: the condition of a select is never widened."""
    if not _any_bf16(second, third):
        return _ORIGINALS["ternary_op"](self, first, second, third, op)
    return _bf16_result(op(_widen(first), _widen(second), _widen(third)), third.dtype.scalar)


def _bf16_fma(self: Any, x: Any, y: Any, z: Any) -> Any:
    """``create_fma`` with bf16 operands: one rounding of the exact fp64 result (to bf16)."""
    if not _any_bf16(x, y, z):
        return _ORIGINALS["create_fma"](self, x, y, z)
    exact = np.multiply(_widen(x), _widen(y), dtype=np.float64) + _widen(z)
    return _bf16_result(exact.astype(np.float32), z.dtype.scalar)


def _bf16_unary(original: Callable) -> Callable:
    """A one-operand builder op (``unary_op``, rsqrt, erf) on bf16: in fp32, rounded back."""

    def op(self: Any, arg: Any, *rest: Any) -> Any:
        if not _any_bf16(arg):
            return original(self, arg, *rest)
        from triton.runtime.interpreter import TensorHandle

        result = original(self, TensorHandle(_widen(arg), arg.dtype.scalar), *rest)
        return _bf16_result(np.asarray(result.data), arg.dtype.scalar)

    return op
