"""Structured input patterns: values laid out along rows, not drawn independently per element.

Every other input distribution (:mod:`kgen.evals.problem.input_distributions`) is an
element-wise, identically distributed transform. On such data a statistic read from part of
a row is a good estimate of the whole row's, and every row's statistic is about the same,
so two cheap wrongs pass within a bf16 tolerance once rows are long:

* **reading part of a row**: a mean, RMS or norm computed from every second element, from
  the first half of the row or from a few of its blocks, then rescaled. Over 65536 i.i.d.
  normal values, half of them estimate the RMS to about 0.4%, inside bf16's 1e-2.
* **mixing rows**: one statistic shared by every row (a global RMS, row 0's, the previous
  row's). Over i.i.d. rows of 65536 values the row RMSs differ by about 0.3%.

The patterns here break both, and stay ordinary data for a kernel that reads everything:

* :func:`spiked_rows`: one element per row replaced by a spike of ``sqrt(n)`` times the
  tensor's RMS (``n`` the row length), so the spike holds about half of the row's sum of
  squares and moves its sum by as much as all the rest does: a kernel that misses it (or
  counts it twice) is wrong by tens of percent on that row. Row 0's spike sits on the
  last element and row 1's on the first (a dropped tail or head is always seen); the
  other rows' positions are random.
* :func:`scaled_rows`: each row multiplied by its own power of two, ``2^k`` with ``k`` in
  ``[-ROW_SCALE_OCTAVES, ROW_SCALE_OCTAVES]`` (row 0 the largest, the last row the
  smallest): per-row statistics now differ by up to ``2^(2 * ROW_SCALE_OCTAVES)``, a
  shared one is wrong for almost every row, and a softmax that subtracts a shared maximum
  underflows to 0/0 on the small rows. Powers of two scale exactly.

A *row* is a vector along the last axis (the contiguous one, and the one KernelBench's
reductions and norms most often run along); a 0-d tensor is one row of one element.
Functions here take and return fp64 values; the caller keeps dtype, layout and non-finite
entries.
"""

from __future__ import annotations

import math

import torch

#: ``scaled_rows``: rows are scaled by ``2^k``, ``|k|`` at most this; 2^6 puts the largest
#: row's values ~2^12 above the smallest's, past exp's fp32 range (e^-88) for a shared max.
ROW_SCALE_OCTAVES = 6


def _rows(values: torch.Tensor) -> torch.Tensor:
    """``values`` (contiguous) as a (rows, row length) view."""
    return values.reshape(1, 1) if values.dim() == 0 else values.reshape(-1, values.shape[-1])


def spiked_rows(values: torch.Tensor, rms: float, sign: float | None, generator: torch.Generator) -> torch.Tensor:
    """``values`` with one element per row replaced by ``±sqrt(n) * rms``; ``sign`` fixes the
    spikes' sign (a tensor that must stay non-negative), ``None`` draws one per row."""
    out = values.to(torch.float64).clone().contiguous()
    rows = _rows(out)
    n_rows, n = rows.shape
    columns = torch.randint(0, n, (n_rows,), generator=generator)
    columns[0] = n - 1
    if n_rows > 1:
        columns[1] = 0
    if sign is None:
        signs = torch.randint(0, 2, (n_rows,), generator=generator, dtype=torch.float64) * 2 - 1
    else:
        signs = torch.full((n_rows,), sign, dtype=torch.float64)
    rows[torch.arange(n_rows), columns] = signs * math.sqrt(n) * rms
    return out


def scaled_rows(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``values`` with each row times ``2^k``, ``k`` drawn in ``[-ROW_SCALE_OCTAVES,
    ROW_SCALE_OCTAVES]``, the first row at the top of that range and the last at the bottom."""
    out = values.to(torch.float64).clone().contiguous()
    rows = _rows(out)
    n_rows = rows.shape[0]
    octaves = torch.randint(-ROW_SCALE_OCTAVES, ROW_SCALE_OCTAVES + 1, (n_rows,), generator=generator)
    octaves[0] = ROW_SCALE_OCTAVES
    if n_rows > 1:
        octaves[-1] = -ROW_SCALE_OCTAVES
    rows.mul_(torch.pow(2.0, octaves.to(torch.float64))[:, None])
    return out
