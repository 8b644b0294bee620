"""scripts/sync_ratios.py over agent run directories: every saved evaluation is a row, and a
candidate rejected for its timing fails the job (a GPU run checks honest kernels with it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kgen.evals.result import EvalResult
from kgen.evals.timing.bench_result import BenchResult, Measurement
from kgen.evals.verdict import RejectionClass, Verdict

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sync_ratios.py"


def _save(run: Path, candidate: str, name: str, result: EvalResult) -> None:
    folder = run / "candidates" / candidate
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(result.model_dump_json())


def _result(verdict: Verdict, ratio: float, flags: list[str], rejection: RejectionClass | None = None) -> EvalResult:
    bench = BenchResult(measurements={"candidate": Measurement(median_ms=0.17, sync_ratio=ratio, flags=flags)})
    return EvalResult(problem="softmax", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                      verdict=verdict, rejection=rejection, bench=bench)


def _run(*runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, runs)], capture_output=True, text=True)


def test_honest_runs_pass_and_every_evaluation_is_a_row(tmp_path):
    run = tmp_path / "run_a"
    _save(run, "g0-c00", "eval.json", _result(Verdict.PASSED, 1.3, []))
    _save(run, "g0-c00", "final_eval.json", _result(Verdict.PASSED, 1.1, []))
    _save(run, "g0-c01", "eval.json", _result(Verdict.REJECTED, 1.0, [], RejectionClass.MISMATCH))
    done = _run(run)
    assert done.returncode == 0, done.stderr
    assert "run_a/g0-c00/final_eval" in done.stdout and "| 1.30 |" in done.stdout
    assert "3 evaluations; 0 rejected for their timing; 0 with flags" in done.stdout


def test_a_candidate_rejected_for_its_timing_fails_the_job(tmp_path):
    run = tmp_path / "run_b"
    _save(run, "g0-c00", "eval.json", _result(Verdict.PASSED, 1.2, ["threads_started: 1 new thread(s)"]))
    _save(run, "g1-c00", "eval.json", _result(Verdict.REJECTED, 2.4, [], RejectionClass.DEFERRED_WORK))
    done = _run(run, tmp_path / "run_b")
    assert done.returncode == 1
    assert "4 evaluations; 2 rejected for their timing; 2 with flags" in done.stdout


def test_a_folder_that_is_not_a_run_is_a_usage_error(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 2 and "not a run directory" in done.stderr
