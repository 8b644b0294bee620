"""Is anyone else on the GPU? Timings taken beside another process are marked as such.

An orphaned verifier once held 43 GB and its kernels' time slices on the GPU the next job
timed on; nothing in the figures said so. Before timing, kgen asks NVML (through ctypes on
the driver's own ``libnvidia-ml.so.1``: no extra dependency) which compute processes hold
the device, and reports every one that is not this process or its own family.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kgen.errors import KgenError
from kgen.evals.sandbox.lifecycle import PARENT_PID_ENV

NVML_LIBRARY = "libnvidia-ml.so.1"
#: nvmlProcessInfo_t of the _v2/_v3 calls: pid, usedGpuMemory, gpuInstanceId, computeInstanceId
_FIELDS = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
           ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class ProcessInfo(ctypes.Structure):
    _fields_ = _FIELDS


class GpuProcess(BaseModel):
    pid: int
    used_bytes: int | None = None


class GpuNeighbours(BaseModel):
    available: bool
    #: why the question could not be asked (no NVML, no such device); "" when it was
    reason: str = ""
    others: list[GpuProcess] = Field(default_factory=list)

    def describe(self) -> str | None:
        """One line for a result when the GPU was shared; None when it was not (or unknown)."""
        if not self.others:
            return None
        held = sum(p.used_bytes or 0 for p in self.others)
        return (f"shared GPU: {len(self.others)} other process(es) on the device during timing "
                f"(pids {', '.join(str(p.pid) for p in self.others[:5])}; {held / 1e9:.1f} GB held)")


def _parent_of(pid: int) -> int | None:
    """The parent pid from ``/proc``; None once the process is gone (or off Linux)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _family() -> set[int]:
    """This process, its ancestors, and every descendant of kgen (kgen's own processes).

    Run in the verifier, kgen is the parent named in the environment: its other children
    (a spare verifier started ahead, ``worker_pool.py``) are kgen's own, not neighbours."""
    mine = {os.getpid()}
    pid = os.getppid()
    while pid is not None and pid > 1 and pid not in mine:
        mine.add(pid)
        pid = _parent_of(pid)
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    parents = {}
    for entry in entries:
        if entry.isdigit() and (parent := _parent_of(int(entry))) is not None:
            parents[int(entry)] = parent
    kgen = os.environ.get(PARENT_PID_ENV, "")
    frontier = {int(kgen) if kgen.isdigit() and int(kgen) in mine else os.getpid()}
    seen = set(frontier)
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - seen
        seen |= frontier
    return mine | seen


def processes_from(buffer: ctypes.Array, count: int, exclude: set[int]) -> list[GpuProcess]:
    """The entries NVML filled in, without kgen's own processes (a max-value memory means unknown)."""
    found = []
    for entry in buffer[:count]:
        if entry.pid in exclude:
            continue
        used = None if entry.usedGpuMemory in (0xFFFFFFFFFFFFFFFF,) else int(entry.usedGpuMemory)
        found.append(GpuProcess(pid=int(entry.pid), used_bytes=used))
    return found


class NvmlUnavailable(KgenError):
    """NVML could not be asked about the device: its library, its start, or no such device."""


@contextmanager
def nvml_device(index: int | None = None, pci_bus_id: str | None = None,
                uuid: str | None = None) -> Iterator[tuple[ctypes.CDLL, ctypes.c_void_p]]:
    """NVML started and the handle of one device (by PCI bus id, UUID or NVML's index), shut
    down again after; :class:`NvmlUnavailable` says why not. The driver's own library through
    ctypes: kgen's parent asks it without a CUDA context, and no NVML package is needed."""
    try:
        nvml = ctypes.CDLL(NVML_LIBRARY)
    except OSError as exc:
        raise NvmlUnavailable(f"NVML not available ({exc})") from exc
    if nvml.nvmlInit_v2() != 0:
        raise NvmlUnavailable("nvmlInit failed")
    try:
        handle = ctypes.c_void_p()
        if pci_bus_id:
            status = nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle))
        elif uuid:
            status = nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle))
        else:
            status = nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index or 0), ctypes.byref(handle))
        if status != 0:
            raise NvmlUnavailable(f"no NVML device for {pci_bus_id or uuid or index or 0} ({status})")
        yield nvml, handle
    finally:
        nvml.nvmlShutdown()


def gpu_neighbours(device_index: int = 0, pci_bus_id: str | None = None) -> GpuNeighbours:
    """Other compute processes on the GPU (``pci_bus_id`` from torch names it exactly even under
    ``CUDA_VISIBLE_DEVICES``; else NVML's ``device_index``)."""
    try:
        with nvml_device(device_index, pci_bus_id=pci_bus_id) as (nvml, handle):
            for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
                call = getattr(nvml, name, None)
                if call is None:
                    continue
                count = ctypes.c_uint(64)
                buffer = (ProcessInfo * 64)()
                if call(handle, ctypes.byref(count), buffer) == 0:
                    return GpuNeighbours(available=True, others=processes_from(buffer, count.value, _family()))
            return GpuNeighbours(available=False, reason="NVML could not list the device's processes")
    except NvmlUnavailable as exc:
        return GpuNeighbours(available=False, reason=str(exc))


def torch_device_neighbours(torch: Any, device: Any) -> GpuNeighbours:
    """Other compute processes on torch's ``device`` (named by its PCI bus id); asking can fail
    (NVML's library, the driver), and then the answer says so instead of raising: a timing is
    reported as not checked, never failed, for it."""
    try:
        index = torch.cuda.current_device() if device is None else torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        return gpu_neighbours(index, pci_bus_id=getattr(props, "pci_bus_id", None))
    except Exception as exc:  # noqa: BLE001 - a failed check is reported, never fatal
        return GpuNeighbours(available=False, reason=f"{type(exc).__name__}: {exc}")
