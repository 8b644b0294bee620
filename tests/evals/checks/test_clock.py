"""The shifted clock moves every absolute reading and leaves durations alone."""

import datetime
import time

from kgen.evals.checks.clock import shifted_clock


def test_absolute_readings_move_and_durations_do_not():
    wall, mono, perf = time.time(), time.monotonic(), time.perf_counter()
    today = datetime.datetime.now()
    with shifted_clock(86_400.0):
        assert time.time() - wall > 86_000 and time.monotonic() - mono > 86_000
        assert time.perf_counter() - perf > 86_000 and time.time_ns() > (wall + 86_000) * 1e9
        assert datetime.datetime.now() - today > datetime.timedelta(hours=23)
        assert datetime.date.today() > today.date()
        start = time.perf_counter()
        assert 0 <= time.perf_counter() - start < 5
    assert time.time() - wall < 3600 and datetime.datetime.now() - today < datetime.timedelta(hours=1)
