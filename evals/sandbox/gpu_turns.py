"""Turns on the GPU: verifiers share it, and one at a time has it alone to be timed.

Correctness trials measure nothing that depends on being alone on the GPU, so several
verifiers run them at once. A timing does depend on it: another process's kernels, or its
host threads competing for the cores that launch the timed kernels, would slow what is
measured. Before this module the batch verified every candidate in parallel, then started a
second, fresh verifier per candidate to time it with nothing else running: each candidate
paid for a second process, its loading, its memory plan and its compile-cache reads.

Now a verifier that has verified its candidate asks for a turn instead and waits in place,
holding its loaded candidate and compiled kernels:

* **child side** (:func:`await_turn`): after synchronizing its own GPU work it writes
  :data:`WANT_FILE` into its turn folder (the verifier's work folder, outside the box) and
  waits until :data:`GRANTED_FILE` appears; when it has finished timing it writes
  :data:`DONE_FILE` (:func:`end_turn`), which hands the turn on before its report is written;
* **parent side** (:func:`watch_turn`, called by ``box.run_python_module`` while it waits on
  the child): on seeing the wish it takes the one turn of this kgen process (waiting for the
  holder before it), **stops every other live sandbox process group with SIGSTOP** (the
  registry of ``lifecycle.py``: verifiers mid-trial, spares still starting up, a baseline
  job compiling), lets their last queued kernels drain (:data:`SETTLE_S`), grants the turn,
  and on the done file or the child's end continues (SIGCONT) what it stopped.

The stop is done by the kernel, not asked of the other verifiers: a candidate's thread that
kept launching kernels while another candidate is timed is stopped with the rest of its
process. Seconds a child spends stopped, or waiting for its own turn, are not its seconds:
the parent's time limit does not count them (:func:`paused_seconds`, :func:`waited_seconds`).

A candidate could write the wish itself. That gains it nothing: a turn only stops the
others, and its own time limit runs while it holds the turn.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kgen.evals.sandbox.lifecycle import live_groups

#: Written by a verifier that wants the GPU alone (its content: the pid, for diagnostics).
WANT_FILE = "turn-wanted"
#: Written by kgen when the turn is the verifier's.
GRANTED_FILE = "turn-granted"
#: Written by the verifier when it no longer needs the GPU alone.
DONE_FILE = "turn-done"
#: How often the waiting verifier looks for its grant.
CHILD_POLL_S = 0.002
#: After stopping the others: the kernels they had queued before the stop run to their end.
#: Verification trials synchronize after each call (their outputs are compared), so what can
#: be left queued is one trial's launches at the screening sizes: well under this.
SETTLE_S = 0.02


# ----------------------------------------------------------------------------------------
# Child side
# ----------------------------------------------------------------------------------------


def await_turn(turn_dir: str | None) -> float:
    """Wait for the GPU alone; seconds waited. No turn folder: this verifier runs by itself
    (a single evaluation), and has the GPU as it is. The caller synchronizes its own work
    first, so nothing of its verification is still running when the turn starts."""
    if not turn_dir:
        return 0.0
    folder = Path(turn_dir)
    started = time.monotonic()
    while (folder / DONE_FILE).exists():  # the turn before is still being given back
        time.sleep(CHILD_POLL_S)
    (folder / WANT_FILE).write_text(str(os.getpid()))
    granted = folder / GRANTED_FILE
    while not granted.exists():
        time.sleep(CHILD_POLL_S)
    return time.monotonic() - started


def end_turn(turn_dir: str | None) -> None:
    """Give the GPU back to the others (before writing the report: nothing left to time);
    nothing to do when no turn was granted."""
    if turn_dir and (Path(turn_dir) / GRANTED_FILE).exists():
        try:
            (Path(turn_dir) / DONE_FILE).write_text("")
        except OSError:
            pass  # the child's end gives the turn back as well


# ----------------------------------------------------------------------------------------
# Parent side
# ----------------------------------------------------------------------------------------


@dataclass
class _Ledger:
    """Seconds per child group: stopped for another's turn, and waiting for its own."""

    paused: dict[int, float] = field(default_factory=dict)
    paused_since: dict[int, float] = field(default_factory=dict)
    waited: dict[int, float] = field(default_factory=dict)
    #: groups waiting for a turn now: stopped meanwhile, they lose nothing (the wait is not counted)
    waiting: set[int] = field(default_factory=set)


_turn = threading.Lock()  # the one turn of this kgen process
_ledger_lock = threading.Lock()
_ledger = _Ledger()
_turns_taken = 0


def paused_seconds(pgid: int) -> float:
    """How long this child has been stopped for other verifiers' turns (including now)."""
    with _ledger_lock:
        since = _ledger.paused_since.get(pgid)
        return _ledger.paused.get(pgid, 0.0) + (time.monotonic() - since if since is not None else 0.0)


def waited_seconds(pgid: int) -> float:
    """How long this child has waited for turns of its own (finished waits)."""
    with _ledger_lock:
        return _ledger.waited.get(pgid, 0.0)


def forget(pgid: int) -> None:
    """The child has ended: drop its seconds (a pid can be reused)."""
    with _ledger_lock:
        _ledger.paused.pop(pgid, None)
        _ledger.paused_since.pop(pgid, None)
        _ledger.waited.pop(pgid, None)
        _ledger.waiting.discard(pgid)


def turns_taken() -> int:
    """Turns granted in this process so far (for tests and diagnostics)."""
    return _turns_taken


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _stop_others(holder: int) -> list[int]:
    stopped = []
    now = time.monotonic()
    for pgid in live_groups():
        if pgid != holder and _signal_group(pgid, signal.SIGSTOP):
            stopped.append(pgid)
            with _ledger_lock:
                if pgid not in _ledger.waiting:  # a wait for a turn is not counted already
                    _ledger.paused_since[pgid] = now
    return stopped


def _continue(stopped: list[int]) -> None:
    now = time.monotonic()
    for pgid in stopped:
        _signal_group(pgid, signal.SIGCONT)
        with _ledger_lock:
            since = _ledger.paused_since.pop(pgid, None)
            if since is not None:
                _ledger.paused[pgid] = _ledger.paused.get(pgid, 0.0) + now - since


class TurnWatch:
    """One child's side of the turns, driven by the thread that waits on that child."""

    def __init__(self, turn_dir: Path, pgid: int) -> None:
        self.turn_dir = turn_dir
        self.pgid = pgid
        self._stopped: list[int] | None = None  # set while this child holds the turn
        self._held = False
        self._asked_at: float | None = None

    @property
    def holding(self) -> bool:
        return self._held

    def excluded_seconds(self) -> float:
        """Seconds the child's time limit does not count: stopped for others' turns, and
        waiting for its own (the wait under way included)."""
        waiting = time.monotonic() - self._asked_at if self._asked_at is not None and not self._held else 0.0
        return paused_seconds(self.pgid) + waited_seconds(self.pgid) + waiting

    def poll(self, alive: bool) -> None:
        """Grant a turn the child asked for, or give one back it has finished with; called
        every few milliseconds while the child runs (``alive``) and once after it ended."""
        if self._held:
            if not alive or (self.turn_dir / DONE_FILE).exists():
                self.release()
            return
        if not alive or not (self.turn_dir / WANT_FILE).exists():
            return
        if self._asked_at is None:
            self._asked_at = time.monotonic()
            with _ledger_lock:
                _ledger.waiting.add(self.pgid)
        if not _turn.acquire(timeout=0.05):
            return  # another child holds the turn; asked again at the next poll
        self._take()

    def _take(self) -> None:
        global _turns_taken
        self._held = True
        waited = time.monotonic() - (self._asked_at or time.monotonic())
        self._asked_at = None
        with _ledger_lock:
            _ledger.waited[self.pgid] = _ledger.waited.get(self.pgid, 0.0) + waited
            _ledger.waiting.discard(self.pgid)
            _turns_taken += 1
        self._stopped = _stop_others(self.pgid)
        if self._stopped:
            time.sleep(SETTLE_S)
        (self.turn_dir / WANT_FILE).unlink(missing_ok=True)
        (self.turn_dir / GRANTED_FILE).write_text("")

    def release(self) -> None:
        """Continue what this turn stopped and free the turn (idempotent)."""
        if not self._held:
            return
        try:
            _continue(self._stopped or [])
        finally:
            self._held, self._stopped = False, None
            _turn.release()
            for name in (GRANTED_FILE, DONE_FILE):  # the next wish waits for these to go
                (self.turn_dir / name).unlink(missing_ok=True)


def watch_turn(turn_dir: Path | None, pgid: int) -> TurnWatch | None:
    """The watch for a child that may ask for turns (None: it runs without them)."""
    return TurnWatch(turn_dir, pgid) if turn_dir is not None else None
