"""The winner's verification at full sizes: reused from a record, run now, or run beside the
last generation and finished after it.

A passing full-size verification is recorded (``verification_record.py``) and a later run
whose winner has the same key does not repeat it: its result says where and when it passed.
Otherwise the verification is one evaluation (``evals/harness.py``), as before.

Started in the background (a thread) beside the last generation, it is split as a batch
splits its candidates (``evals/batch.py``): the verification runs beside the screenings with
timing off, and the timing runs after the generation, alone on the GPU (``timing_only``),
merged into one result by ``merge_timing``. Until the timing the verification holds no claim
on the GPU alone: the batch asks it to finish before its own timings (``wait``), so no timing
of either runs beside the other's checks. Interrupted (Ctrl-C, a kill), the thread's result
is cut short and never saved; a resumed run verifies in the foreground.
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
from kgen.evals.batch import merge_timing
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
    """One candidate's full-size verification in a thread, its timing after (:meth:`finish`)."""

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
            # beside the screenings: no timing (a prestarted spare would be one of the screenings')
            self._verified = self._evaluate(self.problem, self.candidate,
                                            self.options.model_copy(update={"bench": False, "prestart": False}))
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that finishes it
            self._error = exc

    def wait(self) -> None:
        """Until the verification has ended (before a timing that must run alone)."""
        self._thread.join()

    def finish(self) -> EvalResult:
        """The whole result: the verification, then (if it passed and timing is asked for) the
        timing alone on the GPU, merged; a pass is recorded under the key."""
        self.wait()
        if self._error is not None:
            raise self._error
        verified = self._verified
        assert verified is not None  # the thread ended without an error: it set a result
        result = verified
        if verified.passed and self.options.bench:
            timed = self._evaluate(self.problem, self.candidate,
                                   self.options.model_copy(update={"timing_only": True}))
            result = merge_timing(verified, timed)
        if self.key is not None and not result.cut_short:
            save_record(self.key, result, self.run_id)
        return result
