"""Logit softcap in Triton: y = cap * tanh(x / cap), bf16 in and out, fp32 math, one flat stream.

What bounds it: bytes. Each element is read once (2 B) and written once (2 B):
8192 x 32000 logits move 1 GB, ~350 us at the H100's ~3.0 TB/s copy bandwidth.
The math (a multiply, one exp2, one division, a short polynomial, a select) is
about 20 instructions per element: streaming at copy speed needs ~3.2 elements
per SM per clock, and 128 fp32 lanes at 20 instructions give ~6.4, so the
arithmetic hides under the loads with about 2x to spare. That margin is why
the cheap forms are chosen (exp2, the fast division); an IEEE division or a
libm-style tanh would start to show.

Tiling: the tensor is one flat array (elementwise: its 2-D shape does not
matter), cut into BLOCK_SIZE-element blocks, one per program (not persistent:
the hardware keeps several programs per SM, enough bytes in flight). 8192
bf16 values at 8 warps are 32 per thread, four 16-byte vector loads and
stores. Only the last block is partial: every other program takes the
unmasked branch, so a length that is a multiple of nothing (1001 x 32003)
still gets vector loads; a mask whose edge falls inside a vector would cut
every load to 2 bytes. Small tensors (fewer than PROGRAMS_PER_SM programs per
SM at the big block) take SMALL_BLOCK_SIZE blocks instead, so that all SMs
get work. BLOCK_SIZE, SMALL_BLOCK_SIZE, PROGRAMS_PER_SM and num_warps are
knobs for kgen's search; any value is correct.

tanh without overflow: with a = |x / cap|, e = exp(-2a) lies in [0, 1] for
every input, so tanh(a) = (1 - e) / (1 + e) never sees inf / inf: |x| = 1e4 or
inf gives e = 0 and exactly +-cap, like torch; NaN stays NaN. (exp(2a) instead
would overflow to inf for a > 44 and give NaN.) For small a the subtraction
1 - e cancels (at a = 1e-6 it keeps one digit), so below a = 0.125 the odd
Taylor series a - a^3/3 + 2a^5/15 - 17a^7/315 is used, whose first omitted term
is ~1e-9 relative there; above it 1 - e >= 0.22 loses at most a few ulps. exp
is exp2 of a prescaled argument (one MUFU instruction), the division the
fast full-range one (2 ulp): both far below the bf16 output's rounding, which
is the only precision the result keeps. The sign is put back at the end
(tanh is odd), and x is widened to fp32 as it is loaded and rounded to bf16
once, at the store. Block starts are int64 (elements can pass 2^31).

Measured (H100, 2026-11-28, kgen bench): the catalog's size 0.359 ms, 97% of copy (0.98x
torch.compile: both at the bandwidth); a 128256 vocabulary 99%, an awkward length 85%.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softcap_math(x, cap, inv_cap):
    u = x.to(tl.float32) * inv_cap
    a = tl.abs(u)
    # large a: e = exp(-2a) in [0, 1], so no overflow for any input
    e = tl.exp2(-2.8853900817779268 * a)  # exp(-2a) = exp2(-2 log2(e) a)
    t_big = tl.fdiv(1.0 - e, 1.0 + e)
    # small a: odd Taylor series, no cancellation
    a2 = a * a
    t_small = a * (1.0 + a2 * (-0.3333333333333333 + a2 * (0.13333333333333333 + a2 * -0.05396825396825397)))
    t = tl.where(a < 0.125, t_small, t_big)
    # tanh is odd; NaN fails both tests and stays NaN
    return cap * tl.where(u < 0.0, -t, t)


@triton.jit
def _softcap_kernel(x_ptr, y_ptr, n_elements, cap, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE  # int64: elements can pass 2^31
    offs = tl.arange(0, BLOCK_SIZE)
    x_blk = x_ptr + start
    y_blk = y_ptr + start
    inv_cap = 1.0 / cap
    if start + BLOCK_SIZE <= n_elements:
        # every block but the last: no mask, full-width vector loads and stores
        x = tl.load(x_blk + offs, eviction_policy="evict_first")
        tl.store(y_blk + offs, _softcap_math(x, cap, inv_cap).to(y_ptr.dtype.element_ty))
    else:
        mask = offs < n_elements - start
        x = tl.load(x_blk + offs, mask=mask, other=0.0)
        tl.store(y_blk + offs, _softcap_math(x, cap, inv_cap).to(y_ptr.dtype.element_ty), mask=mask)


#: elements per program on large tensors (16 KB of bf16)
BLOCK_SIZE = 8192
#: elements per program on small tensors
SMALL_BLOCK_SIZE = 2048


class ModelNew(nn.Module):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def forward(self, logits):
        x = logits.contiguous()  # a no-op for the usual contiguous logits
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        cap = float(self.cap)
        PROGRAMS_PER_SM = 4
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4  # the interpreter: any count
        min_programs = PROGRAMS_PER_SM * sms
        if triton.cdiv(n, BLOCK_SIZE) >= min_programs:
            _softcap_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, n, cap, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)
        else:
            _softcap_kernel[(triton.cdiv(n, SMALL_BLOCK_SIZE),)](
                x, y, n, cap, BLOCK_SIZE=SMALL_BLOCK_SIZE, num_warps=4,
            )
        return y
