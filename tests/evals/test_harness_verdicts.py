"""How the parent turns what the child left behind into a verdict (evals/harness.py: _apply_outcome).

A timeout on the CPU is the interpreter's limit when the kernel had been passing at a
steady pace (inconclusive), and a hang when the unfinished call ran far longer than any
trial before it (rejected): a correct kernel is never rejected for the CPU's slowness.
"""

from __future__ import annotations

import pytest

from kgen.evals.harness import HUNG_FACTOR, PROGRESS_WINDOW_S, _apply_outcome
from kgen.evals.result import EvalResult
from kgen.evals.sandbox.box import SandboxOutcome
from kgen.evals.verdict import (
    InconclusiveCause,
    RejectionClass,
    StageResult,
    StageStatus,
    Trial,
    Verdict,
)
from kgen.evals.verifier.messages import ChildReport


def _result(device: str) -> EvalResult:
    return EvalResult(problem="p", problem_path="p.py", candidate="c.py", backend="triton", device=device,
                      verdict=Verdict.PASSED)


def _timed_out(trial_seconds: list[float], timeout_s: float, device: str = "cpu") -> EvalResult:
    report = ChildReport(
        stages=[StageResult(name=n, status=StageStatus.PASSED) for n in ("static", "load")],
        trials=[Trial(seed=1, sizes={"n": 4}, seconds=s, passed=True) for s in trial_seconds]
        + [Trial(seed=1, sizes={"n": 5})],
    )
    outcome = SandboxOutcome(returncode=None, timed_out=True, seconds=timeout_s, network_isolated=True, workdir=".")
    result = _result(device)
    _apply_outcome(result, report, outcome, timeout_s)
    return result


def test_a_slow_but_passing_kernel_on_the_cpu_is_inconclusive():
    result = _timed_out([20.0, 25.0, 30.0], timeout_s=300)
    assert result.verdict is Verdict.INCONCLUSIVE and result.inconclusive is InconclusiveCause.CPU_TIME_LIMIT
    assert "3 trial(s) had passed" in result.reason and result.exit_code == 3


@pytest.mark.parametrize(
    ("seconds", "device"),
    [([], "cpu"), ([0.5, 0.4], "cpu"), ([20.0, 25.0], "cuda")],
    ids=["nothing-passed", "hung-after-fast-trials", "gpu"],
)
def test_a_hang_is_still_a_timeout(seconds, device):
    result = _timed_out(seconds, timeout_s=300, device=device)
    assert result.verdict is Verdict.REJECTED and result.rejection is RejectionClass.TIMEOUT


def test_the_hung_factor_separates_the_two():
    slowest = 2.0
    assert _timed_out([slowest], timeout_s=slowest + HUNG_FACTOR * slowest * 0.9).verdict is Verdict.INCONCLUSIVE
    assert _timed_out([slowest], timeout_s=slowest + HUNG_FACTOR * slowest * 1.1).verdict is Verdict.REJECTED


def test_running_out_of_device_memory_is_inconclusive_not_a_crash():
    report = ChildReport(stages=[StageResult(name="static", status=StageStatus.PASSED)])
    outcome = SandboxOutcome(
        returncode=1, timed_out=False, seconds=30, network_isolated=True, workdir=".",
        stderr_tail="Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB.",
    )
    result = _result("cuda")
    _apply_outcome(result, report, outcome, 300)
    assert result.verdict is Verdict.INCONCLUSIVE and result.inconclusive is InconclusiveCause.OUT_OF_MEMORY
    assert "12.00 GiB" in result.reason and result.rejection is None
    # killed before reporting: the cause says out of memory, and that whose is not known
    assert "whose allocation failed" in result.reason


def test_kernel_programs_still_starting_at_the_timeout_mean_slow_not_hung():
    report = ChildReport(stages=[StageResult(name=n, status=StageStatus.PASSED) for n in ("static", "load")])
    outcome = SandboxOutcome(returncode=None, timed_out=True, seconds=300, network_isolated=True, workdir=".")
    slow, hung, never = _result("cpu"), _result("cpu"), _result("cpu")
    _apply_outcome(slow, report, outcome, 300, heartbeat_age_s=0.8)
    _apply_outcome(hung, report, outcome, 300, heartbeat_age_s=PROGRESS_WINDOW_S * 4)
    _apply_outcome(never, report, outcome, 300, heartbeat_age_s=None)
    assert slow.verdict is Verdict.INCONCLUSIVE and "still starting" in slow.reason
    assert hung.rejection is RejectionClass.TIMEOUT and never.rejection is RejectionClass.TIMEOUT


def test_a_slow_correct_kernel_killed_at_the_limit_is_inconclusive_end_to_end():
    from pathlib import Path

    from kgen.evals.harness import EvalOptions, evaluate

    here = Path(__file__).resolve().parents[1] / "fixtures" / "messages"
    result = evaluate(here / "relu_kb.py", here / "relu_slow_per_element.py",
                      EvalOptions(device="cpu", n_seeds=1, timeout_s=25))
    assert result.verdict is Verdict.INCONCLUSIVE, result.reason
    assert result.inconclusive is InconclusiveCause.CPU_TIME_LIMIT


def _died(signal_name: str | None, *, returncode: int = -9, timed_out: bool = False,
          stopped_by: str | None = None) -> EvalResult:
    report = ChildReport(stages=[StageResult(name=n, status=StageStatus.PASSED) for n in ("static", "load")])
    outcome = SandboxOutcome(returncode=returncode, timed_out=timed_out, signal_name=signal_name, seconds=12,
                             network_isolated=True, workdir=".", stopped_by=stopped_by)
    result = _result("cuda")
    _apply_outcome(result, report, outcome, 300)
    return result


def test_a_verifier_ended_by_kgens_own_stop_is_no_verdict_and_not_kept():
    result = _died("SIGKILL", stopped_by="kgen received SIGTERM")
    assert result.verdict is Verdict.INCONCLUSIVE and result.inconclusive is InconclusiveCause.STOPPED
    assert "kgen received SIGTERM" in result.reason and result.rejection is None
    assert result.cut_short and result.exit_code == 3


def test_a_verifier_killed_from_outside_is_a_harness_fault_not_a_crash():
    result = _died("SIGKILL")
    assert result.verdict is Verdict.INCONCLUSIVE and result.inconclusive is InconclusiveCause.WORKER_KILLED
    assert "during correctness" in result.reason and "out-of-memory killer" in result.reason
    assert not result.cut_short  # a real outcome of this evaluation, kept


@pytest.mark.parametrize("name", ["SIGSEGV", "SIGABRT", "SIGBUS", None])
def test_a_candidate_that_crashes_its_process_is_still_rejected(name):
    result = _died(name, returncode=-11 if name else 1)
    assert result.verdict is Verdict.REJECTED and result.rejection is RejectionClass.CRASH


def test_kgens_time_limit_stays_a_timeout_whatever_signal_ended_it():
    result = _died(None, returncode=-9, timed_out=True)
    assert result.rejection is RejectionClass.TIMEOUT


def test_a_kernel_still_starting_when_no_trial_had_passed_is_inconclusive_as_the_readme_says():
    """The README said `cpu_time_limit` meant "a kernel that had been passing"; the harness also
    gives it to a kernel whose programs were still starting before its first trial passed (slow
    in the interpreter is the harness's limit, never the candidate's fault), and `timeout` only
    to one that stopped advancing."""
    from pathlib import Path

    report = ChildReport(stages=[StageResult(name=n, status=StageStatus.PASSED) for n in ("static", "load")])
    outcome = SandboxOutcome(returncode=None, timed_out=True, seconds=150, network_isolated=True, workdir=".")
    slow = _result("cpu")
    _apply_outcome(slow, report, outcome, 150, heartbeat_age_s=0.5)
    assert slow.inconclusive is InconclusiveCause.CPU_TIME_LIMIT and slow.exit_code == 3
    assert "after 0 trial(s) had passed" in slow.reason
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    said = readme.split("`cpu_time_limit`:", 1)[1].split("; `", 1)[0]
    assert "had been passing" not in said, said
    assert "before its first trial passed" in said and "`timeout`" in said, said
