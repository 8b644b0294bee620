"""RMSNorm over dim 1 (the features of a [BATCH, FEATURES, *] tensor), no weight, in Triton:
x viewed as [outer, L, inner], a [BLOCK_L, BLOCK_INNER] tile with the contiguous pixels across lanes.

y = x / sqrt(mean(x^2 over dim 1) + eps), KernelBench's ``Model(num_features, eps)``.
The tensor (made contiguous) is the view [outer=BATCH, L=FEATURES, inner=the
product of the trailing dims]: each output pixel normalises FEATURES values
that lie ``inner`` elements apart. Reading one pixel's features per thread
would touch a new cache line per value, so a program takes BLOCK_INNER
adjacent pixels (contiguous: 16-byte vector loads across lanes) times the
feature dim, reduces the squares down axis 0 (each thread sums its own
column, then across the warps that share it) and scales the same tile.

What bounds it: bytes. x is read once and y written once when the features
fit one tile (L <= MAX_FUSED_BLOCK_L: 64 features x 128 pixels is 8192 values,
32 KB of fp32 or 16 KB of bf16 in flight per program, 32 values a thread at 8
warps); 16 x 64 x 256 x 256 bf16 moves 256 MB, ~85 us at the H100's ~3.0 TB/s
copy bandwidth, and KernelBench's 112 x 64 x 512 x 512 fp32 moves 15 GB.
More features than that would spill, so the program loops over L in
LOOP_BLOCK_L steps twice (squares, then scale): the second read of a
program's few hundred KB column block is likely still in L2. A plain
[BATCH, FEATURES] matrix (no trailing dims: inner == 1) is a row
normalisation; the same kernel runs it with one pixel per tile, which is
correct but not the fastest layout for it (rmsnorm_forward's seed is).

Precision: squares summed in fp32 (bf16 inputs are widened as loaded), the
mean divided by the true L, one sqrt and a division per value, the result
rounded once to x's dtype. Masked lanes load 0 and add nothing. Offsets are
int64 (112 x 64 x 512 x 512 passes 2^31).

MAX_FUSED_BLOCK_L, FUSED_BLOCK_ELEMS, LOOP_BLOCK_L, LOOP_BLOCK_INNER and num_warps at
each launch are knobs for kgen's search (any value is correct: tails are masked); next_power_of_2(L)
of the fused tile covers the features and is correctness.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_BLOCK_L = 256  # features held whole in one tile up to this many
FUSED_BLOCK_ELEMS = 8192  # values per fused tile: BLOCK_INNER = FUSED_BLOCK_ELEMS // BLOCK_L
LOOP_BLOCK_L = 32  # features per step of the two-pass loop
LOOP_BLOCK_INNER = 128  # pixels per program of the two-pass loop


@triton.jit
def _rmsnorm_columns(x_ptr, y_ptr, n_len, n_inner, n_inner_blocks, eps,
                     ONE_TILE: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_INNER: tl.constexpr):
    """Program t = (outer index, pixel block): BLOCK_INNER adjacent pixels normalised over L."""
    tile = tl.program_id(0)
    outer = tile // n_inner_blocks
    inner = (tile % n_inner_blocks) * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    inner_mask = inner < n_inner
    base = outer.to(tl.int64) * n_len * n_inner  # int64: outer * L * inner can pass 2^31
    if ONE_TILE:
        ls = tl.arange(0, BLOCK_L)
        mask = (ls < n_len)[:, None] & inner_mask[None, :]
        offs = base + ls.to(tl.int64)[:, None] * n_inner + inner[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        rms = tl.sqrt(tl.sum(x * x, axis=0) / n_len + eps)
        tl.store(y_ptr + offs, (x / rms[None, :]).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK_L, BLOCK_INNER), dtype=tl.float32)  # lane-wise: one tree sum at the end
        for start in range(0, n_len, BLOCK_L):
            ls = start + tl.arange(0, BLOCK_L)
            mask = (ls < n_len)[:, None] & inner_mask[None, :]
            x = tl.load(x_ptr + base + ls.to(tl.int64)[:, None] * n_inner + inner[None, :],
                        mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        rms = tl.sqrt(tl.sum(acc, axis=0) / n_len + eps)
        for start in range(0, n_len, BLOCK_L):
            ls = start + tl.arange(0, BLOCK_L)
            mask = (ls < n_len)[:, None] & inner_mask[None, :]
            offs = base + ls.to(tl.int64)[:, None] * n_inner + inner[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            tl.store(y_ptr + offs, (x / rms[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.numel() == 0:
            return y
        x = x.contiguous()  # the [outer, L, inner] view needs the standard layout
        n_len = x.shape[1]
        n_inner = math.prod(x.shape[2:])
        n_outer = x.shape[0]
        block_l = triton.next_power_of_2(n_len)
        if block_l <= MAX_FUSED_BLOCK_L:
            # block_l covers the features (correctness); the pixels per tile fill ~FUSED_BLOCK_ELEMS
            block_inner = min(max(FUSED_BLOCK_ELEMS // block_l, 1), triton.next_power_of_2(n_inner))
            inner_blocks = triton.cdiv(n_inner, block_inner)
            _rmsnorm_columns[(n_outer * inner_blocks,)](
                x, y, n_len, n_inner, inner_blocks, self.eps,
                ONE_TILE=True, BLOCK_L=block_l, BLOCK_INNER=block_inner, num_warps=8,
            )
        else:
            block_inner = min(LOOP_BLOCK_INNER, triton.next_power_of_2(n_inner))
            inner_blocks = triton.cdiv(n_inner, block_inner)
            _rmsnorm_columns[(n_outer * inner_blocks,)](
                x, y, n_len, n_inner, inner_blocks, self.eps,
                ONE_TILE=False, BLOCK_L=LOOP_BLOCK_L, BLOCK_INNER=block_inner, num_warps=4,
            )
        return y
