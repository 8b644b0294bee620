"""Cross-entropy backward in Triton: grad = (softmax(x) - onehot(target)) * grad_loss, logits read once or twice.

What bounds it: bytes. Every bf16 logit is read and every bf16 gradient
written, 4 bytes per vocabulary entry per token and a few flops each, so the
kernel runs at the speed HBM streams them. The softmax needs the row's
log-sum-exp before the first gradient can be written, so a row that does not
fit in registers is read twice; the second read should come from L2, and the
choices below are made so that it can.

Paths, chosen from the shapes at launch:

* Narrow rows (``n_cols <= MAX_ROW_BLOCK``): a program holds ``BLOCK_ROWS``
  whole rows, about ``ROW_TILE_BLOCK`` values, in registers: exact max and
  sum, then the gradient straight from the same registers. Logits are read
  once: the least traffic there is.
* Wide rows (LM-head vocabularies): one program per row, two passes over
  [BLOCK_K, BLOCK_C] chunks. Pass 1 is an online log-sum-exp (running max and
  running sum of exp(x - max), rescaled when the max grows) kept per lane,
  one (max, sum) per chunk column, so the loop has no cross-warp reduction
  and no barrier, only one extra exp per lane per step. Pass 2 walks the row
  *backwards*: the chunks pass 1 read last are re-read first, while they are
  surely still in L2, and a 128K-wide row (256 KB) has its early chunks
  re-read after the fewest other bytes have gone through the cache. Fewer,
  wider programs per SM keep the rows in flight few enough that their bytes
  fit L2 (50 MB on an H100): at the defaults (16 warps, 64 registers, so 2
  programs per SM) 264 rows of 32K bf16 are 17 MB. A 128K row is 256 KB and
  264 of them are 67 MB, more than L2: there only the later chunks hit, and
  CHUNK_BLOCK_K = 8 (more registers, 1 program of 16 warps per SM, 132 rows
  in flight) is the setting to try.
* Few rows (fewer than ``2 * SMs``): rows are split over several programs;
  a first kernel writes partial (max, sum) pairs per split, the second merges
  its row's partials and writes its split's gradient. Few rows are few bytes,
  so the second kernel's re-read comes from L2.

Why fp32 and the shift: bf16 keeps 8 mantissa bits, far too few for a sum of
32K exponentials, and exp of an unshifted logit overflows fp32 above ~88, so
every exponent is of x - lse <= 0 in fp32 registers; the gradient is
rounded to bf16 once, at the store. A lane or row that has seen only -inf
shifts by 0 instead, so no NaN appears from -inf - -inf. The one-hot is a
compare against the row's target inside the same store (no second write);
the problem has no ignore_index, so none is handled.

Knobs: MAX_ROW_BLOCK (where whole rows stop; 32768 holds a 32K row whole,
read once, at 16 warps and 128 registers, one program per SM: the other
candidate for the default shape), ROW_TILE_BLOCK (values per
narrow program), CHUNK_BLOCK_C / CHUNK_BLOCK_K (chunk shape: BLOCK_C is 8 bf16
per thread, one 16-byte access, at 16 warps; BLOCK_K stacks accesses per
thread), each launch's num_warps and the programs per SM under which rows
are split.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_ROW_BLOCK = 8192  # rows up to this width are held whole in registers
ROW_TILE_BLOCK = 8192  # values per whole-row program: BLOCK_ROWS = ROW_TILE_BLOCK // BLOCK_COLS
CHUNK_BLOCK_C = 4096  # columns per sub-row of a wide-row chunk (the per-lane state's width)
CHUNK_BLOCK_K = 4  # sub-rows per chunk: accesses in flight per thread per step


@triton.jit
def _lse_of_columns(row_ptr, col_start, col_end, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr):
    """(shift, sum of exp(x - shift)) of row_ptr[col_start:col_end], one pass, per-lane online;
    shift is the max, or 0 when every value is -inf."""
    offs = tl.arange(0, BLOCK_K)[:, None] * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    m_lane = tl.full([BLOCK_C], float("-inf"), tl.float32)
    s_lane = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(col_start, col_end, BLOCK_K * BLOCK_C):
        cols = start + offs
        x = tl.load(row_ptr + cols, mask=cols < col_end, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m_lane, tl.max(x, axis=0))  # within each thread: no barrier
        shift = tl.where(new_m == float("-inf"), 0.0, new_m)
        s_lane = s_lane * tl.exp(m_lane - shift) + tl.sum(tl.exp(x - shift[None, :]), axis=0)
        m_lane = new_m
    m = tl.max(m_lane, axis=0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    return shift, tl.sum(s_lane * tl.exp(m_lane - shift), axis=0)


@triton.jit
def _ce_lse_partials(
    logits_ptr, part_m_ptr, part_s_ptr,
    n_cols, span, n_splits,
    BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Program (row, split): partial (shift, sum) of columns [split * span, (split + 1) * span)."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    col_start = split * span
    col_end = tl.minimum(col_start + span, n_cols)
    m, s = _lse_of_columns(logits_ptr + row.to(tl.int64) * n_cols, col_start, col_end, BLOCK_K, BLOCK_C)
    tl.store(part_m_ptr + row * n_splits + split, m)
    tl.store(part_s_ptr + row * n_splits + split, s)


@triton.jit
def _ce_bwd_chunks(
    logits_ptr, targets_ptr, grad_loss_ptr, grad_ptr, part_m_ptr, part_s_ptr,
    n_cols, span, n_splits,
    FROM_PARTIALS: tl.constexpr, BLOCK_SPLITS: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Program (row, split) writes the gradient of columns [split * span, (split + 1) * span):
    its row's log-sum-exp from the partials, or (one split) from its own first pass."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    row_off = row.to(tl.int64) * n_cols  # int64: tokens * vocab passes 2^31
    col_start = split * span
    col_end = tl.minimum(col_start + span, n_cols)
    if FROM_PARTIALS:
        offs_s = tl.arange(0, BLOCK_SPLITS)
        pm = tl.load(part_m_ptr + row * n_splits + offs_s, mask=offs_s < n_splits, other=float("-inf"))
        ps = tl.load(part_s_ptr + row * n_splits + offs_s, mask=offs_s < n_splits, other=0.0)
        m = tl.max(pm, axis=0)
        shift = tl.where(m == float("-inf"), 0.0, m)
        lse = shift + tl.log(tl.sum(ps * tl.exp(pm - shift), axis=0))
    else:
        shift, s = _lse_of_columns(logits_ptr + row_off, col_start, col_end, BLOCK_K, BLOCK_C)
        lse = shift + tl.log(s)
    target = tl.load(targets_ptr + row)
    g = tl.load(grad_loss_ptr + row).to(tl.float32)
    offs = tl.arange(0, BLOCK_K)[:, None] * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    n_chunks = tl.cdiv(col_end - col_start, BLOCK_K * BLOCK_C)
    for i in range(0, n_chunks):
        # last chunk first: the bytes pass 1 read most recently are the likeliest L2 hits
        cols = col_start + (n_chunks - 1 - i) * (BLOCK_K * BLOCK_C) + offs
        mask = cols < col_end
        x = tl.load(logits_ptr + row_off + cols, mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)
        grad = tl.where(cols == target, p - 1.0, p) * g
        tl.store(grad_ptr + row_off + cols, grad.to(grad_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ce_bwd_rows(
    logits_ptr, targets_ptr, grad_loss_ptr, grad_ptr,
    n_rows, n_cols,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """BLOCK_ROWS whole rows per program: read once, exact max and sum, gradient from registers."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_COLS)
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    x = tl.load(logits_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    shift = tl.where(m == float("-inf"), 0.0, m)  # rows past the end, or all -inf
    e = tl.exp(x - shift[:, None])
    s = tl.sum(e, axis=1)
    target = tl.load(targets_ptr + rows, mask=row_mask, other=0)
    g = tl.load(grad_loss_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)
    p = e * (1.0 / s)[:, None]
    grad = tl.where(cols[None, :] == target[:, None], p - 1.0, p) * g[:, None]
    tl.store(grad_ptr + offs, grad.to(grad_ptr.dtype.element_ty), mask=mask)


def _program_count(device: torch.device) -> int:
    """Programs that fill the device; a row is split when there are fewer rows than this."""
    # the interpreter has no SMs: an H100's 132 stands in, so it walks the GPU's paths
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132
    return 2 * sm_count


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets, grad_loss):
        shape = logits.shape
        n_cols = shape[-1]
        logits = logits.contiguous().view(-1, n_cols)
        targets = targets.contiguous().view(-1)
        grad_loss = grad_loss.contiguous().view(-1)
        n_rows = logits.shape[0]
        grad = torch.empty_like(logits)
        if n_rows == 0:
            return grad.view(shape)
        if n_cols <= MAX_ROW_BLOCK:
            block_cols = triton.next_power_of_2(n_cols)  # covers the row: correctness, not a knob
            block_rows = triton.next_power_of_2(triton.cdiv(ROW_TILE_BLOCK, block_cols))
            _ce_bwd_rows[(triton.cdiv(n_rows, block_rows),)](
                logits, targets, grad_loss, grad,
                n_rows, n_cols,
                BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols,
                num_warps=min(max(block_rows * block_cols // 1024, 1), 16),
            )
            return grad.view(shape)
        chunk = CHUNK_BLOCK_K * CHUNK_BLOCK_C
        n_chunks = triton.cdiv(n_cols, chunk)
        splits = min(triton.cdiv(_program_count(logits.device), n_rows), n_chunks)
        span = triton.cdiv(n_chunks, splits) * chunk  # whole chunks per split
        splits = triton.cdiv(n_cols, span)
        part_m = part_s = grad_loss  # unused unless the row is split
        if splits > 1:
            part_m = torch.empty(n_rows, splits, dtype=torch.float32, device=logits.device)
            part_s = torch.empty_like(part_m)
            _ce_lse_partials[(n_rows, splits)](
                logits, part_m, part_s,
                n_cols, span, splits,
                BLOCK_K=CHUNK_BLOCK_K, BLOCK_C=CHUNK_BLOCK_C,
                num_warps=16,
            )
        _ce_bwd_chunks[(n_rows, splits)](
            logits, targets, grad_loss, grad, part_m, part_s,
            n_cols, span, splits,
            FROM_PARTIALS=splits > 1, BLOCK_SPLITS=triton.next_power_of_2(splits),
            BLOCK_K=CHUNK_BLOCK_K, BLOCK_C=CHUNK_BLOCK_C,
            num_warps=16,
        )
        return grad.view(shape)
