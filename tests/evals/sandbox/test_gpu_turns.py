"""Turns alone on the GPU: while one child holds the turn every other sandbox child is stopped,
turns never overlap, and seconds stopped or waiting are not counted against a child's limit.

The children are stand-ins (``tests/support/turn_child.py``) started through the real box,
so the stop and continue signals, the files of the protocol and the time limits are the ones
a batch of verifiers meets on a GPU."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from kgen.evals.sandbox import gpu_turns
from kgen.evals.sandbox.box import SandboxLimits, SandboxOutcome, run_python_module
from kgen.evals.sandbox.lifecycle import live_groups

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and SIGSTOP")


def _run(tmp_path: Path, name: str, seconds: float, turn: bool, timeout_s: float = 30.0) -> SandboxOutcome:
    workdir = tmp_path / name
    box = workdir / "box"
    box.mkdir(parents=True)
    log = tmp_path / f"{name}.log"
    return run_python_module(
        "tests.support.turn_child", [str(log), str(seconds), *(["turn"] if turn else [])],
        SandboxLimits(timeout_s=timeout_s, isolate_network=False),
        extra_env={"PYTHONPATH": str(ROOT), "KGEN_TEST_TURN_DIR": str(workdir)},
        workdir=box, turn_dir=workdir if turn else None,
    )


def _in_threads(*calls) -> list[SandboxOutcome]:
    outcomes: list[SandboxOutcome | None] = [None] * len(calls)
    before = set(live_groups())  # a spare another test left in this worker process is not ours

    def run(i, call):
        outcomes[i] = call()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert set(live_groups()) <= before, "a child was left running"
    return outcomes


def _lines(path: Path, kind: str) -> list[list[float]]:
    return [[float(x) for x in line.split()[1:]] for line in path.read_text().splitlines() if line.startswith(kind)]


def test_a_turn_stops_the_other_children_and_they_go_on_after(tmp_path):
    worker, timed = _in_threads(
        lambda: _run(tmp_path, "worker", 2.0, turn=False),
        lambda: _run(tmp_path, "timed", 0.6, turn=True),
    )
    assert worker.returncode == 0 and timed.returncode == 0, (worker.stderr_tail, timed.stderr_tail)
    (start, end), = _lines(tmp_path / "timed.log", "turn")
    ticks = [t for (t,) in _lines(tmp_path / "worker.log", "tick")]
    inside = [t for t in ticks if start + 0.05 < t < end - 0.05]
    assert not inside, f"the worker ticked {len(inside)} time(s) during another child's turn"
    assert any(t > end for t in ticks), "the worker went on after the turn"
    assert worker.paused_s >= 0.5, worker.paused_s


def test_turns_never_overlap_and_are_all_granted(tmp_path):
    taken = gpu_turns.turns_taken()
    outcomes = _in_threads(*[lambda i=i: _run(tmp_path, f"t{i}", 0.3, turn=True) for i in range(3)])
    assert all(o.returncode == 0 for o in outcomes), [o.stderr_tail for o in outcomes]
    turns = sorted(span for i in range(3) for span in _lines(tmp_path / f"t{i}.log", "turn"))
    assert len(turns) == 3 and gpu_turns.turns_taken() - taken == 3
    for (_, end), (start, _) in zip(turns, turns[1:], strict=False):
        assert start >= end - 0.01, f"turns overlap: {turns}"


def test_seconds_stopped_for_another_turn_do_not_count_against_the_limit(tmp_path):
    # about 1.2 s of the worker's own work under a 1.9 s limit, stopped 1.0 s for the other's turn
    worker, timed = _in_threads(
        lambda: _run(tmp_path, "worker", 1.2, turn=False, timeout_s=1.9),
        lambda: _run(tmp_path, "timed", 1.0, turn=True),
    )
    assert not worker.timed_out and worker.returncode == 0, worker
    assert worker.seconds > 1.9 and worker.paused_s >= 0.9


def test_a_child_that_holds_its_turn_too_long_is_ended_and_the_others_go_on(tmp_path):
    hog, worker = _in_threads(
        lambda: _run(tmp_path, "hog", 30.0, turn=True, timeout_s=1.5),
        lambda: _run(tmp_path, "worker", 1.0, turn=False),
    )
    assert hog.timed_out
    assert worker.returncode == 0 and not worker.timed_out
    assert gpu_turns._turn.acquire(timeout=1.0), "the turn was given back"
    gpu_turns._turn.release()
