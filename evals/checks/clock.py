"""A trial with the process clock moved: behaviour that depends on *when* a kernel runs.

A kernel can be honest for the first minutes after import (while a verifier
watches) and switch to an approximation afterwards. The static rules forbid
clocks, dates and process inspection in a candidate's source; this is the
dynamic backstop for a clock reached some other way. Inside
:func:`shifted_clock`, every reader of the time module (wall clock, monotonic,
performance counter, process and thread time, their ``_ns`` forms) and
``datetime``'s ``now``/``utcnow``/``today`` report a time moved forward by
``seconds``. Differences between two readings are unchanged, so libraries that
measure durations (Triton's compiler, the autotuner) behave as before.
"""

from __future__ import annotations

import datetime as _datetime
import time as _time
from collections.abc import Iterator
from contextlib import contextmanager

#: The shift the verifier uses: a day and a bit, so "minutes after import" and "a new day" both hold.
CLOCK_SHIFT_S = 90_061.0

_FLOAT_CLOCKS = ("time", "monotonic", "perf_counter", "process_time", "thread_time")


@contextmanager
def shifted_clock(seconds: float = CLOCK_SHIFT_S) -> Iterator[None]:
    originals: dict[str, object] = {}
    for name in _FLOAT_CLOCKS:
        fn = getattr(_time, name, None)
        if fn is not None:
            originals[name] = fn
            setattr(_time, name, (lambda f: lambda: f() + seconds)(fn))
        fn_ns = getattr(_time, f"{name}_ns", None)
        if fn_ns is not None:
            originals[f"{name}_ns"] = fn_ns
            setattr(_time, f"{name}_ns", (lambda f: lambda: f() + int(seconds * 1e9))(fn_ns))
    real_datetime, real_date = _datetime.datetime, _datetime.date
    delta = _datetime.timedelta(seconds=seconds)

    class _ShiftedDatetime(real_datetime):
        @classmethod
        def now(cls, tz=None):
            return real_datetime.now(tz) + delta

        @classmethod
        def utcnow(cls):
            return real_datetime.now(_datetime.timezone.utc).replace(tzinfo=None) + delta

        @classmethod
        def today(cls):
            return real_datetime.today() + delta

    class _ShiftedDate(real_date):
        @classmethod
        def today(cls):
            return (real_datetime.today() + delta).date()

    _datetime.datetime, _datetime.date = _ShiftedDatetime, _ShiftedDate
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(_time, name, fn)
        _datetime.datetime, _datetime.date = real_datetime, real_date
