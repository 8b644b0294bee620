"""What a problem's constant's name says it holds: an axis index, or a bound on values.

KernelBench files name the axis a reduction runs over ``dim``, ``reduce_dim`` or
``sum_dim`` and the bounds a clamp holds values to ``hardtanh_min`` or ``clamp_max``.
Such an integer is no size: a size set never moves it (``size_sets.py``), and a
varied constructor argument moves it the way an axis or a bound moves
(``init_arguments.py``). Read from the name alone, so both ask one place.
"""

from __future__ import annotations

#: Constants named like these and no larger than :data:`MAX_AXIS_INDEX` name an axis, not a size.
AXIS_NAMES = frozenset({"dim", "dims", "axis", "axes", "reduce_dim", "reduction_dim", "reduce_axis", "reduction_axis"})
#: ``<op>_dim`` / ``<op>_dims`` names an axis when ``op`` is one of these (``sum_dim = 1``);
#: ``hidden_dim`` / ``head_dim`` name sizes, so a bare ``_dim`` suffix is not enough.
AXIS_OPS = frozenset({
    "reduce", "reduction", "sum", "mean", "max", "min", "prod", "softmax", "log_softmax", "logsumexp",
    "argmax", "argmin", "cumsum", "cumprod", "scan", "norm", "var", "std", "median", "sort", "topk",
    "concat", "cat", "stack", "split", "chunk", "flip", "gather", "scatter", "index", "any", "all", "transpose",
})
MAX_AXIS_INDEX = 4


def is_axis_name(name: str) -> bool:
    """``dim``, ``reduce_dim``, ``sum_dim``, ``dims``, ``softmax_axis``: a name for an axis index."""
    lowered = name.lower()
    if lowered in AXIS_NAMES or lowered.endswith(("_axis", "_axes")):
        return True
    op, _, suffix = lowered.rpartition("_")
    return suffix in ("dim", "dims") and op in AXIS_OPS


def is_value_bound(name: str) -> bool:
    """``hardtanh_max = 1``, ``clamp_min``: a bound a reference clamps values to, not a size."""
    lowered = name.lower()
    return lowered.endswith(("_min", "_max")) or lowered in ("min_value", "max_value", "min_val", "max_val")
