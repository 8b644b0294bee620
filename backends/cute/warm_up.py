"""The DSL's first compile, done by kgen before any candidate code runs.

The first ``cute.compile`` in a process loads the MLIR and ptxas libraries and starts
the compiler's worker threads; inside the candidate's first call that would look like
the candidate starting threads, and its seconds would be billed to it. (No
``from __future__ import annotations`` here: the DSL reads the kernels' annotations as
objects. The module is imported only where CuTe DSL is installed.)
"""

import tempfile
from pathlib import Path

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

from kgen.backends.device import Device


@cute.kernel
def _fill(out: cute.Tensor, value: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    if tidx < cute.size(out):
        out[tidx] = value


@cute.jit
def _launch(out: cute.Tensor, value: cutlass.Float32):
    _fill(out, value).launch(grid=(1, 1, 1), block=(32, 1, 1))


def compile_tiny_kernel(device: Device) -> None:
    on_gpu = device.is_gpu
    out = torch.zeros(32, device=device.value)
    with tempfile.TemporaryDirectory() as scratch:
        compiled = cute.compile(_launch, from_dlpack(out), cutlass.Float32(1.0),
                                options=f"--keep-cubin --dump-dir {Path(scratch)}")
        if on_gpu:
            compiled(from_dlpack(out), cutlass.Float32(1.0))
            torch.cuda.synchronize()
