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
from concurrent.futures import Future
from pathlib import Path

from kgen.agent.candidates import CandidateRecord, best_for
from kgen.agent.run_directory import RunDirectory
from kgen.agent.search.state import RunState
from kgen.agent.search.verification_overlap import OverlapDecision, overlap_decision, plan_peak
from kgen.agent.search.verification_record import (
    VerificationKey,
    find_record,
    reused_result,
    save_record,
    size_plan,
    verification_key,
)
from kgen.agent.spec.kernel_spec import KernelSpec
from kgen.backends.device import Device
from kgen.evals.bundle import (
    BUNDLE_FILE,
    BundleError,
    EvidenceBundle,
    bundle_for_files,
    read_bundle,
)
from kgen.evals.executors.lane import default_slots
from kgen.evals.executors.session import evaluate_one
from kgen.evals.harness import EvalOptions
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.size_sets import verification_size_plan
from kgen.evals.result import EvalResult
from kgen.evals.timing.gpu_identity import visible_gpu

#: ``harness.evaluate``'s signature: what runs a verification (``session.evaluate_one``: the
#: process's executor; a fake one in tests)
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
        # beside the screenings, taking turns with them (a prestarted spare would be one of theirs)
        shared = options.model_copy(update={"gpu_turns": True, "prestart": False})
        self._call = lambda: verify_and_record(problem, candidate, shared, key, run_id, evaluate)
        self._result: Future[EvalResult] = Future()
        # a daemon: an interrupted run does not wait for it (its verifier is ended with kgen's children)
        self._thread = threading.Thread(target=self._verify, name="kgen-final-verification", daemon=True)

    def start(self) -> BackgroundVerification:
        self._thread.start()
        return self

    def _verify(self) -> None:
        try:
            self._result.set_result(self._call())
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that finishes it
            self._result.set_exception(exc)

    def finish(self) -> EvalResult:
        """The whole result, once the thread has ended (a pass recorded under the key); an
        error of the thread is raised here."""
        return self._result.result()


class FinalVerifier:
    """A run's full-size verifications of its winners: on a CPU the screening already was one
    (it is recorded); on a GPU reused from a record, finished from the background, or run now.
    ``options_for(spec, target)`` is the run's full-size options for a target."""

    def __init__(self, run: RunDirectory, device: Device,
                 options_for: Callable[[KernelSpec, str], EvalOptions], say: Callable[[str], None]) -> None:
        self.run, self.device, self.options_for, self.say = run, device, options_for, say
        self._gpu_model: str | None = None
        #: candidate id -> its full-size verification running beside the last generation; not
        #: in the checkpointed state (a thread is not state): a resumed run verifies in persist
        self._background: dict[str, BackgroundVerification] = {}

    @property
    def running(self) -> list[str]:
        """The candidates whose verification runs beside the generation now."""
        return list(self._background)

    def gpu_model(self) -> str | None:
        """The GPU model as NVML names it (the records' key), asked once; None on a CPU run
        or where NVML cannot say (then no record is read or written)."""
        if self.device.is_gpu and self._gpu_model is None:
            gpu = visible_gpu()
            self._gpu_model = gpu.name if gpu is not None else None
        return self._gpu_model

    def key(self, spec: KernelSpec, record: CandidateRecord, options: EvalOptions) -> VerificationKey | None:
        source = self.run.candidate_source(record.id).read_text()
        return verification_key(spec.problem, source, options, self.device, self.gpu_model())

    def result(self, spec: KernelSpec, record: CandidateRecord) -> EvalResult:
        """The winner's full-size result, saved as ``final_eval.json`` unless cut short, with
        its evidence bundle (``bundle.json``) beside it."""
        options = self.options_for(spec, record.target)
        if not self.device.is_gpu:
            result = self.run.load_eval(record.id)  # the CPU plan is already the full one: kept as such
            if result is not None and result.passed:
                key = self.key(spec, record, options)
                if key is not None:
                    save_record(key, result, self.run.run_id)
            if result is not None:
                self.write_bundle(spec, record, options, result)
            return result
        cached = self.run.load_eval(record.id, "final_eval.json")
        if cached is not None:
            return cached
        background = self._background.pop(record.id, None)
        if background is not None:
            self.say(f"{record.id}: waiting for its full-size verification, started beside the last generation")
            result = background.finish()
        else:
            key = self.key(spec, record, options)
            result = reuse(key)
            if result is not None and result.reused_verification is not None:
                reused = result.reused_verification
                self.say(f"{record.id} already verified at full sizes on {reused.device_name} on "
                         f"{reused.verified_at.date().isoformat()}: not repeated")
            else:
                self.say(f"verifying {record.id} at full sizes for {record.target}")
                result = verify_and_record(spec.problem, self.run.candidate_source(record.id), options, key,
                                           self.run.run_id, evaluate_one)
        if not result.cut_short:
            self.run.write(f"candidates/{record.id}/final_eval.json", result.model_dump_json(indent=1))
            self.write_bundle(spec, record, options, result)
        return result

    def write_bundle(self, spec: KernelSpec, record: CandidateRecord, options: EvalOptions,
                     result: EvalResult) -> None:
        """The winner's evidence bundle (``evals/bundle.py``): what `kgen verify` re-checks, and
        what the knowledge base keeps with the kernel (:meth:`bundle`)."""
        bundle = bundle_for_files(result, options, self.run.candidate_source(record.id),
                                  resolve_problem(spec.problem).path)
        self.run.write(f"candidates/{record.id}/{BUNDLE_FILE}", bundle.model_dump_json(indent=1) + "\n")

    def bundle(self, candidate_id: str) -> EvidenceBundle | None:
        """A winner's bundle as written by :meth:`write_bundle`; None where there is none (or it
        no longer matches its digests: the knowledge base keeps only an intact one)."""
        path = self.run.candidate_dir(candidate_id) / BUNDLE_FILE
        try:
            return read_bundle(path) if path.is_file() else None
        except BundleError:
            return None

    def start_beside(self, state: RunState, generation: int, screenings: int) -> None:
        """Start the full-size verification of the best candidate so far beside the last
        generation, where memory allows (``verification_overlap.py``); one at a time. A best
        verified before (a record, or this run's final_eval.json) needs none."""
        for target in state.spec.targets:
            best = best_for(state.records, target)
            if self._background or not best or self.run.load_eval(best[0].id, "final_eval.json") is not None:
                continue
            record = best[0]
            options = self.options_for(state.spec, target)
            key = self.key(state.spec, record, options)
            if reuse(key) is not None:
                continue  # the final step says so, and repeats nothing
            decision = self.overlap(state.spec, record, options, screenings)
            if not decision.overlap:
                self.say(f"{record.id} is verified at full sizes after generation {generation}: {decision.why}")
                continue
            self.say(f"verifying {record.id} at full sizes beside generation {generation} ({decision.why})")
            self._background[record.id] = BackgroundVerification(
                state.spec.problem, self.run.candidate_source(record.id), options, key, self.run.run_id, evaluate_one,
            ).start()

    def overlap(self, spec: KernelSpec, record: CandidateRecord, options: EvalOptions,
                screenings: int) -> OverlapDecision:
        """The overlap decision from the memory plans of the full verification and of the
        screenings (the small plan), and the GPU's free memory as NVML reports it."""
        info = resolve_problem(spec.problem)
        source = self.run.candidate_source(record.id).read_text()
        full_peak = plan_peak(info.path, size_plan(spec.problem, source, options, self.device))
        screening_peak = plan_peak(info.path, [dict(s.sizes) for s in verification_size_plan(info, Device.CPU)])
        gpu = visible_gpu()
        return overlap_decision(full_peak, screening_peak, min(screenings, default_slots(self.device)),
                                gpu.free_bytes if gpu is not None else None)
