"""The records of passing full-size verifications: written on a pass only, read back for the
same key only, ignored when unreadable; and, on a CPU (whose "full" plan is the small one),
a real verification recorded and then not repeated."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kgen.agent.search.final_verification import reuse, verify_and_record
from kgen.agent.search.verification_record import (
    VerificationKey,
    find_record,
    records_dir,
    reused_result,
    save_record,
    toolchain_versions,
    verification_key,
)
from kgen.backends.device import Device
from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.result import EvalResult
from kgen.evals.verdict import InconclusiveCause, RejectionClass, StageResult, StageStatus, Verdict

H100 = "NVIDIA H100 80GB HBM3"
ROOT = Path(__file__).resolve().parents[3]
SOFTMAX_SEED = ROOT / "knowledge_base" / "seed_kernels" / "triton" / "softmax.py"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _key(**parts) -> VerificationKey:
    base = dict(code_hash="c" * 64, problem_digest="p" * 16, size_plan=[{"N": 4096}, {"N": 4097}],
                policies="precision ieee, torch ops strict", n_seeds=3, distributions=True, train_check=False,
                targets=["h100"], backend="triton", device_name=H100, kgen_version="0.1.0",
                toolchains={"torch": "2.9.0", "triton": "3.5.0"})
    return VerificationKey(**{**base, **parts})


def _result(verdict=Verdict.PASSED, device_name: str | None = H100, **fields) -> EvalResult:
    base = dict(problem="softmax", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                verdict=verdict, device_name=device_name, seconds=73.0,
                stages=[StageResult(name="correctness", status=StageStatus.PASSED, message="ok")])
    return EvalResult(**{**base, **fields})


def test_a_pass_is_recorded_and_read_back_for_the_same_key_saying_where_and_when():
    key = _key()
    when = datetime(2026, 11, 27, 9, 30, tzinfo=UTC)
    path = save_record(key, _result(), "run-1", now=when)
    assert path is not None and path.parent == records_dir()
    record = find_record(_key())
    assert record is not None and record.run_id == "run-1" and record.verified_at == when
    reused = reused_result(record)
    assert reused.passed and reused.seconds == 0.0 and reused.stages == record.result.stages
    assert reused.reused_verification is not None and reused.reused_verification.seconds == 73.0
    assert reused.reason == ("verified at full sizes on NVIDIA H100 80GB HBM3 on 2026-11-27 (run run-1), "
                             "same code: not repeated")
    # the typed field survives the result's JSON (final_eval.json)
    again = EvalResult.model_validate_json(reused.model_dump_json())
    assert again.reused_verification == reused.reused_verification


@pytest.mark.parametrize("result", [
    _result(Verdict.REJECTED, rejection=RejectionClass.MISMATCH, reason="wrong"),
    _result(Verdict.INCONCLUSIVE, inconclusive=InconclusiveCause.HARNESS_OOM, reason="out of memory"),
    _result(Verdict.INCONCLUSIVE, inconclusive=InconclusiveCause.STOPPED, reason="kgen stopped"),
    _result(device_name="NVIDIA H200"),  # passed, but on another GPU model than the key's
    _result(device_name=None),  # passed, and nothing says where
], ids=["rejected", "inconclusive", "cut short", "other GPU", "unknown GPU"])
def test_only_a_pass_on_the_keys_gpu_is_recorded(result):
    assert save_record(_key(), result, "run-1") is None
    assert find_record(_key()) is None
    assert not records_dir().exists() or not list(records_dir().iterdir())


def test_a_reused_result_is_not_recorded_again():
    save_record(_key(), _result(), "run-1")
    reused = reused_result(find_record(_key()))
    assert save_record(_key(), reused, "run-2") is None
    assert find_record(_key()).run_id == "run-1"


def test_the_timings_gpu_name_stands_for_a_result_from_before_the_verifier_named_it():
    result = _result(device_name=None, bench={"device_name": H100})
    assert save_record(_key(), result, "run-1") is not None


@pytest.mark.parametrize("change", [
    {"code_hash": "d" * 64},
    {"problem_digest": "q" * 16},
    {"size_plan": [{"N": 4096}]},
    {"policies": "precision tf32, torch ops strict"},
    {"n_seeds": 2},
    {"train_check": True},
    {"targets": ["h100", "mi300x"]},
    {"backend": "cute"},
    {"device_name": "NVIDIA H200"},
    {"kgen_version": "0.2.0"},
    {"toolchains": {"torch": "2.9.0", "triton": "3.6.0"}},
    {"toolchains": {"torch": "2.10.0", "triton": "3.5.0"}},
], ids=lambda change: next(iter(change)))
def test_any_change_in_the_key_verifies_again(change):
    save_record(_key(), _result(), "run-1")
    assert find_record(_key(**change)) is None
    assert reuse(_key(**change)) is None
    assert reuse(_key()) is not None


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"key": {}, "run_id": "x"}', b"\xff\xfe"],
                         ids=["empty", "torn", "missing fields", "not text"])
def test_a_record_that_cannot_be_read_is_ignored_and_replaced_by_the_next_pass(content):
    key = _key()
    path = save_record(key, _result(), "run-1")
    path.write_bytes(content)
    assert find_record(key) is None
    assert save_record(key, _result(), "run-2") == path
    assert find_record(key).run_id == "run-2"


def test_a_record_under_the_right_name_for_another_key_is_not_trusted():
    path = save_record(_key(code_hash="d" * 64), _result(), "run-1")
    path.rename(records_dir() / f"{_key().digest()}.json")
    assert find_record(_key()) is None


def test_the_key_follows_the_code_not_its_comments_and_needs_the_gpu_model(tmp_path):
    options = EvalOptions(device="cpu", n_seeds=3)
    source = SOFTMAX_SEED.read_text()
    key = verification_key("softmax", source, options, Device.CPU, None)
    assert key is not None and key.device_name == "cpu" and key.size_plan
    assert key.toolchains == toolchain_versions("triton") and set(key.toolchains) == {"torch", "triton"}
    commented = verification_key("softmax", "# a comment\n" + source, options, Device.CPU, None)
    assert commented == key
    assert verification_key("softmax", source.replace("BLOCK", "TILE"), options, Device.CPU, None) != key
    assert verification_key("softmax", source, options, Device.CUDA, None) is None
    on_gpu = verification_key("softmax", source, options.model_copy(update={"small_sizes": True}), Device.CUDA, H100)
    assert on_gpu.device_name == H100 and on_gpu.size_plan == key.size_plan  # the small plan on both


@pytest.mark.slow
def test_on_a_cpu_a_real_verification_is_recorded_then_not_repeated():
    options = EvalOptions(device="cpu", n_seeds=1, distributions=False, timeout_s=300)
    key = verification_key("softmax", SOFTMAX_SEED.read_text(), options, Device.CPU, None)
    calls: list[str] = []

    def counted(problem, candidate, opts):
        calls.append(str(candidate))
        return evaluate(problem, candidate, opts)

    first = reuse(key) or verify_and_record("softmax", SOFTMAX_SEED, options, key, "run-1", counted)
    assert first.passed, first.reason
    assert first.reused_verification is None and first.device_name is None  # a CPU run names no GPU
    second = reuse(key) or verify_and_record("softmax", SOFTMAX_SEED, options, key, "run-2", counted)
    assert len(calls) == 1
    assert second.passed and second.reused_verification.run_id == "run-1"
    assert second.reason.startswith("verified at full sizes on cpu on ")
    assert second.trials == first.trials
