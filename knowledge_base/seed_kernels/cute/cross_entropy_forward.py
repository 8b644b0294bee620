"""Cross-entropy forward (bf16 logits, int64 targets, fp32 loss) in CuTe DSL: one streaming pass.

loss[i] = logsumexp(logits[i, :]) - logits[i, target[i]]. A vocabulary row (32000 bf16 =
64 KB, up to 128256 = 250 KB) is too long to keep in registers comfortably, so each CTA of
THREADS_PER_ROW threads owns one row and streams it in chunks: per chunk every thread
issues CHUNK_VECS independent 128-bit loads (8 bf16 each, so several loads are in flight)
and folds them into a running (max, sum of exp(x - max)) pair with the online
log-sum-exp update s = s * exp(m_old - m_new) + sum(exp(x - m_new)). The logits are read
exactly once, which is the minimum traffic. At the end the per-thread pairs are combined
across the row (warp shuffles, then shared memory): M = max of m, S = sum of
s * exp(m - M), and thread 0 writes M + log(S) - logits[i, target[i]] (the target logit
is one extra scalar load). All math is fp32; exp is exp2 of a log2(e)-scaled argument.

Tails: the row length is a compile-time constant and the vector width is the widest of
8/4/2/1 dividing it and the logits' alignment (vocab 3001 or 32003 runs scalar); the
chunk count covers the row and a per-vector predicate masks the end of the last chunk.
Masked elements load as -inf (exp gives 0). The running max starts at -FLT_MAX, not
-inf, so a thread whose elements are all masked never computes inf - inf. One CTA per
row, so every loss element is written; a target outside [0, vocab) gives NaN instead of
reading out of bounds.

Host side: forward keeps the executors that cute.compile returns in _COMPILED, keyed by
(logits dtype, targets dtype, row length, vector width). Calling the @cute.jit function
directly would re-run its whole Python trace on every call before the DSL's cache finds
the binary (tens of ms per forward on a CPU). The key is everything the compile
specialises on: the dtypes (the loss dtype follows the logits'), the static row length of
the logits layout and the vector width (copy width and assumed alignment); the chunk count
is computed from the last two alone (_n_chunks). The row count stays dynamic, so one
executor serves every batch.
"""

import torch
import torch.nn as nn

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

COPY_BITS = 128  # widest global access per thread (16 bytes)
THREADS_PER_ROW = 256  # threads of a CTA, all on one row
CHUNK_VECS = 4  # vectors each thread loads per chunk (independent loads in flight)
LOG2_E = 1.4426950408889634
LN_2 = 0.6931471805599453
FLT_MAX = 3.4028234663852886e38

#: (logits dtype, targets dtype, n_cols, vec) -> the executor cute.compile built for cross_entropy_rows
_COMPILED = {}


def _vector_width(n_cols, elem_bytes, tensors):
    """Widest vector (elements) dividing the row length and every tensor's base alignment."""
    vec = COPY_BITS // (8 * elem_bytes)
    while vec > 1 and (n_cols % vec != 0 or any(t.data_ptr() % (vec * elem_bytes) != 0 for t in tensors)):
        vec //= 2
    return vec


def _rows_2d(t, align):
    """(rows, cols) row-major tensor: dynamic row count, static row length.

    A row of one element is the exception: CuTe gives a static size-1 mode stride 0, so the
    chunk's tile would address that one element at every column and the copy would read it
    into every vector of the chunk (the loss came out ln(4) too large on an H100). That
    row length gets a dynamic layout with the unit column stride kept static."""
    if t.shape[1] == 1:
        return from_dlpack(t, assumed_align=align).mark_layout_dynamic(leading_dim=1)
    return from_dlpack(t, assumed_align=align).mark_compact_shape_dynamic(mode=0, stride_order=(0, 1))


def _n_chunks(n_cols, vec):
    """Chunks of CHUNK_VECS vectors per thread covering a row: a compile-time constant, a
    function of the row length and the vector width only, both in the compile cache's key."""
    chunk_cols = CHUNK_VECS * THREADS_PER_ROW * vec
    return max(1, (n_cols + chunk_cols - 1) // chunk_cols)


@cute.jit
def _row_reduce(val, is_max: cutlass.Constexpr, tpr: cutlass.Constexpr, buf, warp, lane):
    """Max or sum of `val` over the tpr threads of the CTA (all threads must call it)."""
    if cutlass.const_expr(is_max):
        val = cute.arch.warp_reduction_max(val, threads_in_group=min(tpr, 32))
    else:
        val = cute.arch.warp_reduction_sum(val, threads_in_group=min(tpr, 32))
    if cutlass.const_expr(tpr > 32):
        if lane == 0:
            buf[warp] = val
        cute.arch.barrier()
        val = buf[0]
        for i in cutlass.range_constexpr(1, tpr // 32):
            if cutlass.const_expr(is_max):
                val = cute.arch.fmax(val, buf[i])
            else:
                val = val + buf[i]
    return val


@cute.kernel
def _ce_fwd_kernel(
    mL: cute.Tensor,
    mT: cute.Tensor,
    mLoss: cute.Tensor,
    tpr: cutlass.Constexpr,
    vec: cutlass.Constexpr,
    chunk_vecs: cutlass.Constexpr,
    n_chunks: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    n_cols = mL.shape[1]
    tiler = (1, chunk_vecs * tpr * vec)
    warp = tidx // 32
    lane = tidx % 32

    smem = cutlass.utils.SmemAllocator()
    buf_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(max(tpr // 32, 1)), byte_alignment=16)
    buf_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(max(tpr // 32, 1)), byte_alignment=16)

    thr_layout = cute.make_ordered_layout((1, tpr), order=(1, 0))
    val_layout = cute.make_layout((1, vec))
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mL.element_type, num_bits_per_copy=vec * mL.element_type.width)
    thr = cute.make_tiled_copy_tv(atom, thr_layout, val_layout).get_slice(tidx)
    idL = cute.make_identity_tensor(mL.shape)

    m = cutlass.Float32(-FLT_MAX)
    s = cutlass.Float32(0.0)
    for c in cutlass.range(n_chunks):
        tLgL = thr.partition_S(cute.local_tile(mL, tiler, (row, c)))
        tLcL = thr.partition_S(cute.local_tile(idL, tiler, (row, c)))
        tLp = cute.make_rmem_tensor(cute.make_layout((1, 1, chunk_vecs), stride=(0, 0, 1)), cutlass.Boolean)
        for k in cutlass.range_constexpr(chunk_vecs):
            tLp[0, 0, k] = cute.elem_less(tLcL[0, 0, k][1], n_cols)
        tLrL = cute.make_fragment_like(tLgL)
        tLrL.fill(-cutlass.BFloat16.inf)
        cute.copy(atom, tLgL, tLrL, pred=tLp)
        x = tLrL.load().to(cutlass.Float32)
        m_new = cute.arch.fmax(m, x.reduce(cute.ReductionOp.MAX, init_val=-cutlass.Float32.inf, reduction_profile=0))
        e = cute.math.exp2((x - m_new) * LOG2_E, fastmath=True)
        s = s * cute.math.exp2((m - m_new) * LOG2_E, fastmath=True) + e.reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)
        m = m_new

    row_max = _row_reduce(m, True, tpr, buf_max, warp, lane)
    s = s * cute.math.exp2((m - row_max) * LOG2_E, fastmath=True)
    row_sum = _row_reduce(s, False, tpr, buf_sum, warp, lane)

    if tidx == 0:
        lse = row_max + cute.math.log2(row_sum) * LN_2
        t = mT[row]
        x_t = cutlass.Float32(cutlass.Float32.nan)
        if t >= 0 and t < n_cols:
            x_t = mL[row, cutlass.Int32(t)].to(cutlass.Float32)
        mLoss[row] = lse - x_t


@cute.jit
def cross_entropy_rows(
    mL: cute.Tensor,
    mT: cute.Tensor,
    mLoss: cute.Tensor,
    tpr: cutlass.Constexpr,
    vec: cutlass.Constexpr,
    chunk_vecs: cutlass.Constexpr,
    n_chunks: cutlass.Constexpr,
):
    _ce_fwd_kernel(mL, mT, mLoss, tpr, vec, chunk_vecs, n_chunks).launch(grid=[mL.shape[0], 1, 1], block=[tpr, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        n_cols = logits.shape[-1]
        l2 = logits.reshape(-1, n_cols).contiguous()
        t = targets.reshape(-1).contiguous()
        n_rows = l2.shape[0]
        acc = torch.promote_types(logits.dtype, torch.float32)
        loss = torch.empty(n_rows, dtype=acc, device=logits.device)
        if n_rows == 0:
            return loss.view(targets.shape)
        vec = _vector_width(n_cols, l2.element_size(), (l2,))
        mL = _rows_2d(l2, vec * l2.element_size())
        mT = from_dlpack(t, assumed_align=8).mark_layout_dynamic()
        mLoss = from_dlpack(loss, assumed_align=4).mark_layout_dynamic()
        key = (l2.dtype, t.dtype, n_cols, vec)  # loss dtype follows the logits'
        if key not in _COMPILED:
            _COMPILED[key] = cute.compile(
                cross_entropy_rows, mL, mT, mLoss, THREADS_PER_ROW, vec, CHUNK_VECS, _n_chunks(n_cols, vec)
            )
        _COMPILED[key](mL, mT, mLoss)
        return loss.view(targets.shape)
