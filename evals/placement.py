"""Where an evaluation ran: the host, the lane and the GPU.

A search spread over several GPUs, or over a Ray cluster, must still say for each verdict
which machine and which card produced it: a timing is a fact about one GPU, and a fault
(a lost node, a card that throws ECC errors) is traced by it. The executors
(``evals/executors/``) fill it in; a result evaluated in the caller's own process on its
one device has a placement too, so every result reads the same.
"""

from __future__ import annotations

import os
import socket

from pydantic import BaseModel


class Placement(BaseModel):
    """One evaluation's place: stable names a report can group by."""

    #: "local" or "ray": which executor ran it
    executor: str = "local"
    #: the machine's host name
    host: str
    #: the lane's name, unique within a run: "gpu0" (local), "<node id prefix>:gpu1" (Ray), "cpu0"
    lane: str
    #: the CUDA index the lane owns on its host (as the host numbers its cards); None: a CPU lane
    gpu_index: int | None = None
    #: the GPU model as the driver names it, once known (a lane learns it from its first result)
    gpu_name: str | None = None
    #: 2 when the evaluation was a retry after its first lane was lost
    attempt: int = 1

    @property
    def label(self) -> str:
        """``host/lane``: how reports name the GPU."""
        return f"{self.host}/{self.lane}"


def host_name() -> str:
    return socket.gethostname() or os.uname().nodename


def visible_gpu_indices() -> list[int]:
    """The CUDA indices this process may use, as the host numbers its cards: the
    ``CUDA_VISIBLE_DEVICES`` list where it is a list of numbers, else 0..count-1. Asked of
    the driver without initialising CUDA in this process (a parent that starts one lane per
    GPU must not hold a context on any of them)."""
    count = _device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        names = [n.strip() for n in listed.split(",") if n.strip()]
        if all(n.isdigit() for n in names):
            return [int(n) for n in names][:count]
    return list(range(count))


def _device_count() -> int:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return 0
    try:
        return torch.cuda.device_count()  # NVML-based where available: no context is created
    except RuntimeError:
        return 0
