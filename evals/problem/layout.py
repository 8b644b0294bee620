"""Inputs keep the layout ``get_inputs()`` gave them: strides, storage offset, shared storage.

A problem whose inputs are views (q and k sliced out of one fused qkv tensor,
a transposed matrix) is a different problem from the same values laid out
contiguously: a kernel that indexes ``row * n_cols + col`` on the raw pointer
is right on the contiguous copy and wrong on the view. ``Tensor.clone()`` and
``.to(device)`` may both hand back a compact tensor, so every copy the
verifier makes of an input goes through here instead: each distinct storage
is copied once, whole, and every tensor is re-made on the copy with its own
offset, sizes and strides (two views of one storage stay two views of one
storage).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    storage = t.untyped_storage()
    return str(storage.device), storage.data_ptr()


def _storage_bytes(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The whole storage of ``t`` as a fresh uint8 tensor on ``device``."""
    storage = t.untyped_storage()
    raw = torch.empty(0, dtype=torch.uint8, device=storage.device)
    raw.set_(storage, 0, (storage.nbytes(),), (1,))
    return raw.to(device, copy=True)


def _on(storage_bytes: torch.Tensor, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    out = torch.empty(0, dtype=dtype or like.dtype, device=storage_bytes.device)
    out.set_(storage_bytes.untyped_storage(), like.storage_offset(), like.size(), like.stride())
    if like.requires_grad and out.is_floating_point():
        out.requires_grad_(True)
    return out


def copy_inputs(values: Sequence[Any], device: torch.device | str | None = None) -> list[Any]:
    """Copies of ``values`` (on ``device``, default: where each already is) with every tensor's
    strides, storage offset and storage sharing kept; non-tensors are passed through."""
    storages: dict[tuple[str, int], torch.Tensor] = {}
    out: list[Any] = []
    with torch.no_grad():
        for value in values:
            if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_sparse:
                out.append(value.to(device) if isinstance(value, torch.Tensor) and device is not None else value)
                continue
            target = torch.device(device) if device is not None else value.device
            key = _storage_key(value)
            if key not in storages:
                storages[key] = _storage_bytes(value, target)
            out.append(_on(storages[key], value))
    return out


def copy_value(value: Any) -> Any:
    """One value copied with its layout (a tensor alone keeps its own storage's shape)."""
    return copy_inputs([value])[0]


def is_plain_layout(value: Any) -> bool:
    """Contiguous, offset 0, and the whole storage: nothing a kernel could get wrong by ignoring strides."""
    if not isinstance(value, torch.Tensor):
        return True
    return (
        value.is_contiguous()
        and value.storage_offset() == 0
        and value.untyped_storage().nbytes() == value.numel() * value.element_size()
    )


def compact_copies(values: Sequence[Any]) -> list[Any]:
    """The same values, each tensor contiguous in a storage of its own: the layout a
    stride-blind kernel assumes (used to name a failure, never to judge one)."""
    return [v.detach().contiguous().clone() if isinstance(v, torch.Tensor) else v for v in values]


def describe_layout(value: Any) -> str:
    """``shape (8, 64) strides (192, 1) offset 64`` for evidence."""
    if not isinstance(value, torch.Tensor):
        return type(value).__name__
    return f"shape {tuple(value.shape)} strides {tuple(value.stride())} offset {value.storage_offset()}"
