"""RMSNorm backward in CuTe DSL: persistent row kernel for dx, fp32 per-CTA partials for dweight.

dx = rstd * (g*w - x_hat * mean(g*w*x_hat)) with x_hat = x * rstd, per row; dweight is
the column sum over all rows of g * x_hat.

Kernel 1 is persistent: a grid of as many CTAs as fit on the SMs at once walks the row
blocks (block b, b + grid, ...). The launch caps the registers at REGS_PER_THREAD
(min_blocks_per_mp), so 65536 // (threads * REGS_PER_THREAD) CTAs are resident on each SM
as the grid size assumes. Each thread keeps its slice of weight in registers for the whole
run and loads its slice of g and x with 128-bit vector loads (hidden 4096 bf16: 256
threads per row, 2 vectors of 8 per thread). It prefetches the next row block's g, x and
rstd into a second set of registers before working on the current one, so loads stay in
flight through the reduction and its barrier. sum(g*w*x_hat) is reduced over the row with
warp shuffles plus a double-buffered shared-memory exchange (one barrier per row), dx is
written with 128-bit stores and g * x_hat is accumulated in fp32 registers. Reading g and
x once and writing dx once is the minimum traffic, so the row loop runs at memory
bandwidth. At the end each CTA writes its fp32 dweight partial (one row per row slot of
the CTA) to a scratch buffer whose rows are padded to the tile width, so those stores need
no column mask.

Kernel 2 sums the partials over their (grid * rows-per-CTA) rows: a CTA owns 32 * v
columns, its REDUCE_WARPS warps split the partial rows (loop unrolled REDUCE_UNROLL times
so several loads are in flight), and a shared-memory exchange finishes the sum; the result
is rounded once to bf16. fp32 throughout: a bf16 running sum over 16384 rows would lose the
small terms.

Tails: the row length is a compile-time constant and the vector width is the widest of
8/4/2/1 dividing it and the tensors' alignment (hidden 4095 runs scalar), so a column
predicate per vector masks the row end; rows past ROWS in the last block load as zero
(contributing nothing to dweight) and are not stored. Every CTA of the grid owns at least
one row block and writes all of its partial rows; kernel 2 masks the columns past HIDDEN.

Host side: forward keeps the executors that cute.compile returns in _COMPILED, keyed by
kernel, dtypes, weight shape, row length and vector width. Calling the @cute.jit functions
directly would re-run their whole Python trace on every call before the DSL's cache finds
the binary (hundreds of ms per forward on a CPU). Each key is everything its compile
specialises on: the tensors' dtypes, the static layouts (row length of g, x and dx, the
weight's and dweight's shape, the partials' padded row length) and the vector width (copy
widths and assumed alignment); the compile-time constants (tpr, rows per CTA, n_iter and
CTAs per SM from _tiling, kernel 2's min(vec, 4)) are computed from row length and vector
width alone. The row count and the grid size are run-time values, so one pair of
executors serves every batch and SM count.
"""

import torch
import torch.nn as nn

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

COPY_BITS = 128  # widest global access per thread (16 bytes)
THREADS_PER_CTA = 256  # CTA size when a row needs fewer threads (several rows per CTA)
VECS_PER_THREAD = 2  # target number of vectors of a row held by each thread
MAX_THREADS_PER_ROW = 1024  # a row never spans more than one CTA
REGS_PER_THREAD = 128  # register budget of the row kernel; sets its CTAs per SM (65536 // (threads * budget))
REDUCE_WARPS = 32  # kernel 2: warps splitting the partial rows of a column strip
REDUCE_UNROLL = 4  # kernel 2: unroll of the partial-row loop (loads in flight per thread)

#: ("rows" | "dweight", dtypes, ..., n_cols, vec) -> the executor cute.compile built for that kernel
_COMPILED = {}


def _vector_width(n_cols, elem_bytes, tensors):
    """Widest vector (elements) dividing the row length and every tensor's base alignment."""
    vec = COPY_BITS // (8 * elem_bytes)
    while vec > 1 and (n_cols % vec != 0 or any(t.data_ptr() % (vec * elem_bytes) != 0 for t in tensors)):
        vec //= 2
    return vec


def _threads_per_row(n_vecs):
    tpr = 1
    while tpr < MAX_THREADS_PER_ROW and tpr * VECS_PER_THREAD < n_vecs:
        tpr *= 2
    return tpr


def _tiling(n_cols, vec):
    """The row kernel's compile-time layout (tpr, rows_per_cta, n_iter, ctas_per_sm): a function
    of the row length and the vector width only, both in the compile cache's keys."""
    n_vecs = n_cols // vec
    tpr = _threads_per_row(n_vecs)
    rows_per_cta = max(THREADS_PER_CTA, tpr) // tpr
    threads = tpr * rows_per_cta
    ctas_per_sm = max(1, min(2048 // threads, 65536 // (threads * REGS_PER_THREAD)))
    return tpr, rows_per_cta, (n_vecs + tpr - 1) // tpr, ctas_per_sm


def _sm_count(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # compile-only runs on a CPU: size the grid for an H100


def _rows_2d(t, align):
    """(rows, cols) row-major tensor: dynamic row count, static row length."""
    return from_dlpack(t, assumed_align=align).mark_compact_shape_dynamic(mode=0, stride_order=(0, 1))


@cute.jit
def _row_sum(val, tpr: cutlass.Constexpr, buf, slot, row_local, warp_in_row, lane):
    """Sum of `val` over the tpr threads of a row (all threads of the CTA must call it).
    buf has two slots used alternately, so one barrier per call is enough."""
    val = cute.arch.warp_reduction_sum(val, threads_in_group=min(tpr, 32))
    if cutlass.const_expr(tpr > 32):
        if lane == 0:
            buf[slot, row_local, warp_in_row] = val
        cute.arch.barrier()
        val = buf[slot, row_local, 0]
        for i in cutlass.range_constexpr(1, tpr // 32):
            val = val + buf[slot, row_local, i]
    return val


@cute.kernel
def _rmsnorm_bwd_rows_kernel(
    mG: cute.Tensor,
    mX: cute.Tensor,
    mW: cute.Tensor,
    mR: cute.Tensor,
    mDX: cute.Tensor,
    mPart: cute.Tensor,
    tpr: cutlass.Constexpr,
    rows_per_cta: cutlass.Constexpr,
    vec: cutlass.Constexpr,
    n_iter: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    grid, _, _ = cute.arch.grid_dim()
    n_rows = mX.shape[0]
    n_cols = mX.shape[1]
    tiler = (rows_per_cta, n_iter * tpr * vec)
    n_blocks = cute.ceil_div(n_rows, rows_per_cta)
    inv_n = 1.0 / n_cols

    smem = cutlass.utils.SmemAllocator()
    buf = smem.allocate_tensor(cutlass.Float32, cute.make_layout((2, rows_per_cta, max(tpr // 32, 1))), byte_alignment=16)

    thr_layout = cute.make_ordered_layout((rows_per_cta, tpr), order=(1, 0))
    val_layout = cute.make_layout((1, vec))
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mX.element_type, num_bits_per_copy=vec * mX.element_type.width)
    thr = cute.make_tiled_copy_tv(atom, thr_layout, val_layout).get_slice(tidx)
    atom_f32 = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float32, num_bits_per_copy=min(vec * 32, 128))
    thr_f32 = cute.make_tiled_copy_tv(atom_f32, thr_layout, val_layout).get_slice(tidx)

    lane = tidx % 32
    row_local = tidx // tpr
    warp_in_row = (tidx % tpr) // 32

    # column predicates (the same for every row block) from block 0's coordinates
    cX0 = cute.local_tile(cute.make_identity_tensor(mX.shape), tiler, (0, 0))
    tXc0 = thr.partition_S(cX0)
    tXp = cute.make_rmem_tensor(cute.make_layout((1, cute.size(tXc0, mode=[1]), n_iter), stride=(0, n_iter, 1)), cutlass.Boolean)
    for m in cutlass.range_constexpr(cute.size(tXc0, mode=[1])):
        for k in cutlass.range_constexpr(n_iter):
            tXp[0, m, k] = cute.elem_less(tXc0[0, m, k][1], n_cols)

    # weight, broadcast over the rows of the tile, loaded once
    mW2 = cute.make_tensor(mW.iterator, cute.prepend(mW.layout, cute.make_layout((rows_per_cta,), stride=(0,))))
    tXgW = thr.partition_S(cute.local_tile(mW2, tiler, (0, 0)))
    tXrW = cute.make_fragment_like(tXgW)
    tXrW.fill(0)
    cute.copy(atom, tXgW, tXrW, pred=tXp)
    w = tXrW.load().to(cutlass.Float32)

    acc = cute.make_rmem_tensor(tXrW.layout, cutlass.Float32)
    acc.fill(0.0)
    tXrG = cute.make_fragment_like(tXgW)  # current row block
    tXrX = cute.make_fragment_like(tXgW)
    tXrGn = cute.make_fragment_like(tXgW)  # next row block (prefetched)
    tXrXn = cute.make_fragment_like(tXgW)
    tXrDX = cute.make_fragment_like(tXgW)

    # prologue: load this CTA's first row block
    tXrG.fill(0)
    tXrX.fill(0)
    r = cutlass.Float32(0.0)
    row = bidx * rows_per_cta + row_local
    if row < n_rows:
        cute.copy(atom, thr.partition_S(cute.local_tile(mG, tiler, (bidx, 0))), tXrG, pred=tXp)
        cute.copy(atom, thr.partition_S(cute.local_tile(mX, tiler, (bidx, 0))), tXrX, pred=tXp)
        r = mR[row]

    slot = cutlass.Int32(0)
    for blk in cutlass.range(bidx, n_blocks, grid):
        row = blk * rows_per_cta + row_local
        # prefetch the next row block while this one is computed
        nrow = row + grid * rows_per_cta
        tXrGn.fill(0)
        tXrXn.fill(0)
        rn = cutlass.Float32(0.0)
        if nrow < n_rows:
            cute.copy(atom, thr.partition_S(cute.local_tile(mG, tiler, (blk + grid, 0))), tXrGn, pred=tXp)
            cute.copy(atom, thr.partition_S(cute.local_tile(mX, tiler, (blk + grid, 0))), tXrXn, pred=tXp)
            rn = mR[nrow]

        g = tXrG.load().to(cutlass.Float32)
        x_hat = tXrX.load().to(cutlass.Float32) * r
        gw = g * w
        dot = (gw * x_hat).reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)
        dot = _row_sum(dot, tpr, buf, slot, row_local, warp_in_row, lane)
        c = dot * inv_n
        tXrDX.store((r * (gw - x_hat * c)).to(mDX.element_type))
        if row < n_rows:
            cute.copy(atom, tXrDX, thr.partition_D(cute.local_tile(mDX, tiler, (blk, 0))), pred=tXp)
        acc.store(acc.load() + g * x_hat)

        tXrG.store(tXrGn.load())
        tXrX.store(tXrXn.load())
        r = rn
        slot = 1 - slot

    # this CTA's partial: rows [bidx * rows_per_cta, (bidx + 1) * rows_per_cta), padded columns
    tPgP = thr_f32.partition_D(cute.local_tile(mPart, tiler, (bidx, 0)))
    cute.copy(atom_f32, thr_f32.retile(acc), tPgP)


@cute.kernel
def _sum_partials_kernel(mPart: cute.Tensor, mDW: cute.Tensor, v: cutlass.Constexpr, unroll: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    n_part = mPart.shape[0]
    n_cols = mDW.shape[0]
    n_warps = REDUCE_WARPS
    warp = tidx // 32
    lane = tidx % 32
    vidx = bidx * 32 + lane  # index of this thread's v-column vector
    col_ok = vidx * v < n_cols

    smem = cutlass.utils.SmemAllocator()
    sbuf = smem.allocate_tensor(cutlass.Float32, cute.make_layout((n_warps, 32 * v), stride=(32 * v, 1)), byte_alignment=16)

    acc = cute.make_rmem_tensor(cute.make_layout((v,)), cutlass.Float32)
    acc.fill(0.0)
    frag = cute.make_rmem_tensor(cute.make_layout((v,)), cutlass.Float32)
    if col_ok:
        for p in cutlass.range(warp, n_part, n_warps, unroll=unroll):
            src = cute.local_tile(mPart[p, None], (v,), (vidx,))
            cute.autovec_copy(src, frag)
            acc.store(acc.load() + frag.load())
    cute.autovec_copy(acc, cute.local_tile(sbuf[warp, None], (v,), (lane,)))
    cute.arch.barrier()
    if warp == 0:
        if col_ok:
            cute.autovec_copy(cute.local_tile(sbuf[0, None], (v,), (lane,)), acc)
            for i in cutlass.range_constexpr(1, n_warps):
                cute.autovec_copy(cute.local_tile(sbuf[i, None], (v,), (lane,)), frag)
                acc.store(acc.load() + frag.load())
            out = cute.make_rmem_tensor(cute.make_layout((v,)), mDW.element_type)
            out.store(acc.load().to(mDW.element_type))
            cute.autovec_copy(out, cute.local_tile(mDW, (v,), (vidx,)))


@cute.jit
def rmsnorm_backward_rows(
    mG: cute.Tensor,
    mX: cute.Tensor,
    mW: cute.Tensor,
    mR: cute.Tensor,
    mDX: cute.Tensor,
    mPart: cute.Tensor,
    grid: cutlass.Int32,
    tpr: cutlass.Constexpr,
    rows_per_cta: cutlass.Constexpr,
    vec: cutlass.Constexpr,
    n_iter: cutlass.Constexpr,
    ctas_per_sm: cutlass.Constexpr,
):
    # min_blocks_per_mp caps the registers so that ctas_per_sm CTAs fit on an SM: the whole
    # persistent grid is resident at once (carveout -1 = driver default, no device query)
    _rmsnorm_bwd_rows_kernel(mG, mX, mW, mR, mDX, mPart, tpr, rows_per_cta, vec, n_iter).launch(
        grid=[grid, 1, 1], block=[tpr * rows_per_cta, 1, 1], min_blocks_per_mp=ctas_per_sm, preferred_smem_carveout=-1
    )


@cute.jit
def rmsnorm_backward_dweight(mPart: cute.Tensor, mDW: cute.Tensor, v: cutlass.Constexpr):
    n_ctas = cute.ceil_div(mDW.shape[0], 32 * v)
    _sum_partials_kernel(mPart, mDW, v, REDUCE_UNROLL).launch(grid=[n_ctas, 1, 1], block=[32 * REDUCE_WARPS, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, grad_out, x, weight, rstd):
        n_cols = x.shape[-1]
        g2 = grad_out.reshape(-1, n_cols).contiguous()
        x2 = x.reshape(-1, n_cols).contiguous()
        w = weight.contiguous()
        r = rstd.reshape(-1).contiguous()
        n_rows = x2.shape[0]
        grad_x = torch.empty_like(x2)
        grad_w = torch.empty(n_cols, dtype=weight.dtype, device=x.device)

        esize = x2.element_size()
        vec = _vector_width(n_cols, esize, (g2, x2, w, grad_x))
        align = vec * esize
        tpr, rows_per_cta, n_iter, ctas_per_sm = _tiling(n_cols, vec)
        n_blocks = (n_rows + rows_per_cta - 1) // rows_per_cta
        grid = max(1, min(n_blocks, _sm_count(x.device) * ctas_per_sm))
        cols_pad = n_iter * tpr * vec
        partial = torch.empty((grid * rows_per_cta, cols_pad), dtype=torch.float32, device=x.device)
        v = min(vec, 4)  # fp32 vector width of kernel 2 (divides n_cols and cols_pad)

        mG, mX, mDX = _rows_2d(g2, align), _rows_2d(x2, align), _rows_2d(grad_x, align)
        mW = from_dlpack(w, assumed_align=align)
        mR = from_dlpack(r, assumed_align=4).mark_layout_dynamic()
        mPart = _rows_2d(partial, 16)
        mDW = from_dlpack(grad_w, assumed_align=16)
        # grad_x has x's dtype, grad_w weight's; partial is fp32 and cols_pad (from n_cols, vec) wide
        rows_key = ("rows", g2.dtype, x2.dtype, w.dtype, w.shape, r.dtype, n_cols, vec)
        dw_key = ("dweight", w.dtype, n_cols, vec)
        if rows_key not in _COMPILED:
            _COMPILED[rows_key] = cute.compile(
                rmsnorm_backward_rows, mG, mX, mW, mR, mDX, mPart, grid, tpr, rows_per_cta, vec, n_iter, ctas_per_sm
            )
        if dw_key not in _COMPILED:
            _COMPILED[dw_key] = cute.compile(rmsnorm_backward_dweight, mPart, mDW, v)
        _COMPILED[rows_key](mG, mX, mW, mR, mDX, mPart, grid)
        _COMPILED[dw_key](mPart, mDW)
        return grad_x.view(x.shape), grad_w
