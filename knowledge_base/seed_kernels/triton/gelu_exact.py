"""Exact (erf) GELU in Triton: one flat elementwise pass, BLOCK elements a program, fp32 math inside.

gelu(x) = 0.5 * x * (1 + erf(x / sqrt(2))), torch's default GELU. Not the tanh
approximation (the catalog's ``gelu``): the two differ by up to 1.5e-4, which
the verifier sees, so the erf is computed, not approximated. ``tl.math.erf``
is libdevice's erf on CUDA, a few FMAs of a minimax polynomial: cheap beside
the memory traffic.

What bounds it: bytes. Each element is read once and written once (4 B for
bf16, 8 B for fp32); the default 16384 x 8192 bf16 moves 512 MB, ~170 us at the
H100's ~3.0 TB/s copy bandwidth. Nothing is reused, so the whole design is
bytes in flight: BLOCK elements a program (16 per thread at 8 warps: four
16-byte loads of bf16 in flight per thread) and enough programs to cover every
SM many times over (the grid is cdiv(numel, BLOCK): 65536 programs at the
default size). Masked tails make any size correct (1000 x 4095 leaves a
partial last block). Offsets are int64: 4096 x 393216 (KernelBench's size)
passes 2^31 elements.

Dtype-generic: x is widened to fp32 as it is loaded and the result is
rounded once to the output's dtype (bf16 for the catalog, fp32 for a
KernelBench file). A non-contiguous x is copied once to contiguous first.
BLOCK and num_warps are knobs for kgen's search.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

INV_SQRT_2 = tl.constexpr(0.7071067811865476)  # kernels may only read constexpr globals


@triton.jit
def _gelu_erf_fwd(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    out = 0.5 * x * (1.0 + tl.math.erf(x * INV_SQRT_2))
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        if n_elements == 0:
            return out
        BLOCK = 4096
        _gelu_erf_fwd[(triton.cdiv(n_elements, BLOCK),)](
            x, out, n_elements, BLOCK=BLOCK, num_warps=8,
        )
        return out
