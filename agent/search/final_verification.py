"""The winner's verification at full sizes: reused from a record, run now, or run beside the
last generation and finished after it.

A passing full-size verification is recorded (``verification_record.py``) and a later run
whose winner has the same key does not repeat it: its result says where and when it passed.
Otherwise the verification is one evaluation (``evals/harness.py``), as before.

Started in the background (a thread) beside the last generation, it is one whole evaluation
that takes turns on the GPU as the batch's verifiers do (``evals/sandbox/gpu_turns.py``): its
checks share the GPU with the screenings, every other process is stopped while it times the
winner, and it is stopped while a screening is timed. Interrupted (Ctrl-C, a kill), the
thread's result is cut short and never saved; a resumed run verifies in the foreground.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from kgen.agent.search.verification_record import (
    VerificationKey,
    find_record,
    reused_result,
    save_record,
)
from kgen.evals.harness import EvalOptions
from kgen.evals.result import EvalResult

#: ``harness.evaluate``'s signature: what runs a verification (a fake one in tests)
Evaluate = Callable[[str | Path, str | Path, EvalOptions], EvalResult]


def reuse(key: VerificationKey | None) -> EvalResult | None:
    """The recorded pass for ``key`` as a reused result, or None (no key, no usable record)."""
    record = find_record(key) if key is not None else None
    return reused_result(record) if record is not None else None


def verify_and_record(problem: str | Path, candidate: str | Path, options: EvalOptions,
                      key: VerificationKey | None, run_id: str, evaluate: Evaluate) -> EvalResult:
    """One evaluation, recorded under ``key`` when it passes (a pass cut short never is)."""
    result = evaluate(problem, candidate, options)
    if key is not None and not result.cut_short:
        save_record(key, result, run_id)
    return result


class BackgroundVerification:
    """One candidate's full-size verification, timing included, in a thread (:meth:`finish`)."""

    def __init__(self, problem: str | Path, candidate: str | Path, options: EvalOptions,
                 key: VerificationKey | None, run_id: str, evaluate: Evaluate) -> None:
        self.problem, self.candidate, self.options = problem, candidate, options
        self.key, self.run_id, self._evaluate = key, run_id, evaluate
        self._verified: EvalResult | None = None
        self._error: BaseException | None = None
        # a daemon: an interrupted run does not wait for it (its verifier is ended with kgen's children)
        self._thread = threading.Thread(target=self._verify, name="kgen-final-verification", daemon=True)

    def start(self) -> BackgroundVerification:
        self._thread.start()
        return self

    def _verify(self) -> None:
        try:
            # beside the screenings, taking turns with them (a prestarted spare would be one of theirs)
            self._verified = self._evaluate(self.problem, self.candidate,
                                            self.options.model_copy(update={"gpu_turns": True, "prestart": False}))
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that finishes it
            self._error = exc

    def finish(self) -> EvalResult:
        """The whole result, once the thread has ended; a pass is recorded under the key."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        result = self._verified
        assert result is not None  # the thread ended without an error: it set a result
        if self.key is not None and not result.cut_short:
            save_record(self.key, result, self.run_id)
        return result
