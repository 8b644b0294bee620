"""A run's directory: where a run lands, how `kgen resume` finds it, and files never half-written."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from kgen.agent.run_directory import RUN_FILE, RunDirectory, RunNotFoundError, write_atomic

RUN_ID = re.compile(r"^(\d{8}-\d{6})-[0-9a-f]{6}$")


def make_run(runs: Path, name: str) -> Path:
    path = runs / name
    path.mkdir(parents=True)
    (path / RUN_FILE).write_text('{"options": {"request": "x"}}')
    return path


def test_create_makes_an_empty_directory_named_by_its_utc_start_time(tmp_path):
    runs = tmp_path / "runs"
    before = datetime.now(timezone.utc).replace(microsecond=0)
    first = RunDirectory.create(runs)
    second = RunDirectory.create(runs)
    after = datetime.now(timezone.utc)
    for run in (first, second):
        assert run.path.parent == runs.resolve() and run.path.is_dir()
        assert list(run.path.iterdir()) == []
        match = RUN_ID.match(run.run_id)
        assert match, run.run_id
        started = datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
        assert before <= started <= after + timedelta(seconds=1)
    assert first.run_id != second.run_id


def test_out_may_be_new_or_empty(tmp_path):
    new = RunDirectory.create(tmp_path / "runs", tmp_path / "mine" / "run1")
    assert new.path == (tmp_path / "mine" / "run1").resolve() and new.path.is_dir()
    (tmp_path / "empty").mkdir()
    assert RunDirectory.create(tmp_path / "runs", tmp_path / "empty").path == (tmp_path / "empty").resolve()
    assert not (tmp_path / "runs").exists()  # --out puts nothing under the runs folder


def test_out_that_holds_files_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "previous"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    with pytest.raises(FileExistsError, match="not empty") as caught:
        RunDirectory.create(tmp_path / "runs", out)
    assert str(out) in str(caught.value)
    assert [p.name for p in out.iterdir()] == ["summary.json"]


def test_find_by_full_id_unique_prefix_or_path(tmp_path):
    runs = tmp_path / "runs"
    a = make_run(runs, "20261122-075000-3fa9c1")
    b = make_run(runs, "20261123-081500-0b1c2d")
    assert RunDirectory.find("20261122-075000-3fa9c1", runs).path == a.resolve()
    assert RunDirectory.find("20261123", runs).path == b.resolve()
    assert RunDirectory.find(str(b), runs).path == b.resolve()
    elsewhere = make_run(tmp_path / "kept" / "here", "my-run")
    assert RunDirectory.find(str(elsewhere), runs).path == elsewhere.resolve()


def test_an_ambiguous_prefix_names_the_candidates(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, "20261122-075000-3fa9c1")
    make_run(runs, "20261122-081500-0b1c2d")
    with pytest.raises(RunNotFoundError, match="ambiguous") as caught:
        RunDirectory.find("20261122", runs)
    assert "20261122-075000-3fa9c1" in str(caught.value) and "20261122-081500-0b1c2d" in str(caught.value)


def test_an_unknown_id_points_at_kgen_runs(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, "20261122-075000-3fa9c1")
    (runs / "20261124-000000-abcdef").mkdir()  # a folder without run.json is no run
    for ref in ("nope", "20261124"):
        with pytest.raises(RunNotFoundError, match="kgen runs") as caught:
            RunDirectory.find(ref, runs)
        assert repr(ref) in str(caught.value)


def test_a_path_that_is_no_run_is_not_found(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, "20261122-075000-3fa9c1")
    (tmp_path / "notes").mkdir()
    with pytest.raises(RunNotFoundError):
        RunDirectory.find(str(tmp_path / "notes"), runs)


@pytest.mark.parametrize("ref", ["", "*"])
def test_an_empty_or_wildcard_reference_does_not_pick_a_run(tmp_path, ref):
    runs = tmp_path / "runs"
    make_run(runs, "20261122-075000-3fa9c1")
    with pytest.raises(RunNotFoundError):
        RunDirectory.find(ref, runs)


def test_list_runs_lists_only_run_directories_in_order(tmp_path):
    runs = tmp_path / "runs"
    assert RunDirectory.list_runs(runs) == []
    later = make_run(runs, "20261123-081500-0b1c2d")
    earlier = make_run(runs, "20261122-075000-3fa9c1")
    (runs / "20261124-000000-abcdef").mkdir()
    (runs / "stray.txt").write_text("not a run")
    assert RunDirectory.list_runs(runs) == [earlier, later]


def test_write_atomic_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "deep" / "summary.json"
    write_atomic(path, '{"first": 1}')
    write_atomic(path, '{"second": 2}')
    assert path.read_text() == '{"second": 2}'
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]


def test_a_failed_write_keeps_the_previous_version(tmp_path):
    path = tmp_path / "summary.json"
    write_atomic(path, "previous")
    with pytest.raises(TypeError):
        write_atomic(path, 12345)  # type: ignore[arg-type]
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_run_files_and_events_log(tmp_path):
    run = RunDirectory.create(tmp_path / "runs")
    written = run.write("spec.json", "{}")
    assert written == run.path / "spec.json" and written.read_text() == "{}"
    assert run.candidate_source("g0-c01") == run.path / "candidates" / "g0-c01" / "g0-c01.py"
    assert run.candidate_eval("g0-c01") == run.path / "candidates" / "g0-c01" / "eval.json"
    # the best kernel's file is an importable module name, whatever the target is called
    assert run.best_module("h100-pcie").name == "best_h100_pcie.py"
    assert run.best_module("h100-pcie").stem.isidentifier()
    run.log("first")
    run.log("second")
    lines = (run.path / "events.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["first", "second"]
    assert all(re.match(r"^\d\d:\d\d:\d\d ", line) for line in lines)
