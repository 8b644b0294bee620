"""GPU idioms in torch code, answered as a GPU would answer them while a CPU run executes a candidate.

Kernels written for a GPU check and ask for it on the host side: ``assert
x.is_cuda``, ``x.cuda()``, ``x.to("cuda")``, ``torch.empty(n, device="cuda")``,
``torch.cuda.get_device_properties(0).multi_processor_count`` for a persistent
grid, ``with torch.cuda.device(x.device):``, ``torch.cuda.synchronize()``. On
CPU, where Triton's interpreter runs the kernels on CPU tensors and CuTe DSL
kernels are compiled but not run, each of these raises or answers "no GPU"
before any kernel runs. Backend-neutral: every backend's ``device_emulation``
uses it. Inside
``gpu_idioms_on_cpu(target)`` they answer as one GPU of ``target`` would (the
H100 unless told otherwise): "cuda" devices become the CPU, every tensor
``is_cuda``, and ``torch.cuda`` reports one device with the target's SM count,
shared memory and compute capability.

The verifier's own code in the same process uses the real answers, so the
mapping is on only while the candidate's code runs (``CandidateGuard`` enters
it around the candidate's import and every call). Entering swaps a few dozen
attributes of ``torch``, ``torch.cuda`` and ``torch.Tensor`` and leaving puts
them back: cheap (a few microseconds) and re-entrant (only the outermost
enter/exit swaps). A ``TorchFunctionMode`` is not used on purpose: its frame
would sit between the Triton interpreter and torch in every op, and the
verifier tells the interpreter's own host copies from the candidate's ops by
who called torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kgen.backends.targets import DEFAULT_TARGET, HardwareTarget, resolve_target

#: the torch factory functions that take ``device=``
_FACTORIES = (
    "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "rand", "randn",
    "randint", "rand_like", "randn_like", "randint_like", "arange", "linspace", "logspace", "tensor",
    "as_tensor", "empty_strided", "eye", "randperm",
)
_MISSING = object()
_depth = 0
_saved: list[tuple[Any, str, Any]] = []


@dataclass(frozen=True)
class EmulatedDeviceProperties:
    """What ``torch.cuda.get_device_properties`` reports, for a target that is not present."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_multi_processor: int
    regs_per_multiprocessor: int
    shared_memory_per_block: int
    shared_memory_per_block_optin: int
    shared_memory_per_multiprocessor: int
    gcnArchName: str
    is_integrated: bool = False
    is_multi_gpu_board: bool = False


def emulated_properties(target: HardwareTarget) -> EmulatedDeviceProperties:
    """``target``'s figures in ``torch.cuda`` device-property form."""
    per_sm = target.shared_memory_per_sm_kb * 1024
    nvidia = target.vendor == "nvidia"
    major, minor = _capability(target)
    return EmulatedDeviceProperties(
        name=target.display_name, major=major, minor=minor, total_memory=int(target.memory_gb * 1024**3),
        multi_processor_count=target.sm_count, L2_cache_size=int(target.l2_mb * 1024**2),
        warp_size=target.warp_size, max_threads_per_block=1024, max_threads_per_multi_processor=2048,
        regs_per_multiprocessor=65536, shared_memory_per_block=48 * 1024 if nvidia else per_sm,
        # the CUDA opt-in maximum per block is the SM's shared memory less 1 KB the driver keeps
        shared_memory_per_block_optin=per_sm - 1024 if nvidia else per_sm,
        shared_memory_per_multiprocessor=per_sm, gcnArchName="" if nvidia else str(target.arch),
    )


def _capability(target: HardwareTarget) -> tuple[int, int]:
    """(major, minor) as torch reports it: 90 -> (9, 0); gfx942 -> (9, 4)."""
    arch = target.arch
    if isinstance(arch, int):
        return arch // 10, arch % 10
    digits = "".join(c for c in str(arch) if c.isdigit())
    return (int(digits[:-2] or 0), int(digits[-2:-1] or 0)) if len(digits) >= 3 else (0, 0)


class gpu_idioms_on_cpu:  # noqa: N801 - used like a function: ``with gpu_idioms_on_cpu():``
    """Context manager: torch's GPU idioms answered as ``target`` (default: ``DEFAULT_TARGET``) on the CPU."""

    def __init__(self, target: HardwareTarget | str | None = None):
        self.target = resolve_target(target or DEFAULT_TARGET)
        self._patches: list[tuple[Any, str, Any]] | None = None

    def __enter__(self) -> gpu_idioms_on_cpu:
        global _depth
        if _depth == 0:
            if self._patches is None:
                self._patches = _patches(self.target)
            _apply(self._patches)
        _depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        global _depth
        _depth -= 1
        if _depth == 0:
            _restore()


def idioms_active() -> bool:
    return _depth > 0


def _apply(patches: list[tuple[Any, str, Any]]) -> None:
    for owner, name, value in patches:
        _saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)


def _restore() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        if original is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def _patches(target: HardwareTarget) -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for every idiom; built once per context manager."""
    props = emulated_properties(target)
    patches: list[tuple[Any, str, Any]] = [
        (torch.Tensor, "is_cuda", property(lambda self: True)),
        (torch.Tensor, "cuda", _tensor_cuda),
        (torch.Tensor, "to", _mapped(torch.Tensor.to, positional=True)),
    ]
    patches += [(torch, name, _mapped(getattr(torch, name))) for name in _FACTORIES if hasattr(torch, name)]
    cuda = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "device": _CudaDevice,
        "get_device_properties": lambda device=None: props,
        "get_device_capability": lambda device=None: (props.major, props.minor),
        "get_device_name": lambda device=None: props.name,
    }
    patches += [(torch.cuda, name, value) for name, value in cuda.items()]
    return patches


def _is_gpu_device(value: Any) -> bool:
    """A device spec that names a GPU: "cuda", "cuda:0", torch.device("cuda"), or a bare index."""
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.split(":", 1)[0].strip().lower() == "cuda"
    return isinstance(value, int) and not isinstance(value, bool)


def _cpu_if_gpu(value: Any) -> Any:
    return torch.device("cpu") if _is_gpu_device(value) else value


def _mapped(fn: Callable, positional: bool = False) -> Callable:
    """``fn`` with a GPU ``device=`` (and, for ``Tensor.to``, a GPU positional device) made the CPU."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _cpu_if_gpu(kwargs["device"])
        if positional and len(args) > 1 and (isinstance(args[1], (str, torch.device)) or _is_gpu_device(args[1])):
            args = (args[0], _cpu_if_gpu(args[1]), *args[2:])
        return fn(*args, **kwargs)

    call.__name__ = getattr(fn, "__name__", "call")
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def _tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
                 memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
    """``Tensor.cuda()`` on the CPU: the tensor itself, as on a GPU for a tensor already there."""
    return self if memory_format == torch.preserve_format else self.contiguous(memory_format=memory_format)


class _CudaDevice:
    """``with torch.cuda.device(i):`` with one device: nothing to switch."""

    def __init__(self, device: Any = None):
        self.idx = 0

    def __enter__(self) -> _CudaDevice:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
