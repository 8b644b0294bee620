"""Baselines kept across runs: measured once and kept, reused after an eager re-check within
the stored interval, measured again (and said so) when the re-check drifts, a broken entry
never trusted."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kgen.evals.baselines.kept_figures import (
    DRIFT_TOLERANCE,
    StoredBaselines,
    default_store_dir,
    drift_interval,
    eager_drift,
    entry_path,
    figures_from_store,
    read_entry,
)
from kgen.evals.baselines.messages import BASELINES
from kgen.evals.timing.bench_result import Measurement

PARTS = {"problem": "abc", "sizes": {"n": 4}, "device": "NVIDIA H100 80GB HBM3", "torch": "2.5"}
KEY = "k" * 32


def _timing(ms: float, spread: float = 0.02) -> Measurement:
    return Measurement(median_ms=ms, p10_ms=ms * (1 - spread), p90_ms=ms * (1 + spread), trials=100)


class FakeTimings:
    """Stands for the GPU: eager at ``eager_ms`` when measured, ``recheck_ms`` when re-checked."""

    def __init__(self, eager_ms: float = 1.0, recheck_ms: float | None = None, compile_ms: float = 0.5,
                 recheck_error: Exception | None = None) -> None:
        self.eager_ms, self.recheck_ms, self.compile_ms = eager_ms, recheck_ms, compile_ms
        self.recheck_error = recheck_error
        self.calls: list[object] = []

    def recheck_eager(self) -> Measurement:
        self.calls.append("recheck")
        if self.recheck_error is not None:
            raise self.recheck_error
        return _timing(self.eager_ms if self.recheck_ms is None else self.recheck_ms)

    def measure(self, names: Sequence[str]) -> tuple[dict[str, Measurement], dict[str, str]]:
        self.calls.append(("measure", tuple(names)))
        measured = {"eager": _timing(self.eager_ms), "torch.compile": _timing(self.compile_ms)}
        return ({n: m for n, m in measured.items() if n in names},
                {"liger": "not measured: liger-kernel is not installed"} if "liger" in names else {})


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_first_run_measures_every_baseline_and_keeps_them(tmp_path):
    timings = FakeTimings()
    figures = figures_from_store(tmp_path, KEY, PARTS, timings, now=Clock())
    assert figures.origin == "measured" and timings.calls == [("measure", BASELINES)]
    assert figures.measurements["eager"].median_ms == 1.0 and not figures.measurements["eager"].reused
    assert figures.errors == {"liger": "not measured: liger-kernel is not installed"}
    entry, note = read_entry(tmp_path, KEY)
    assert note is None and entry.parts == PARTS and entry.measured_at == 1000.0
    assert set(entry.measurements) == {"eager", "torch.compile"} and "liger" in entry.errors


def test_a_later_run_re_checks_eager_only_and_reuses_with_the_age(tmp_path):
    figures_from_store(tmp_path, KEY, PARTS, FakeTimings(), now=Clock(1000.0))
    timings = FakeTimings(recheck_ms=1.05)  # inside 0.98-1.02 widened by 10%
    figures = figures_from_store(tmp_path, KEY, PARTS, timings, now=Clock(4600.0))
    assert timings.calls == ["recheck"]  # nothing compiled, nothing else timed
    assert figures.origin == "reused" and "median 1.0500 ms" in figures.recheck
    compiled = figures.measurements["torch.compile"]
    assert compiled.reused and compiled.age_s == 3600.0 and compiled.median_ms == 0.5
    assert figures.measurements["eager"].median_ms == 1.0  # the stored figure, measured with the others
    assert figures.errors == {"liger": "not measured: liger-kernel is not installed"}


def test_a_drifted_re_check_measures_everything_again_and_says_so(tmp_path):
    figures_from_store(tmp_path, KEY, PARTS, FakeTimings(), now=Clock(1000.0))
    timings = FakeTimings(eager_ms=1.4, recheck_ms=1.4, compile_ms=0.7)
    figures = figures_from_store(tmp_path, KEY, PARTS, timings, now=Clock(2000.0))
    assert timings.calls == ["recheck", ("measure", BASELINES)]
    assert figures.origin == "remeasured_after_drift"
    assert figures.errors["baselines drift"].startswith("drift: eager re-checked at 1.4000 ms, outside")
    assert "every baseline measured again" in figures.errors["baselines drift"]
    assert figures.measurements["torch.compile"].median_ms == 0.7 and not figures.measurements["torch.compile"].reused
    entry, _ = read_entry(tmp_path, KEY)
    assert entry.measured_at == 2000.0 and entry.measurements["eager"].median_ms == 1.4  # kept in place of the old


def test_a_re_check_that_fails_trusts_nothing_stored(tmp_path):
    figures_from_store(tmp_path, KEY, PARTS, FakeTimings(), now=Clock())
    timings = FakeTimings(recheck_error=RuntimeError("CUDA error: unspecified launch failure"))
    figures = figures_from_store(tmp_path, KEY, PARTS, timings, now=Clock())
    assert figures.origin == "remeasured_after_drift" and "measured nothing usable" in figures.errors["baselines drift"]
    assert "RuntimeError" in figures.errors["baselines drift"]


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"key": "x"}', b"\x00\xff"])
def test_a_corrupt_entry_is_ignored_measured_again_and_replaced(tmp_path, content):
    entry_path(tmp_path, KEY).write_bytes(content)
    timings = FakeTimings()
    figures = figures_from_store(tmp_path, KEY, PARTS, timings, now=Clock())
    assert figures.origin == "measured" and timings.calls == [("measure", BASELINES)]
    assert "corrupt baseline store entry" in figures.errors["baselines store"]
    assert read_entry(tmp_path, KEY)[0] is not None  # replaced by a readable one


def test_an_entry_under_another_key_or_without_eager_is_not_trusted(tmp_path):
    other = StoredBaselines(key="other", measured_at=1.0, measurements={"eager": _timing(1.0)})
    entry_path(tmp_path, KEY).write_text(other.model_dump_json())
    assert read_entry(tmp_path, KEY)[0] is None and "holds key other" in read_entry(tmp_path, KEY)[1]
    no_eager = StoredBaselines(key=KEY, measured_at=1.0, measurements={"torch.compile": _timing(1.0)})
    entry_path(tmp_path, KEY).write_text(no_eager.model_dump_json())
    entry, note = read_entry(tmp_path, KEY)
    assert entry is None and "no eager figure" in note


def test_figures_without_eager_are_not_kept(tmp_path):
    class NoEager(FakeTimings):
        def measure(self, names):
            return {"torch.compile": _timing(0.5)}, {"eager": "RuntimeError: boom"}

    figures = figures_from_store(tmp_path, KEY, PARTS, NoEager(), now=Clock())
    assert figures.origin == "measured" and figures.errors["eager"] == "RuntimeError: boom"
    assert not list(tmp_path.iterdir())  # nothing a later run could re-check


def test_without_a_store_every_call_measures_and_keeps_nothing(tmp_path):
    timings = FakeTimings()
    figures_from_store(None, KEY, PARTS, timings, now=Clock())
    figures_from_store(None, KEY, PARTS, timings, now=Clock())
    assert timings.calls == [("measure", BASELINES)] * 2


def test_a_store_that_cannot_be_written_costs_reuse_not_the_figures(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    figures = figures_from_store(blocker, KEY, PARTS, FakeTimings(), now=Clock())
    assert figures.measurements["eager"].median_ms == 1.0 and "not written" in figures.errors["baselines store"]
    assert blocker.read_text() == "not a folder"


def test_drift_is_the_median_outside_the_stored_interval_widened_by_the_tolerance():
    stored = Measurement(median_ms=1.0, p10_ms=0.9, p90_ms=1.2)
    low, high = drift_interval(stored)
    assert (low, high) == pytest.approx((0.9 * (1 - DRIFT_TOLERANCE), 1.2 * (1 + DRIFT_TOLERANCE)))
    assert eager_drift(stored, Measurement(median_ms=low)) is None
    assert eager_drift(stored, Measurement(median_ms=high)) is None
    assert eager_drift(stored, Measurement(median_ms=low * 0.99)) is not None  # faster counts too
    assert eager_drift(stored, Measurement(median_ms=high * 1.01)) is not None
    # no stored interval: the median alone, widened
    assert eager_drift(Measurement(median_ms=1.0), Measurement(median_ms=1.09)) is None
    assert eager_drift(Measurement(median_ms=1.0), Measurement(median_ms=1.11)) is not None
    assert "nothing usable" in eager_drift(stored, Measurement(error="boom"))


def test_the_store_lives_in_kgen_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path))
    assert default_store_dir() == tmp_path / "cache" / "baselines"
