"""Poisoned memory: make an output the kernel never wrote impossible to miss.

The AI CUDA Engineer's "10-100x" kernels never wrote their output: PyTorch's
caching allocator handed them the reference's freed output, already holding
the right answer. Two things close that door here:

* while the candidate runs, every uninitialised allocation (``torch.empty``,
  ``empty_like``, ``empty_strided``, ``Tensor.new_empty``) comes back filled
  with a recognisable NaN bit pattern instead of whatever was there;
* on CUDA, before each candidate call, blocks of the outputs' sizes are
  filled with the same pattern and freed, so memory the caching allocator
  hands out by any other route holds poison too.

An output element that still holds the exact poison bits afterwards was
never written by the kernel: all of them is an unwritten output, some of
them a partial write (a grid that misses part of the output).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

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


def _poison_bits(dtype: torch.dtype) -> tuple[torch.dtype, int]:
    """The integer view and the (signed) bit pattern of a float dtype's poison."""
    int_dtype, bits = _FLOAT_BITS[dtype]
    width = torch.iinfo(int_dtype).bits
    return int_dtype, bits - (1 << width) if bits >= 1 << (width - 1) else bits


def fill_poison(tensor: torch.Tensor) -> torch.Tensor:
    """Overwrite a tensor's storage with the poison pattern for its dtype."""
    if tensor.numel() == 0:
        return tensor
    if tensor.dtype in _FLOAT_BITS:
        int_dtype, bits = _poison_bits(tensor.dtype)
        flat = tensor.as_strided((tensor.untyped_storage().nbytes() // tensor.element_size(),), (1,), 0)
        flat.view(int_dtype).fill_(bits)
    elif tensor.dtype in (torch.int32, torch.int64):
        tensor.fill_(_INT_VALUE)
    elif tensor.dtype.is_floating_point:
        tensor.fill_(float("nan"))
    return tensor


def poisoned_count(tensor: torch.Tensor) -> int:
    """How many elements still hold the exact poison pattern."""
    if tensor.numel() == 0:
        return 0
    if tensor.dtype in _FLOAT_BITS:
        int_dtype, bits = _poison_bits(tensor.dtype)
        return int((tensor.detach().contiguous().view(int_dtype) == bits).sum().item())
    if tensor.dtype in (torch.int32, torch.int64):
        return int((tensor == _INT_VALUE).sum().item())
    return 0


def _poisoning(factory):
    def poisoned(*args, **kwargs):
        return fill_poison(factory(*args, **kwargs))

    poisoned.__wrapped__ = factory
    return poisoned


@contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Uninitialised allocations made inside the block come back poisoned."""
    originals = {
        (torch, "empty"): torch.empty,
        (torch, "empty_like"): torch.empty_like,
        (torch, "empty_strided"): torch.empty_strided,
        (torch.Tensor, "new_empty"): torch.Tensor.new_empty,
    }
    try:
        for (owner, name), factory in originals.items():
            setattr(owner, name, _poisoning(factory))
        yield
    finally:
        for (owner, name), factory in originals.items():
            setattr(owner, name, factory)


def poison_allocator(like: Sequence[torch.Tensor], device: torch.device) -> None:
    """Fill and free blocks of the outputs' sizes so the CUDA caching allocator reuses poison."""
    if device.type != "cuda":
        return
    blocks = [fill_poison(torch.empty_like(t, device=device)) for t in like for _ in range(2)]
    torch.cuda.synchronize(device)
    del blocks
