"""Mean cross-entropy loss in Triton: the per-token loss of the catalog's cross_entropy_forward
seed (logits read once, online log-sum-exp), then one fixed-order mean over tokens.

torch.nn.functional.cross_entropy(logits, targets) with its defaults
(reduction='mean', ignore_index=-100): a scalar. The per-token losses are
written to an fp32 scratch vector (4 bytes a token beside 2-4 bytes a logit:
0.05% of the traffic at a 4096 vocabulary) and a one-program kernel adds them
in a fixed order (lane-wise fp32 accumulators over BLOCK_MEAN-wide chunks,
then a tree) and divides by the number of tokens whose target is not
ignore_index. One program for N_TOKENS values is a few microseconds, and the
same input gives the same bits on every run (no atomics). An ignored token's
loss is 0 and its target is never used as an index; if every token is
ignored the mean is 0 / 0 = nan, as torch gives.

The per-token part, from the seed it is taken from:

What bounds it: bytes. loss = logsumexp(row) - row[target] reads every bf16
logit once (2 bytes) and writes 4 bytes per row, a handful of flops per byte,
so the kernel is as fast as HBM can stream the logits. It must keep enough
bytes in flight (~25+ KB per SM on an H100) and never read a logit twice.

Paths, chosen from the shapes at launch:

* Narrow rows (``n_cols <= MAX_ROW_BLOCK``, small vocabularies): a program
  holds ``BLOCK_ROWS`` whole rows as one [BLOCK_ROWS, BLOCK_COLS] tile of
  about ``ROW_TILE_BLOCK`` values, so each program has 16 KB of loads in
  flight however narrow the row, and max and sum are exact.
* Wide rows (LM-head vocabularies, 32K-128K+): a row is too long for
  registers, so the program walks it in [BLOCK_K, BLOCK_C] chunks (16 KB of
  loads per step) keeping an *online* log-sum-exp: a running max and a
  running sum of exp(x - max), rescaled by exp(old_max - new_max) when the
  max grows. That is what lets one pass over the logits suffice; a two-pass
  (max, then sum) kernel would read them twice. The running state is kept
  per lane, one (max, sum) per column of the chunk, not per row: the max of
  a chunk over its BLOCK_K sub-rows and the sum of its exps stay inside each
  thread, so the loop has no cross-warp reduction and no barrier (a
  block-wide max and sum per step wait at barriers with no loads in flight;
  the previous seed, which did that per 2048 values, measured 80% of the
  copy rate on an H100). The price is one extra exp per lane per step,
  1/BLOCK_K per logit; the lanes are merged once at the end.
* Split rows: a row is split over several programs that write partial
  (max, sum) pairs, merged by a tiny second kernel (8 bytes per split; the
  logits are still read once). Two reasons: few rows (fewer than ``2 * SMs``)
  would not fill the GPU (64 rows of a 128K vocabulary), and a 256 KB row is
  a coarse unit of work: 2048 such rows on 660 program slots leave a last
  partial wave in which a few lone programs, each latency bound, stream
  their whole rows while most SMs idle. ``SPLIT_BLOCK_COLS`` caps a
  program's share of a row; the default 32K vocabulary stays one program per
  row (one launch), a 128K one is halved.

Why fp32 and why max-subtraction: bf16 has 8 mantissa bits, and a sum of 32K
exponentials in bf16 would keep two or three digits; exp of an unshifted
logit overflows fp32 for logits above ~88. Every exponent is taken of
x - max <= 0, in fp32 registers. A lane (or row) that has seen only -inf
shifts by 0 instead, so exp(-inf - -inf) never makes a NaN. The target logit
is one scalar load per row, masked off for an ignored token.

Knobs: MAX_ROW_BLOCK (where whole rows stop; 32768 would hold a 32K row
whole at 16 warps, 87 registers), ROW_TILE_BLOCK (values per narrow
program), CHUNK_BLOCK_C / CHUNK_BLOCK_K (chunk shape: BLOCK_C is 8 bf16 per
thread, one 16-byte load, at 8 warps; BLOCK_K stacks loads per thread; at
the defaults 48 registers, so 5 programs per SM and 80 KB of loads in
flight), SPLIT_BLOCK_COLS, BLOCK_MEAN, each launch's num_warps and the programs per SM
under which rows are split. Dtype-generic: bf16 or fp32 logits (KernelBench's
file is fp32), an fp32 loss.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_ROW_BLOCK = 8192  # rows up to this width are held whole in registers
ROW_TILE_BLOCK = 8192  # values per whole-row program: BLOCK_ROWS = ROW_TILE_BLOCK // BLOCK_COLS
CHUNK_BLOCK_C = 2048  # columns per sub-row of a wide-row chunk (the per-lane state's width)
CHUNK_BLOCK_K = 4  # sub-rows per chunk: loads in flight per thread per step
SPLIT_BLOCK_COLS = 65536  # a program reduces at most about this many columns of a row
BLOCK_MEAN = 1024  # losses per step of the mean
IGNORE_INDEX = tl.constexpr(-100)  # torch's default: such a token has no loss and no count


@triton.jit
def _lse_of_columns(row_ptr, col_start, col_end, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr):
    """(max, sum of exp(x - max)) of row_ptr[col_start:col_end], one pass, per-lane online."""
    offs = tl.arange(0, BLOCK_K)[:, None] * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    m_lane = tl.full([BLOCK_C], float("-inf"), tl.float32)
    s_lane = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(col_start, col_end, BLOCK_K * BLOCK_C):
        cols = start + offs
        x = tl.load(row_ptr + cols, mask=cols < col_end, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m_lane, tl.max(x, axis=0))  # within each thread: no barrier
        shift = tl.where(new_m == float("-inf"), 0.0, new_m)  # an all -inf lane shifts by 0
        s_lane = s_lane * tl.exp(m_lane - shift) + tl.sum(tl.exp(x - shift[None, :]), axis=0)
        m_lane = new_m
    m = tl.max(m_lane, axis=0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    return shift, tl.sum(s_lane * tl.exp(m_lane - shift), axis=0)


@triton.jit
def _ce_fwd_chunks(
    logits_ptr, targets_ptr, loss_ptr, part_m_ptr, part_s_ptr,
    n_cols, span, n_splits,
    FINAL: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Program (row, split) reduces columns [split * span, (split + 1) * span) of its row."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    row_ptr = logits_ptr + row.to(tl.int64) * n_cols  # int64: tokens * vocab passes 2^31
    col_start = split * span
    col_end = tl.minimum(col_start + span, n_cols)
    m, s = _lse_of_columns(row_ptr, col_start, col_end, BLOCK_K, BLOCK_C)
    if FINAL:
        target = tl.load(targets_ptr + row)
        valid = target != IGNORE_INDEX
        target_logit = tl.load(row_ptr + target, mask=valid, other=0.0).to(tl.float32)
        tl.store(loss_ptr + row, tl.where(valid, m + tl.log(s) - target_logit, 0.0))
    else:
        tl.store(part_m_ptr + row * n_splits + split, m)
        tl.store(part_s_ptr + row * n_splits + split, s)


@triton.jit
def _ce_fwd_combine(
    logits_ptr, targets_ptr, loss_ptr, part_m_ptr, part_s_ptr,
    n_cols, n_splits,
    BLOCK_SPLITS: tl.constexpr,
):
    """Merge one row's partial (max, sum) pairs into its loss."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SPLITS)
    mask = offs < n_splits
    pm = tl.load(part_m_ptr + row * n_splits + offs, mask=mask, other=float("-inf"))
    ps = tl.load(part_s_ptr + row * n_splits + offs, mask=mask, other=0.0)
    m = tl.max(pm, axis=0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(ps * tl.exp(pm - shift), axis=0)
    target = tl.load(targets_ptr + row)
    valid = target != IGNORE_INDEX
    target_logit = tl.load(logits_ptr + row.to(tl.int64) * n_cols + target, mask=valid, other=0.0).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(valid, shift + tl.log(s) - target_logit, 0.0))


@triton.jit
def _ce_fwd_rows(
    logits_ptr, targets_ptr, loss_ptr,
    n_rows, n_cols,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """BLOCK_ROWS whole rows per program: exact max, then sum, from registers."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_COLS)
    row_offs = rows.to(tl.int64) * n_cols
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    x = tl.load(logits_ptr + row_offs[:, None] + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    shift = tl.where(m == float("-inf"), 0.0, m)  # rows past the end, or all -inf
    s = tl.sum(tl.exp(x - shift[:, None]), axis=1)
    target = tl.load(targets_ptr + rows, mask=row_mask, other=0)
    valid = row_mask & (target != IGNORE_INDEX)
    target_logit = tl.load(logits_ptr + row_offs + target, mask=valid, other=0.0).to(tl.float32)
    tl.store(loss_ptr + rows, tl.where(valid, shift + tl.log(s) - target_logit, 0.0), mask=row_mask)


@triton.jit
def _ce_mean(loss_ptr, targets_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    """out = sum(loss) / count(targets != IGNORE_INDEX), lane-wise fp32 sums then one tree: fixed order."""
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    count = tl.zeros((BLOCK,), dtype=tl.int32)
    for start in range(0, n_rows, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        mask = rows < n_rows
        acc += tl.load(loss_ptr + rows, mask=mask, other=0.0)
        target = tl.load(targets_ptr + rows, mask=mask, other=IGNORE_INDEX)
        count += (target != IGNORE_INDEX).to(tl.int32)
    total = tl.sum(acc, axis=0)
    n_valid = tl.sum(count, axis=0).to(tl.float32)
    tl.store(out_ptr, (total / n_valid).to(out_ptr.dtype.element_ty))


def _program_count(device: torch.device) -> int:
    """Programs that fill the device; a row is split when there are fewer rows than this."""
    # the interpreter has no SMs: an H100's 132 stands in, so it walks the GPU's paths
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132
    return 2 * sm_count


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        if logits.dim() > 2:  # [N, C, d1, ...]: torch's class dim is 1; rows are every other position
            logits = logits.movedim(1, -1)
        n_cols = logits.shape[-1]
        logits = logits.contiguous().view(-1, n_cols)
        targets = targets.contiguous().view(-1)
        n_rows = logits.shape[0]
        out = torch.empty((), dtype=torch.promote_types(logits.dtype, torch.float32), device=logits.device)
        if n_rows == 0:  # the mean of no tokens
            return out.fill_(float("nan"))
        loss = torch.empty(n_rows, dtype=torch.float32, device=logits.device)  # per-token losses
        self._token_losses(logits, targets, loss, n_rows, n_cols)
        _ce_mean[(1,)](loss, targets, out, n_rows, BLOCK=BLOCK_MEAN, num_warps=4)
        return out

    @staticmethod
    def _token_losses(logits, targets, loss, n_rows, n_cols):
        """The cross_entropy_forward seed's launches: loss[i] for every token (0 where ignored)."""
        if n_cols <= MAX_ROW_BLOCK:
            block_cols = triton.next_power_of_2(n_cols)  # covers the row: correctness, not a knob
            block_rows = triton.next_power_of_2(triton.cdiv(ROW_TILE_BLOCK, block_cols))
            _ce_fwd_rows[(triton.cdiv(n_rows, block_rows),)](
                logits, targets, loss,
                n_rows, n_cols,
                BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols,
                num_warps=min(max(block_rows * block_cols // 1024, 1), 16),
            )
            return
        chunk = CHUNK_BLOCK_K * CHUNK_BLOCK_C
        n_chunks = triton.cdiv(n_cols, chunk)
        splits = min(max(triton.cdiv(_program_count(logits.device), n_rows), triton.cdiv(n_cols, SPLIT_BLOCK_COLS)),
                     n_chunks)
        span = triton.cdiv(n_chunks, splits) * chunk  # whole chunks per split
        splits = triton.cdiv(n_cols, span)
        part_m = part_s = loss  # unused unless the row is split
        if splits > 1:
            part_m = torch.empty(n_rows, splits, dtype=torch.float32, device=logits.device)
            part_s = torch.empty_like(part_m)
        _ce_fwd_chunks[(n_rows, splits)](
            logits, targets, loss, part_m, part_s,
            n_cols, span, splits,
            FINAL=splits == 1, BLOCK_K=CHUNK_BLOCK_K, BLOCK_C=CHUNK_BLOCK_C,
            num_warps=8,
        )
        if splits > 1:
            _ce_fwd_combine[(n_rows,)](
                logits, targets, loss, part_m, part_s,
                n_cols, splits,
                BLOCK_SPLITS=triton.next_power_of_2(splits), num_warps=1,
            )
