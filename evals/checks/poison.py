"""Poisoned memory and guard zones, from inside the dispatcher.

The AI CUDA Engineer's "10-100x" kernels never wrote their output: PyTorch's
caching allocator handed them the reference's freed output, already holding
the right answer. Two things close that door here:

* while the candidate runs, every uninitialised allocation it makes
  (``aten.empty``, ``empty_like``, ``empty_strided``, ``new_empty`` ..., however
  it was reached) comes back filled with a recognisable NaN bit pattern instead
  of whatever was there;
* on CUDA, before each candidate call, blocks of the outputs' sizes are
  filled with the same pattern and freed, so memory the caching allocator
  hands out by any other route holds poison too.

An output element that still holds the exact poison bits afterwards was
never written by the kernel: all of them is an unwritten output, some of
them a partial write (a grid that misses part of the output).

The poisoning happens in a ``TorchDispatchMode`` (:func:`poisoned_allocations`),
below every Python name: ``torch.empty`` stays the very same builtin, so a
candidate cannot tell a watched call from an unwatched one by looking at the
functions it calls (and one trial runs with no instrumentation at all, to
catch the rest).

**Guard zones.** Each allocation the candidate makes inside the block gets a
storage :data:`GUARD_BYTES` longer than it asked for, the tail filled with a
canary pattern. A kernel that stores past the end of its buffer (a mask one
element too wide, an unmasked tail block) changes the canary, which
:meth:`AllocationLog.overruns` reports after the call, for outputs and
intermediates alike; an out-of-bounds *read* lands on poison and shows as NaN.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from kgen.evals.checks.torch_usage import dispatched_by_triton_interpreter
from kgen.evals.problem.format import sizes_text
from kgen.evals.verdict import Rejected, RejectionClass, Trial

#: Quiet-NaN payloads (exponent all ones, quiet bit set, so copies through
#: numpy or registers keep the bits) that no arithmetic produces.
_FLOAT_BITS: dict[torch.dtype, tuple[torch.dtype, int]] = {
    torch.float64: (torch.int64, 0x7FFBADBADBADBAD1),
    torch.float32: (torch.int32, 0x7FDADBAD),
    torch.float16: (torch.int16, 0x7EBD),
    torch.bfloat16: (torch.int16, 0x7FDD),
}
#: Integer outputs get a value far outside any index or count.
_INT_VALUE = -0x5A5A5A5A
#: Bytes of canary after every allocation the candidate makes (a whole block of 1024 fp32
#: elements past the end fits; a write further out lands in memory nobody checks).
GUARD_BYTES = 8192
#: The canary's byte (for every dtype: the guard is checked as raw bytes).
_CANARY = 0xA7

#: aten factory ops whose result is uninitialised memory
_UNINITIALISED = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


def _poison_bits(dtype: torch.dtype) -> tuple[torch.dtype, int]:
    """The integer view and the (signed) bit pattern of a float dtype's poison."""
    int_dtype, bits = _FLOAT_BITS[dtype]
    width = torch.iinfo(int_dtype).bits
    return int_dtype, bits - (1 << width) if bits >= 1 << (width - 1) else bits


def fill_poison(tensor: torch.Tensor) -> torch.Tensor:
    """Overwrite a tensor's whole storage with the poison pattern for its dtype."""
    if tensor.numel() == 0:
        return tensor
    if tensor.dtype in _FLOAT_BITS:
        fill_poison_elements(tensor.as_strided((tensor.untyped_storage().nbytes() // tensor.element_size(),), (1,), 0))
    else:
        fill_poison_elements(tensor)
    return tensor


def poison_span(tensor: torch.Tensor) -> None:
    """Poison every element a kernel given ``tensor`` could address through its own strides:
    from its first element to its last, in its storage (the verifier's stand-in for a kernel
    that did not run)."""
    if tensor.numel() == 0 or tensor.layout != torch.strided:
        return
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
    flat = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    flat.set_(tensor.untyped_storage(), tensor.storage_offset(), (span,), (1,))
    with torch.no_grad():
        fill_poison_elements(flat)


def fill_poison_elements(tensor: torch.Tensor) -> None:
    """Poison exactly the tensor's own (contiguous) elements; dtypes without a pattern are left alone."""
    if tensor.dtype in _FLOAT_BITS:
        int_dtype, bits = _poison_bits(tensor.dtype)
        tensor.view(int_dtype).fill_(bits)
    elif tensor.dtype in (torch.int32, torch.int64):
        tensor.fill_(_INT_VALUE)
    elif tensor.dtype.is_floating_point:
        tensor.fill_(float("nan"))


def poison_mask(tensor: torch.Tensor) -> torch.Tensor:
    """Where the tensor still holds the exact poison pattern (all False for dtypes without one)."""
    if tensor.dtype in _FLOAT_BITS:
        int_dtype, bits = _poison_bits(tensor.dtype)
        return tensor.detach().contiguous().view(int_dtype) == bits
    if tensor.dtype in (torch.int32, torch.int64):
        return tensor.detach() == _INT_VALUE
    return torch.zeros(tensor.shape, dtype=torch.bool, device=tensor.device)


def poisoned_count(tensor: torch.Tensor) -> int:
    """How many elements still hold the exact poison pattern."""
    if tensor.numel() == 0:
        return 0
    return int(poison_mask(tensor).sum().item())


# ----------------------------------------------------------------------------------------
# Allocations with guard zones, from a dispatch mode
# ----------------------------------------------------------------------------------------


@dataclass
class _Guarded:
    tensor: torch.Tensor
    guard: torch.Tensor  # uint8 view of the canary bytes after the tensor's storage span


@dataclass
class AllocationLog:
    """The allocations one watched call made, each with its canary."""

    allocations: list[_Guarded] = field(default_factory=list)

    def overruns(self) -> list[tuple[torch.Tensor, int]]:
        """(allocation, bytes of its canary overwritten) for every allocation written past its end."""
        found = []
        for entry in self.allocations:
            changed = int((entry.guard != _CANARY).sum().item())
            if changed:
                found.append((entry.tensor, changed))
        return found

    def clear(self) -> None:
        self.allocations.clear()


def _guarded_like(proto: torch.Tensor, log: AllocationLog) -> torch.Tensor:
    """A poisoned tensor laid out exactly as ``proto`` whose storage is followed by a canary."""
    nbytes = proto.untyped_storage().nbytes()
    raw = torch.empty((nbytes + GUARD_BYTES,), dtype=torch.uint8, device=proto.device)
    raw[nbytes:].fill_(_CANARY)
    body = torch.empty(0, dtype=proto.dtype, device=proto.device)
    body.set_(raw.untyped_storage(), 0, (nbytes // proto.element_size(),), (1,))
    fill_poison_elements(body)
    out = torch.empty(0, dtype=proto.dtype, device=proto.device)
    out.set_(raw.untyped_storage(), proto.storage_offset(), proto.size(), proto.stride())
    log.allocations.append(_Guarded(out, raw[nbytes:]))
    return out


def _make_mode(log: AllocationLog):
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Poison(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in _UNINITIALISED or not isinstance(result, torch.Tensor) or result.numel() == 0:
                return result
            if dispatched_by_triton_interpreter(sys._getframe(1)):
                return result  # the interpreter's own host copies of kernel arguments
            if result.layout != torch.strided or result.device.type == "meta":
                return result
            return _guarded_like(result, log)

    return _Poison()


@contextmanager
def poisoned_allocations() -> Iterator[AllocationLog]:
    """Uninitialised allocations made inside the block come back poisoned and guarded.

    Enter it *outside* any op recorder: the fills and ``set_`` it does itself are kgen's
    work, and a mode only sees ops issued by the code above it.
    """
    log = AllocationLog()
    with _make_mode(log):
        yield log


#: Above this size, one poisoned block per output instead of two.
LARGE_POISON_BYTES = 1 << 30


def poison_allocator(like: Sequence[torch.Tensor], device: torch.device) -> None:
    """Fill and free blocks of the outputs' sizes so the CUDA caching allocator reuses poison."""
    if device.type != "cuda":
        return
    # Two blocks of each size (a candidate's output and a scratch buffer alike), one for an
    # output of gigabytes: its poison is a transient the memory plan has to pay for.
    blocks = [fill_poison(torch.empty_like(t, device=device)) for t in like
              for _ in range(1 if t.numel() * t.element_size() > LARGE_POISON_BYTES else 2)]
    torch.cuda.synchronize(device)
    del blocks


def check_unwritten(outputs: list[Any], trial: Trial, what: str, first_sizes: dict[str, int],
                    normal_passed: bool) -> None:
    """Poison left in an output names what the kernel never wrote: all of it, part of it, or
    part of it only at sizes other than the first (a grid sized for one shape), once a trial
    on normal inputs has passed (``normal_passed``) at ``first_sizes``."""
    for i, out in enumerate(outputs):
        left = poisoned_count(out)
        if left and trial.sizes != first_sizes and normal_passed:
            raise Rejected(
                RejectionClass.SHAPE_SPECIALISATION,
                f"right at sizes {sizes_text(first_sizes)}, but at other sizes {left} of "
                f"{out.numel()} elements of output {i} were never written ({what})",
            )
        if left == out.numel() and left:
            raise Rejected(
                RejectionClass.UNWRITTEN_OUTPUT,
                f"output {i} was never written: all {left} elements still hold the poison kgen put in "
                f"fresh memory ({what})",
            )
        if left:
            raise Rejected(
                RejectionClass.PARTIAL_OUTPUT,
                f"output {i}: {left} of {out.numel()} elements ({left / out.numel():.1%}) were never written "
                f"(still poison): the launch grid misses part of the output ({what})",
            )
