"""Which GPU this kgen process would run on, and how much memory it has, asked of NVML.

Two of the parent's decisions need the GPU before any verifier starts: whether a candidate
was verified on this GPU model already (a record is keyed by the model's name), and whether
a full-size verification fits beside a generation's screenings (the device's memory). The
parent does not open a CUDA context for that; it asks NVML, through ctypes on the driver's
own ``libnvidia-ml.so.1`` (``gpu_sharing.nvml_device``). The device is the first one
``CUDA_VISIBLE_DEVICES`` names (NVML numbers every GPU of the host, CUDA only the visible
ones); anything NVML cannot answer is unknown (None), never guessed.
"""

from __future__ import annotations

import ctypes
import os

from pydantic import BaseModel

from kgen.evals.timing.gpu_sharing import NvmlUnavailable, nvml_device

#: nvmlDeviceGetName's buffer (NVML_DEVICE_NAME_V2_BUFFER_SIZE)
_NAME_BUFFER = 96


class _MemoryInfo(ctypes.Structure):
    """nvmlMemory_t: total, free and used bytes."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class GpuIdentity(BaseModel):
    """The GPU model as the driver names it ("NVIDIA H100 80GB HBM3"), and its memory now."""

    name: str
    total_bytes: int
    free_bytes: int


class VisibleDevice(BaseModel):
    """How NVML finds CUDA's device 0: by index on the host, or by UUID."""

    index: int | None = None
    uuid: str | None = None


def first_visible_device(cuda_visible_devices: str | None) -> VisibleDevice | None:
    """CUDA's device 0 in NVML's terms, from ``CUDA_VISIBLE_DEVICES`` as the environment has it.
    Unset: the host's first GPU. An empty list or an entry NVML cannot look up (a MIG
    instance, a negative index): None, the device is unknown."""
    if cuda_visible_devices is None:
        return VisibleDevice(index=0)
    first = cuda_visible_devices.split(",")[0].strip()
    if first.isdigit():
        return VisibleDevice(index=int(first))
    if first.startswith("GPU-"):
        return VisibleDevice(uuid=first)
    return None


def visible_gpu() -> GpuIdentity | None:
    """The visible GPU's name and memory, or None when NVML cannot say (no driver, no GPU)."""
    device = first_visible_device(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if device is None:
        return None
    try:
        with nvml_device(device.index, uuid=device.uuid) as (nvml, handle):
            name = ctypes.create_string_buffer(_NAME_BUFFER)
            memory = _MemoryInfo()
            if nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(_NAME_BUFFER)) != 0:
                return None
            if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
                return None
            return GpuIdentity(name=name.value.decode(errors="replace"), total_bytes=int(memory.total),
                               free_bytes=int(memory.free))
    except NvmlUnavailable:
        return None
