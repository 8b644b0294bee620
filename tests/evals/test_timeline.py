"""The timeline's arithmetic: nested names, the child's window as the parent sees it, the
remainder, per-phase totals and the GPU-busy fraction over overlapping and separate spans."""

from __future__ import annotations

import pytest

from kgen.evals.timeline import OTHER, Span, Timeline, busy_fraction, phase_totals, union_seconds


def _timeline(*spans: tuple[str, float, float, bool]) -> Timeline:
    return Timeline(spans=[Span(name=n, start=s, seconds=d, gpu=g) for n, s, d, g in spans])


def test_spans_opened_inside_others_are_named_after_them_and_recorded_when_the_block_raises():
    timeline = Timeline()
    with pytest.raises(ValueError), timeline.span("correctness"):
        with timeline.span("trial", gpu=True):
            timeline.add("save", 0.0, 0.5)
        raise ValueError("rejected")
    assert [s.name for s in timeline.spans] == ["correctness.trial.save", "correctness.trial", "correctness"]
    assert [s.gpu for s in timeline.spans] == [False, True, False]
    assert [s.name for s in timeline.top_level()] == ["correctness"]
    with timeline.span("timing"):  # nothing left open after the raise
        pass
    assert timeline.spans[-1].name == "timing"


def test_laps_follow_each_other_without_gaps():
    timeline = Timeline()
    start = 1000.0
    mark = timeline.lap("setup", start)
    end = timeline.lap("request", mark, gpu=False)
    first, second = timeline.spans
    assert first.start == start and first.end == pytest.approx(second.start)
    assert second.end == pytest.approx(end)


@pytest.mark.parametrize(("intervals", "expected"), [
    ([], 0.0),
    ([(1.0, 3.0)], 2.0),
    ([(1.0, 3.0), (2.0, 4.0)], 3.0),            # overlapping: counted once
    ([(1.0, 5.0), (2.0, 3.0)], 4.0),            # one inside another
    ([(1.0, 2.0), (3.0, 4.0)], 2.0),            # a gap between them
    ([(-5.0, 1.0), (9.0, 20.0)], 2.0),          # clipped to the wall [0, 10]
    ([(3.0, 4.0), (1.0, 2.0), (1.5, 3.5)], 3.0),  # any order
])
def test_union_seconds_counts_overlaps_once_and_clips_to_the_wall(intervals, expected):
    assert union_seconds(intervals, 0.0, 10.0) == pytest.approx(expected)


def test_busy_fraction_is_the_union_of_gpu_spans_over_the_wall():
    one = _timeline(("correctness", 0.0, 6.0, False), ("correctness.trial", 1.0, 2.0, True),
                    ("correctness.race_check", 2.5, 1.5, True))
    two = _timeline(("timing", 8.0, 2.0, False), ("timing.candidate", 8.0, 1.0, True))
    assert one.gpu_busy_fraction() == pytest.approx(3.0 / 6.0)  # [1, 4] of [0, 6]
    assert busy_fraction([one, two]) == pytest.approx(4.0 / 10.0)  # [1, 4] and [8, 9] of [0, 10]
    assert busy_fraction([one, two], wall=(0.0, 20.0)) == pytest.approx(4.0 / 20.0)
    assert busy_fraction([Timeline()]) is None
    assert busy_fraction([_timeline(("static", 1.0, 0.0, False))]) is None


def test_evaluations_verified_at_once_share_the_busy_seconds():
    parallel = [_timeline(("correctness.trial", 0.0, 4.0, True)), _timeline(("correctness.trial", 2.0, 4.0, True))]
    assert busy_fraction(parallel) == pytest.approx(1.0)
    assert phase_totals(parallel) == {"correctness.trial": 8.0}


def test_the_child_window_is_split_around_the_childs_own_spans():
    child = _timeline(("startup", 11.0, 0.5, False), ("open_context", 11.5, 1.5, False),
                      ("correctness.trial", 13.0, 2.0, True), ("correctness", 13.0, 3.0, False))
    parent = _timeline(("request", 9.0, 1.0, False))
    parent.add_child(child, launched=10.0, returned=18.0, start_name="cold_start", report_written=16.5)
    names = [(s.name, s.start, s.seconds) for s in parent.top_level()]
    assert names == [("request", 9.0, 1.0), ("cold_start", 10.0, 1.0), ("startup", 11.0, 0.5),
                     ("open_context", 11.5, 1.5), ("correctness", 13.0, 3.0), ("report", 16.0, 0.5),
                     ("exit", 16.5, 1.5)]
    assert parent.accounted_s() == pytest.approx(9.0)


def test_a_report_time_behind_the_last_span_counts_no_negative_seconds():
    child = _timeline(("correctness", 13.0, 3.0, False))
    parent = Timeline()
    parent.add_child(child, launched=10.0, returned=18.0, start_name="spare_handover", report_written=15.99)
    assert [(s.name, s.seconds) for s in parent.spans][-2:] == [("report", 0.0), ("exit", 2.0)]


def test_a_killed_child_leaves_its_last_stretch_unreported_and_a_silent_one_is_one_span():
    child = _timeline(("startup", 11.0, 1.0, False), ("correctness.trial", 12.0, 1.0, False))
    parent = Timeline()
    parent.add_child(child, launched=10.0, returned=30.0, start_name="cold_start", report_written=None)
    assert [(s.name, s.start, s.seconds) for s in parent.top_level()] == [
        ("cold_start", 10.0, 1.0), ("startup", 11.0, 1.0), ("unreported", 12.0, 18.0)]
    silent = Timeline()
    silent.add_child(Timeline(), launched=10.0, returned=12.0, start_name="cold_start", report_written=None)
    assert [(s.name, s.seconds) for s in silent.spans] == [("child", 2.0)]


def test_what_no_span_accounts_for_is_an_explicit_remainder():
    timeline = _timeline(("setup", 0.0, 1.0, False), ("correctness", 1.0, 2.0, False),
                         ("correctness.trial", 1.0, 2.0, True))
    timeline.add_other(3.5)
    assert timeline.spans[-1].name == OTHER and timeline.spans[-1].seconds == pytest.approx(0.5)
    assert timeline.accounted_s() == pytest.approx(3.0)
    assert timeline.totals() == {"setup": 1.0, "correctness": 2.0, "correctness.trial": 2.0, OTHER: 0.5}
    covered = _timeline(("setup", 0.0, 1.0, False))
    covered.add_other(1.0)
    assert [s.name for s in covered.spans] == ["setup"]
