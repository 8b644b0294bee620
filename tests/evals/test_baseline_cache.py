"""Baselines measured once per run: reused while fresh, re-measured when old or much used,
drift reported, a broken entry never trusted, concurrent writers never leave a torn file."""

from __future__ import annotations

import subprocess
import sys

from kgen.evals.baseline_cache import MAX_AGE_S, MAX_USES, cache_key, cached


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _measure(values):
    calls = []

    def measure():
        calls.append(1)
        return values[min(len(calls) - 1, len(values) - 1)]

    return measure, calls


def test_a_fresh_entry_is_reused_and_counted(tmp_path):
    clock = Clock()
    measure, calls = _measure([{"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1}])
    first = cached(tmp_path, "k", measure, clock)
    clock.t += 60
    second = cached(tmp_path, "k", measure, clock)
    assert (first.reused, second.reused, len(calls)) == (False, True, 1)
    assert second.value == first.value and second.age_s == 60


def test_every_part_of_the_key_matters():
    base = {"problem": "abc", "sizes": {"n": 4}, "device": "NVIDIA H100", "torch": "2.11", "baseline": "eager"}
    keys = {cache_key(**base)}
    for part, other in [("problem", "abd"), ("sizes", {"n": 5}), ("device", "NVIDIA H200"), ("torch", "2.12"),
                        ("baseline", "torch.compile")]:
        keys.add(cache_key(**{**base, part: other}))
    assert len(keys) == 6


def test_old_or_much_used_entries_are_measured_again(tmp_path):
    clock = Clock()
    measure, calls = _measure([{"median_ms": 1.0}])
    cached(tmp_path, "old", measure, clock)
    clock.t += MAX_AGE_S + 1
    assert cached(tmp_path, "old", measure, clock).reused is False and len(calls) == 2
    measure, calls = _measure([{"median_ms": 1.0}])
    outcomes = [cached(tmp_path, "used", measure, clock).reused for _ in range(MAX_USES + 1)]
    assert outcomes.count(False) == 2 and len(calls) == 2


def test_a_re_measure_outside_the_old_interval_is_drift(tmp_path):
    clock = Clock()
    measure, _ = _measure([{"p10_ms": 0.9, "p90_ms": 1.1}, {"p10_ms": 1.3, "p90_ms": 1.5}])
    cached(tmp_path, "k", measure, clock)
    clock.t += MAX_AGE_S + 1
    outcome = cached(tmp_path, "k", measure, clock)
    assert outcome.drift is not None and "1.3000-1.5000" in outcome.drift
    overlapping, _ = _measure([{"p10_ms": 0.9, "p90_ms": 1.1}, {"p10_ms": 1.0, "p90_ms": 1.2}])
    cached(tmp_path, "k2", overlapping, clock)
    clock.t += MAX_AGE_S + 1
    assert cached(tmp_path, "k2", overlapping, clock).drift is None


def test_a_broken_entry_is_measured_again(tmp_path):
    (tmp_path / "k.json").write_text("{not json")
    measure, calls = _measure([{"median_ms": 2.0}])
    outcome = cached(tmp_path, "k", measure)
    assert outcome.reused is False and len(calls) == 1 and outcome.value == {"median_ms": 2.0}


def test_without_a_folder_every_call_measures(tmp_path):
    measure, calls = _measure([{"median_ms": 2.0}])
    cached(None, "k", measure)
    cached(None, "k", measure)
    assert len(calls) == 2


def test_concurrent_writers_leave_a_readable_entry(tmp_path):
    script = (
        "import sys\nfrom kgen.evals.baseline_cache import cached\n"
        "for i in range(200):\n"
        "    cached(sys.argv[1], 'shared', lambda: {'median_ms': float(i), 'pad': 'x' * 4000}, now=lambda: float(i) * 1e4)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)]) for _ in range(3)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    outcome = cached(tmp_path, "shared", lambda: {"median_ms": -1.0}, now=lambda: 199 * 1e4 + 1)
    assert outcome.reused is True and len(outcome.value["pad"]) == 4000
    assert not list(tmp_path.glob(".tmp-*"))
