"""`kgen.generate(...)` and `kgen.evaluate(...)` as a script calls them: results, and
`KgenUsageError` (never an exit) for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kgen
from kgen.knowledge_base import SEED_KERNELS_DIR

SEED = SEED_KERNELS_DIR / "triton" / "rmsnorm_backward.py"




@pytest.mark.slow
def test_generate_offline_returns_a_verified_kernel_with_evidence(home, tmp_path):
    # a configured model is overridden: models=[] means offline
    (home / "config.toml").write_text('models = ["openai:gpt-5"]\n')
    lines: list[str] = []
    summary = kgen.generate("Triton softmax for H100", models=[], budget=2, device="cpu",
                            out=tmp_path / "run", kb=str(tmp_path / "kb"), progress=lines.append)
    assert summary.succeeded and summary.problem == "softmax" and summary.targets == ["h100"]
    assert summary.mode.startswith("offline") and summary.candidates == 2
    assert Path(summary.run_dir) == (tmp_path / "run").resolve()
    best = summary.best["h100"]
    assert best.evidence.device == "cpu" and best.evidence.trials >= 3
    assert len(best.evidence.seeds) >= 1 and best.evidence.shapes and best.evidence.distributions
    assert best.time_ms is None and best.timing_note == "not timed: no GPU here"
    module = Path(best.module)
    assert module.is_file() and module.parent == Path(summary.run_dir)
    assert "class ModelNew" in module.read_text()
    assert json.loads((Path(summary.run_dir) / "summary.json").read_text())["best"]["h100"]["candidate"] \
        == best.candidate
    assert any("offline mode" in line for line in lines)
    assert not (home / "runs").exists()  # out= was the run directory


def test_generate_with_an_empty_request_is_a_usage_error(home):
    with pytest.raises(kgen.KgenUsageError, match="empty request"):
        kgen.generate("")
    with pytest.raises(kgen.KgenUsageError, match="empty request"):
        kgen.generate("   ", models=[])
    assert not (home / "runs").exists()


def test_generate_with_an_unknown_target_is_a_usage_error(home):
    with pytest.raises(kgen.KgenUsageError, match="h900"):
        kgen.generate("Triton softmax", targets=["h900"], models=[])


def test_generate_into_a_folder_that_holds_files_is_a_usage_error(home, tmp_path):
    out = tmp_path / "previous"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(kgen.KgenUsageError, match="not empty"):
        kgen.generate("Triton softmax for H100", models=[], device="cpu", out=out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_generate_with_a_misspelt_option_names_it(home):
    with pytest.raises(kgen.KgenUsageError, match="budgett"):
        kgen.generate("", models=[], budgett=3)


@pytest.mark.slow
def test_evaluate_passes_the_seed_kernel():
    result = kgen.evaluate("rmsnorm_backward", SEED, device="cpu", small_sizes=True, n_seeds=1)
    assert result.passed, result.reason
    assert result.verdict == "passed" and result.device == "cpu"


def test_evaluate_with_a_missing_candidate_is_a_usage_error():
    with pytest.raises(kgen.KgenUsageError, match="missing.py"):
        kgen.evaluate("rmsnorm_backward", "missing.py")


def test_evaluate_with_no_seeds_is_a_usage_error():
    with pytest.raises(kgen.KgenUsageError, match="n_seeds"):
        kgen.evaluate("rmsnorm_backward", SEED, n_seeds=0)


def test_evaluate_with_a_misspelt_option_names_it():
    with pytest.raises(kgen.KgenUsageError, match="n_seed"):
        kgen.evaluate("rmsnorm_backward", "missing.py", n_seed=1)


def test_a_result_prints_its_verdict_as_the_plain_word(capsys):
    """`print(result.verdict)` printed `Verdict.PASSED`, and so did an f-string."""
    from kgen.evals.verdict import InconclusiveCause, RejectionClass, StageStatus

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    result = kgen.evaluate(fixtures / "problems" / "relu_kernelbench.py",
                           fixtures / "candidates" / "relu_kernelbench_solution.py", device="cpu", n_seeds=1)
    print(result.verdict, result.stages[0].status)
    assert capsys.readouterr().out == "passed passed\n"
    assert f"{result.verdict}" == str(result.verdict) == "passed" and f"{result.verdict:>8}" == "  passed"
    words = (RejectionClass.MISMATCH, InconclusiveCause.CPU_TIME_LIMIT, StageStatus.SKIPPED)
    assert [f"{word}" for word in words] == ["numerical_mismatch", "cpu_time_limit", "skipped"]
