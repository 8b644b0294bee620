"""The winner's full-size verification: in the background it is one whole evaluation beside the
last generation that takes turns on the GPU with the screenings, and records a pass; and in the graph (a GPU run
with a stand-in evaluation, as no GPU is here) a winner verified before is not verified again,
while a changed one is, and the lines say which."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import kgen
from kgen.agent.candidates import CandidateRecord, entry_for_candidate
from kgen.agent.run_directory import RunDirectory
from kgen.agent.run_options import RunOptions
from kgen.agent.search import final_verification
from kgen.agent.search.final_verification import BackgroundVerification, FinalVerifier
from kgen.agent.search.graph import Runner
from kgen.agent.search.state import RunState
from kgen.agent.search.verification_overlap import OverlapDecision
from kgen.agent.search.verification_record import VerificationRecord, find_record, records_dir
from kgen.agent.spec.kernel_spec import KernelSpec
from kgen.backends.device import Device
from kgen.evals.harness import EvalOptions
from kgen.evals.result import EvalResult
from kgen.evals.timing.gpu_identity import GpuIdentity
from kgen.evals.verdict import (
    InconclusiveCause,
    RejectionClass,
    StageResult,
    StageStatus,
    Trial,
    Verdict,
)
from kgen.knowledge_base.code_hash import normalised_code_hash

H100 = "NVIDIA H100 80GB HBM3"
ROOT = Path(__file__).resolve().parents[3]
SOFTMAX_SEED = ROOT / "knowledge_base" / "seed_kernels" / "triton" / "softmax.py"
SPEC = KernelSpec(request="softmax", problem="softmax", operation="softmax", targets=["h100"], source="matcher")


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _result(verdict=Verdict.PASSED, stage="correctness", **fields) -> EvalResult:
    base = dict(problem="softmax", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                verdict=verdict, device_name=H100, seconds=10.0,
                stages=[StageResult(name=stage, status=StageStatus.PASSED, message="ok")])
    return EvalResult(**{**base, **fields})


class FakeEvaluate:
    """``harness.evaluate``'s stand-in: records the options it was called with."""

    def __init__(self, verified: EvalResult | None = None, gate: threading.Event | None = None) -> None:
        self.calls: list[EvalOptions] = []
        self.verified = verified or _result(stages=[
            StageResult(name="correctness", status=StageStatus.PASSED, message="ok"),
            StageResult(name="timing", status=StageStatus.PASSED, message="median 0.1 ms")],
            bench={"device_name": H100, "measurements": {"candidate": {"median_ms": 0.1}}})
        self.gate = gate

    def __call__(self, problem, candidate, options: EvalOptions) -> EvalResult:
        self.calls.append(options)
        if self.gate is not None:
            self.gate.wait(10)
        return self.verified


def _options() -> EvalOptions:
    return EvalOptions(device=Device.CUDA, bench=True, prestart=True, n_seeds=3)


def _key():
    from kgen.agent.search.verification_record import verification_key

    return verification_key("softmax", SOFTMAX_SEED.read_text(), _options(), Device.CUDA, H100)


def test_in_the_background_it_is_one_timed_evaluation_taking_turns_and_records_the_pass():
    gate = threading.Event()
    fake = FakeEvaluate(gate=gate)
    background = BackgroundVerification("softmax", SOFTMAX_SEED, _options(), _key(), "run-1", fake).start()
    gate.set()
    result = background.finish()
    (options,) = fake.calls
    # timed, beside the screenings: it asks for a turn alone on the GPU to time, and takes no spare of theirs
    assert options.bench and options.gpu_turns and not options.prestart
    assert result.passed and [s.name for s in result.stages] == ["correctness", "timing"]
    assert result.bench.median("candidate") == 0.1
    assert find_record(_key()).run_id == "run-1"


@pytest.mark.parametrize("verified", [
    _result(Verdict.REJECTED, rejection=RejectionClass.MISMATCH, reason="wrong"),
    _result(Verdict.REJECTED, rejection=RejectionClass.DEFERRED_WORK, reason="deferred"),
    _result(Verdict.INCONCLUSIVE, inconclusive=InconclusiveCause.STOPPED, reason="Ctrl-C"),
], ids=["rejected", "timing rejects", "cut short"])
def test_in_the_background_a_verification_that_does_not_pass_is_never_recorded(verified):
    fake = FakeEvaluate(verified=verified)
    result = BackgroundVerification("softmax", SOFTMAX_SEED, _options(), _key(), "run-1", fake).start().finish()
    assert not result.passed and len(fake.calls) == 1
    assert not records_dir().exists() or not list(records_dir().iterdir())


def test_an_error_in_the_background_is_raised_where_it_is_finished():
    def broken(problem, candidate, options):
        raise RuntimeError("no such problem")

    background = BackgroundVerification("softmax", SOFTMAX_SEED, _options(), _key(), "run-1", broken).start()
    with pytest.raises(RuntimeError, match="no such problem"):
        background.finish()


# -- in the graph, on a GPU (a stand-in evaluation) ------------------------------------------


def _gpu_runner(tmp_path: Path, name: str, monkeypatch, fake: FakeEvaluate, source: str) -> tuple[Runner, list[str]]:
    run = RunDirectory(tmp_path / name)
    run.path.mkdir(parents=True)
    lines: list[str] = []
    runner = Runner(run, RunOptions(request="softmax", models=[], budget=4, generations=2, device="cuda"),
                    progress=lines.append)
    runner._device = Device.CUDA  # as resolve_device finds it on a GPU machine
    monkeypatch.setattr(final_verification, "evaluate_one", fake)
    monkeypatch.setattr(final_verification, "visible_gpu", lambda: GpuIdentity(name=H100, total_bytes=80 * 10**9,
                                                                  free_bytes=79 * 10**9))
    path = run.candidate_source("g0-c00")
    path.parent.mkdir(parents=True)
    path.write_text(source)
    return runner, lines


def _winner() -> CandidateRecord:
    return CandidateRecord(id="g0-c00", generation=0, target="h100", kind="baseline", origin="knowledge_base",
                           status="evaluated", verdict="passed", time_ms=1.0, device_name=H100)


def test_a_winner_verified_in_an_earlier_run_is_not_verified_again(tmp_path, monkeypatch):
    source = SOFTMAX_SEED.read_text()
    first_fake = FakeEvaluate()
    first, first_lines = _gpu_runner(tmp_path, "run-a", monkeypatch, first_fake, source)
    result = first.final_verifier.result(SPEC, _winner())
    assert result.passed and result.reused_verification is None and len(first_fake.calls) == 1
    assert first_fake.calls[0].bench and not first_fake.calls[0].small_sizes  # the full plan, timed
    assert "verifying g0-c00 at full sizes for h100" in first_lines

    second_fake = FakeEvaluate()
    second, lines = _gpu_runner(tmp_path, "run-b", monkeypatch, second_fake, "# same code\n" + source)
    reused = second.final_verifier.result(SPEC, _winner())
    assert second_fake.calls == []
    assert reused.passed and reused.reused_verification.run_id == first.run.run_id
    assert any(line.startswith(f"g0-c00 already verified at full sizes on {H100} on ") and
               line.endswith(": not repeated") for line in lines), lines
    saved = EvalResult.model_validate_json(second.run.file("candidates/g0-c00/final_eval.json").read_text())
    assert saved.reused_verification == reused.reused_verification
    assert "same code: not repeated" in saved.reason

    changed_fake = FakeEvaluate()
    changed, _ = _gpu_runner(tmp_path, "run-c", monkeypatch, changed_fake, source.replace("BLOCK", "TILE"))
    assert changed.final_verifier.result(SPEC, _winner()).reused_verification is None
    assert len(changed_fake.calls) == 1


def test_the_best_so_far_is_verified_beside_the_last_generation_and_finished_after_it(tmp_path, monkeypatch):
    gate = threading.Event()
    fake = FakeEvaluate(gate=gate)
    runner, lines = _gpu_runner(tmp_path, "run-a", monkeypatch, fake, SOFTMAX_SEED.read_text())
    monkeypatch.setattr(FinalVerifier, "overlap", lambda self, *a: OverlapDecision(overlap=True, why="it fits"))
    state = RunState(spec=SPEC, generation=1, candidates={"g0-c00": _winner()})
    runner.final_verifier.start_beside(state, 1, screenings=3)
    assert "verifying g0-c00 at full sizes beside generation 1 (it fits)" in lines
    gate.set()
    result = runner.final_verifier.result(SPEC, _winner())
    assert [(o.bench, o.gpu_turns) for o in fake.calls] == [(True, True)]
    assert "g0-c00: waiting for its full-size verification, started beside the last generation" in lines
    assert result.passed and result.bench is not None and runner.final_verifier.running == []
    assert find_record(runner.final_verifier.key(SPEC, _winner(), runner.eval_options(SPEC, "h100", full=True)))


def test_without_room_or_with_a_record_nothing_starts_beside_the_last_generation(tmp_path, monkeypatch):
    fake = FakeEvaluate()
    runner, lines = _gpu_runner(tmp_path, "run-a", monkeypatch, fake, SOFTMAX_SEED.read_text())
    monkeypatch.setattr(FinalVerifier, "overlap", lambda self, *a: OverlapDecision(overlap=False, why="no room"))
    state = RunState(spec=SPEC, generation=1, candidates={"g0-c00": _winner()})
    runner.final_verifier.start_beside(state, 1, screenings=3)
    assert runner.final_verifier.running == [] and fake.calls == []
    assert "g0-c00 is verified at full sizes after generation 1: no room" in lines
    runner.final_verifier.result(SPEC, _winner())  # verified after, and recorded
    monkeypatch.setattr(FinalVerifier, "overlap", lambda self, *a: pytest.fail("a recorded winner needs no decision"))
    again, _ = _gpu_runner(tmp_path, "run-b", monkeypatch, fake, SOFTMAX_SEED.read_text())
    again.final_verifier.start_beside(state, 1, screenings=3)
    assert again.final_verifier.running == [] and len(fake.calls) == 1


def test_the_overlap_decision_asks_nvml_and_stays_off_when_it_cannot_answer(tmp_path, monkeypatch):
    runner, _ = _gpu_runner(tmp_path, "run-a", monkeypatch, FakeEvaluate(), SOFTMAX_SEED.read_text())
    options = runner.eval_options(SPEC, "h100", full=True)
    assert runner.final_verifier.overlap(SPEC, _winner(), options, 3).overlap  # softmax's plans are small next to 79 GB
    monkeypatch.setattr(final_verification, "visible_gpu", lambda: None)
    decision = runner.final_verifier.overlap(SPEC, _winner(), options, 3)
    assert not decision.overlap and "unknown" in decision.why


@pytest.mark.slow
def test_an_offline_cpu_run_records_its_winners_verification(tmp_path):
    """End to end on a CPU, whose screening is already the full plan: the winner's pass is
    recorded under the key a later run's final verification would look up."""

    summary = kgen.generate("Triton softmax", models=[], budget=1, device="cpu", out=tmp_path / "run",
                            kb=str(tmp_path / "kb"))
    assert summary.best["h100"].candidate == "g0-c00"
    records = list(records_dir().glob("*.json"))
    assert len(records) == 1
    record = VerificationRecord.model_validate_json(records[0].read_text())
    assert record.key.device_name == "cpu" and record.result.passed
    assert record.run_id == RunDirectory(tmp_path / "run").run_id
    run = RunDirectory(tmp_path / "run")
    assert record.key.code_hash == normalised_code_hash(run.candidate_source("g0-c00").read_text())
    # its evidence bundle beside it; the (seed) kernel it re-found keeps the bundle of its GPU run
    from kgen.evals.bundle import read_bundle
    from kgen.knowledge_base.store import KnowledgeBase

    bundle = read_bundle(run.candidate_dir("g0-c00"))
    assert bundle.result.passed and bundle.settings.device is Device.CPU and bundle.settings.seeds
    assert bundle.kernel_source == run.candidate_source("g0-c00").read_text()
    seed = [e for e in KnowledgeBase.open(str(tmp_path / "kb")).kernels()
            if e.code_hash == record.key.code_hash and e.problem == "softmax" and e.backend == "triton"]
    assert len(seed) == 1 and seed[0].bundle is not None and seed[0].bundle.settings.device is Device.CUDA


def test_a_winner_has_an_evidence_bundle_that_the_knowledge_base_keeps(tmp_path, monkeypatch):
    """Beside final_eval.json the winner's bundle: its source, the problem, the timing with its
    interval; intact, it goes into the knowledge-base entry and comes back out still intact."""
    from kgen.evals.bundle import read_bundle
    from kgen.knowledge_base.schema import entry_document, entry_from_document

    source = SOFTMAX_SEED.read_text()
    fake = FakeEvaluate()
    fake.verified.bench.measurements["candidate"].p10_ms, fake.verified.bench.measurements["candidate"].p90_ms = (
        0.09, 0.12)
    fake.verified.trials.append(Trial(seed=5, sizes={"N": 8}, passed=True))
    runner, _ = _gpu_runner(tmp_path, "run-a", monkeypatch, fake, source)
    result = runner.final_verifier.result(SPEC, _winner())
    bundle = runner.final_verifier.bundle("g0-c00")
    assert bundle is not None and read_bundle(runner.run.candidate_dir("g0-c00")) == bundle
    assert bundle.kernel_source == source and bundle.problem == "softmax" and "class Model" in bundle.problem_source
    assert bundle.result == result and bundle.device_name == H100 and bundle.settings.timed
    assert (bundle.timings["candidate"].median_ms, bundle.timings["candidate"].p90_ms) == (0.1, 0.12)

    entry = entry_for_candidate(result, source, _winner(), run_id=runner.run.run_id, spec_text="softmax",
                                target="h100", dtype="float32", operation="softmax", shapes=None,
                                bundle=runner.final_verifier.bundle("g0-c00"))
    kept = entry_from_document(entry_document(entry)).bundle
    assert kept == bundle
    kept_file = tmp_path / "kept.json"
    kept_file.write_text(kept.model_dump_json())
    assert read_bundle(kept_file) == bundle  # still matches its digests after the store's round trip

    # an edited bundle in the run folder is not carried into the knowledge base
    path = runner.run.candidate_dir("g0-c00") / "bundle.json"
    path.write_text(path.read_text().replace('"device_name": "NVIDIA', '"device_name": "Fake'))
    assert runner.final_verifier.bundle("g0-c00") is None
