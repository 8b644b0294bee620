"""The L2 cache's persisting state, reset before a timed run: part of the timing method.

The timing loop flushes L2 before every trial by writing twice its size (``measure.py``).
That evicts ordinary lines, not *persisting* ones: since Ampere a process can set aside part
of L2 (``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)``) and mark an address window as
persisting on a stream (``cudaStreamAttributeAccessPolicyWindow``); lines in that window
survive other traffic, so a candidate's inputs could stay on chip across the flush and a
memory-bound kernel would time faster than memory can deliver. Before each timed run (and
before the re-measurement of a time under the speed-of-light floor) kgen therefore, through
the CUDA runtime torch itself loaded (``ctypes``, the same process and context):

1. reads the persisting-L2 limit (a limit above zero is reported: kgen never sets one),
2. turns every persisting line back into a normal one (``cudaCtxResetPersistingL2Cache``),
3. sets the persisting limit to zero,
4. clears the access-policy window of the stream being timed.

Each step can fail (no runtime library found, a driver without the call, a stream that
takes no attributes): a failure is a note in the timing's result, never a crash and never
the candidate's fault.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from pydantic import BaseModel, Field

#: cudaLimitPersistingL2CacheSize (``cudaLimit`` enum of the runtime API)
_LIMIT_PERSISTING_L2 = 0x06
#: cudaStreamAttributeAccessPolicyWindow (= cudaLaunchAttributeAccessPolicyWindow)
_STREAM_ACCESS_POLICY_WINDOW = 1
#: bytes of ``cudaStreamAttrValue`` (a union padded to 64 bytes in CUDA 12); all zero is an
#: empty window (num_bytes 0, hit ratio 0, normal hit and miss properties)
_ATTR_VALUE_BYTES = 64
_LIBRARY_NAMES = ("libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0", "libcudart.so")


class L2Reset(BaseModel):
    """What resetting the persisting L2 state did, step by step."""

    #: the persisting-L2 limit found before the reset (bytes); None: could not be read
    persisting_limit_bytes: int | None = None
    lines_reset: bool = False
    limit_zeroed: bool = False
    window_cleared: bool = False
    notes: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        done = [name for name, ok in (("persisting lines reset", self.lines_reset),
                                      ("persisting limit set to 0", self.limit_zeroed),
                                      ("stream access window cleared", self.window_cleared)) if ok]
        parts = done or ["persisting L2 not reset"]
        if self.persisting_limit_bytes:
            # not by itself a sign of tampering: a driver may set a non-zero limit by default
            # (11.25 MiB seen on an H200), and the reset makes it 0 either way
            parts.append(f"the persisting L2 limit was {self.persisting_limit_bytes} bytes before the reset")
        return "; ".join(parts + self.notes)


def _loaded_runtime_paths() -> list[str]:
    """The CUDA runtime libraries this process has mapped (torch's own, first)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    paths = []
    for line in lines:
        path = line.split()[-1] if line.split() else ""
        if "libcudart" in Path(path).name and path not in paths:
            paths.append(path)
    return paths


def cuda_runtime() -> ctypes.CDLL | None:
    """The CUDA runtime library torch uses, or None when none can be opened."""
    for name in (*_loaded_runtime_paths(), *_LIBRARY_NAMES):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _call(runtime: ctypes.CDLL, name: str, *args: object) -> str | None:
    """None when ``name`` returned cudaSuccess, else why not (a note)."""
    function = getattr(runtime, name, None)
    if function is None:
        return f"{name}: not in this CUDA runtime"
    try:
        code = function(*args)
    except (OSError, ctypes.ArgumentError) as exc:
        return f"{name}: {exc}"
    return None if code == 0 else f"{name}: CUDA error {code}"


def reset_persisting_l2(stream_handle: int | None, runtime: ctypes.CDLL | None = None) -> L2Reset:
    """Reset the persisting L2 state of the current device and of the stream ``stream_handle``
    (``torch.cuda.Stream.cuda_stream``; None: no stream window to clear). Never raises."""
    result = L2Reset()
    runtime = runtime if runtime is not None else cuda_runtime()
    if runtime is None:
        result.notes.append("no CUDA runtime library found to reset the persisting L2 state")
        return result
    limit = ctypes.c_size_t(0)
    note = _call(runtime, "cudaDeviceGetLimit", ctypes.byref(limit), ctypes.c_int(_LIMIT_PERSISTING_L2))
    if note is None:
        result.persisting_limit_bytes = int(limit.value)
    else:
        result.notes.append(note)
    note = _call(runtime, "cudaCtxResetPersistingL2Cache")
    result.lines_reset = note is None
    result.notes += [note] if note else []
    note = _call(runtime, "cudaDeviceSetLimit", ctypes.c_int(_LIMIT_PERSISTING_L2), ctypes.c_size_t(0))
    result.limit_zeroed = note is None
    result.notes += [note] if note else []
    if stream_handle is not None:
        empty = (ctypes.c_ubyte * _ATTR_VALUE_BYTES)()
        note = _call(runtime, "cudaStreamSetAttribute", ctypes.c_void_p(stream_handle),
                     ctypes.c_int(_STREAM_ACCESS_POLICY_WINDOW), ctypes.byref(empty))
        result.window_cleared = note is None
        result.notes += [note] if note else []
    return result
