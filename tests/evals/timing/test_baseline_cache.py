"""Baselines measured once per run: reused while fresh, re-measured when old or much used,
drift reported, a broken entry never trusted, concurrent writers never leave a torn file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kgen.evals.timing.baseline_cache import (
    MAX_AGE_S,
    MAX_USES,
    CacheWriteWarning,
    CorruptEntryWarning,
    cache_key,
    cached,
)


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
    base = {"problem": "abc", "sizes": {"n": 4}, "policies": "ieee, library", "device": "NVIDIA H100",
            "torch": "2.11", "triton": "3.5", "baseline": "eager"}
    keys = {cache_key(**base)}
    for part, other in [("problem", "abd"), ("sizes", {"n": 5}), ("policies", "tf32, library"),
                        ("device", "NVIDIA H200"), ("torch", "2.12"), ("triton", "3.6"),
                        ("baseline", "torch.compile")]:
        keys.add(cache_key(**{**base, part: other}))
    assert len(keys) == 8
    assert cache_key(**base) == cache_key(**dict(reversed(base.items())))  # order does not matter


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


@pytest.mark.parametrize("content", [b"{not json", b'{"key": "k", "uses": 1}', b"\xff\xfe\x00", b""],
                         ids=["not_json", "missing_fields", "not_text", "empty"])
def test_a_broken_entry_is_measured_again_with_a_warning(tmp_path, content):
    (tmp_path / "k.json").write_bytes(content)
    measure, calls = _measure([{"median_ms": 2.0}])
    with pytest.warns(CorruptEntryWarning, match="corrupt baseline cache entry k.json"):
        outcome = cached(tmp_path, "k", measure)
    assert outcome.reused is False and len(calls) == 1 and outcome.value == {"median_ms": 2.0}
    assert outcome.note is not None and outcome.drift is None
    assert cached(tmp_path, "k", measure).reused is True  # overwritten with the fresh measurement


def test_a_missing_entry_is_a_first_measurement_not_a_warning(tmp_path, recwarn):
    outcome = cached(tmp_path / "not-yet", "k", lambda: {"median_ms": 1.0})
    assert outcome.note is None and not recwarn.list and (tmp_path / "not-yet" / "k.json").exists()


def test_an_entry_stored_under_another_key_is_not_reused(tmp_path):
    cached(tmp_path, "k", lambda: {"median_ms": 1.0})
    (tmp_path / "other.json").write_text((tmp_path / "k.json").read_text())
    assert cached(tmp_path, "other", lambda: {"median_ms": 2.0}).value == {"median_ms": 2.0}


def test_without_a_folder_every_call_measures(tmp_path):
    measure, calls = _measure([{"median_ms": 2.0}])
    cached(None, "k", measure)
    cached(None, "k", measure)
    assert len(calls) == 2


def test_concurrent_writers_leave_a_readable_entry(tmp_path):
    script = (
        "import sys\nfrom kgen.evals.timing.baseline_cache import cached\n"
        "for i in range(200):\n"
        "    cached(sys.argv[1], 'shared', lambda: {'median_ms': float(i), 'pad': 'x' * 4000}, now=lambda: float(i) * 1e4)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)]) for _ in range(3)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    outcome = cached(tmp_path, "shared", lambda: {"median_ms": -1.0}, now=lambda: 199 * 1e4 + 1)
    assert outcome.reused is True and len(outcome.value["pad"]) == 4000
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize("where", ["folder_is_a_file", "parent_is_a_file"])
def test_a_cache_that_cannot_be_written_costs_reuse_not_the_figure(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    folder = blocker if where == "folder_is_a_file" else blocker / "baselines"
    measure, calls = _measure([{"median_ms": 1.5, "p10_ms": 1.4, "p90_ms": 1.6}])
    with pytest.warns(CacheWriteWarning):
        outcome = cached(folder, "k", measure)
    assert outcome.value["median_ms"] == 1.5 and not outcome.reused and "not written" in outcome.note
    with pytest.warns(CacheWriteWarning):
        again = cached(folder, "k", measure)
    assert not again.reused and len(calls) == 2  # nothing stored: measured again
    assert blocker.read_text() == "not a folder"


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    import os

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.warns(CacheWriteWarning, match="No space left"):
        outcome = cached(tmp_path, "k", lambda: {"median_ms": 1.0})
    assert outcome.value == {"median_ms": 1.0}
    assert not list(tmp_path.iterdir())


def test_baselines_are_not_kept_while_the_gpu_is_shared(tmp_path):
    from kgen.evals.timing.gpu_sharing import GpuNeighbours, GpuProcess
    from kgen.evals.verifier.timing_stage import reusable_cache_dir

    alone = GpuNeighbours(available=True)
    unknown = GpuNeighbours(available=False, reason="no NVML")
    shared = GpuNeighbours(available=True, others=[GpuProcess(pid=4242, used_bytes=2 * 10**9)])
    assert reusable_cache_dir(str(tmp_path), alone) == str(tmp_path)
    assert reusable_cache_dir(str(tmp_path), unknown) == str(tmp_path)
    assert reusable_cache_dir(str(tmp_path), shared) is None
    assert reusable_cache_dir(None, alone) is None
    measure, calls = _measure([{"median_ms": 3.0}])
    cached(reusable_cache_dir(str(tmp_path), shared), "k", measure)
    assert not list(tmp_path.iterdir()) and len(calls) == 1  # timed beside the neighbour, not kept
