"""How kgen writes a quantity wherever it prints one: byte sizes and error figures.

One rule each, so `kgen eval`'s kernel table and a run's compile lines say the same "8 KB" for
the same shared memory (one said "8192 B", the other "8.0 KB"), and every printed error is
three significant digits (scientific where small) instead of a float's full repr.
"""

from __future__ import annotations

_UNITS = ("B", "KB", "MB", "GB")


def byte_size(count: int) -> str:
    """``count`` bytes in the largest unit (1 KB = 1024 B, as GPUs quote shared memory) that
    keeps it at least 1, with at most one decimal and none when whole: 64 B, 8 KB, 1.5 KB, 227 KB."""
    value, unit = float(count), _UNITS[0]
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    text = f"{value:.1f}".removesuffix(".0")
    return f"{text} {unit}"


def error_figure(value: float | None) -> str:
    """An error (relative L2, absolute) as printed: three significant digits, scientific where
    small or large (9.73e-08, 0.00202, 1.5); "-" when there is none."""
    return "-" if value is None else f"{value:.3g}"
