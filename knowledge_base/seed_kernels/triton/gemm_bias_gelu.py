"""GEMM + bias + GELU (tanh) in Triton: y = gelu(x @ W^T + b), one output tile per program.

Each program owns a BLOCK_M x BLOCK_N tile of y. It walks K in BLOCK_K steps,
loading an x tile and a W tile (W is [N, K] as in nn.Linear, so the tile is
read as W^T's [BLOCK_K, BLOCK_N] through strides, no transpose copy) and
accumulating tl.dot into an fp32 accumulator. The epilogue adds the bias and
applies GELU to the fp32 value in registers, then rounds once to bf16: the
pre-activation never goes to memory, which is the point of fusing.

Tiles are visited in groups of GROUP_M row-tiles so that programs running
together reuse the same W tiles from L2. Masks cover the edge tiles in M, N
and K, so any size works. Row offsets are int64 (M * K or M * N can pass
2^31). 128 x 256 x 64 tiles, 8 warps, 3 stages (Triton's matmul tutorial's
first config; ~500 TFLOP/s on an H100 at the default sizes, cuBLAS + a separate
GELU ~630) need ~144 KB of shared memory: A100/H100-class GPUs. Autotuning
over a few configs is the next step for speed. Row strides that are not a
multiple of 16 bytes (K or N odd, say) cost Triton its vectorized and async
loads: M, N, K = 4097, 16385, 4100 ran ~25x slower per FLOP on an H100.

GELU uses 0.5 * (1 + tanh(u)) = sigmoid(2u), computed stably with
e = exp(-2|u|) <= 1 (no overflow, accurate negative tail).

On CPU (TRITON_INTERPRET=1) the operand tiles are widened to fp32 before
tl.dot: the interpreter stores bf16 as raw uint16 and its tl.dot multiplies
those bit patterns (triton-lang/triton#11584, unsupported upstream). The
widening is exact (products of bf16 values fit fp32) and is compiled out on
GPU, where tl.dot takes the bf16 tiles straight to the tensor cores.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # kernels may only read constexpr globals


@triton.jit
def _gemm_bias_gelu(
    x_ptr, w_ptr, b_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    # grouped tile order: GROUP_M consecutive row-tiles sweep the column-tiles together
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k0
        a = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if DOT_IN_FP32:  # interpreter only: its tl.dot cannot multiply bf16
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    # epilogue in fp32: bias, then gelu(y) = y * sigmoid(2u), u = sqrt(2/pi) * (y + 0.044715 y^3)
    y = acc + tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    u = SQRT_2_OVER_PI * (y + 0.044715 * y * y * y)
    e = tl.exp(-2.0 * tl.abs(u))
    y = y * tl.where(u >= 0, 1.0, e) / (1.0 + e)

    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        M, K = x.shape
        N = weight.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        block_m, block_n, block_k = 128, 256, 64
        grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
        _gemm_bias_gelu[grid](
            x, weight, bias, y,
            M, N, K,
            x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
            DOT_IN_FP32=x.device.type == "cpu",
            num_warps=8, num_stages=3,
        )
        return y
