"""`evaluate()` on good and bad candidates: each failure named, the harness survives."""

from pathlib import Path

import pytest

from kgen.errors import KgenUsageError
from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import RejectionClass, Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
CANDIDATES = FIXTURES / "candidates"
CPU = EvalOptions(device="cpu", n_seeds=2, timeout_s=120)


def test_plain_kernelbench_problem_and_solution_pass():
    result = evaluate(RELU, CANDIDATES / "relu_kernelbench_solution.py", CPU)
    assert result.verdict is Verdict.PASSED, result.reason
    assert [s.name for s in result.stages] == ["static", "load", "correctness"]
    normal = [t for t in result.trials if t.distribution == "normal" and t.sizes == result.trials[0].sizes]
    assert len(normal) == 2  # one per seed
    assert result.trials[0].sizes == {"batch_size": 32, "dim": 96}  # scaled down for the CPU: batch gives way, the row stays
    assert {t.distribution for t in result.trials} >= {"normal", "uniform", "large", "small", "accumulation_probe"}
    assert any(t.sizes == {"batch_size": 31, "dim": 95} for t in result.trials)  # odd sizes too
    assert all(t.launches == 1 for t in result.trials)
    assert result.trials[0].seed != result.trials[1].seed


@pytest.mark.parametrize(
    ("candidate", "rejection", "words"),
    [
        ("syntax_error.py", RejectionClass.LOAD_ERROR, "syntax error in syntax_error.py line 4"),
        ("no_model_new.py", RejectionClass.NO_MODEL_NEW, "defines no class ModelNew"),
        ("relu_bad_init.py", RejectionClass.CONSTRUCTION_ERROR, "TypeError"),
        ("relu_wrong_shape.py", RejectionClass.WRONG_OUTPUT_STRUCTURE, "has shape (3072,), expected (32, 96)"),
        ("relu_raises_in_kernel.py", RejectionClass.RUNTIME_ERROR, "forward raised"),
        ("relu_never_launches.py", RejectionClass.NO_KERNEL_LAUNCH, "launched no triton kernel"),
        ("relu_wrong_math.py", RejectionClass.MISMATCH, "differs from the fp64 reference"),
        ("relu_segfault.py", RejectionClass.CRASH, "died by SIGSEGV during correctness"),
    ],
)
def test_bad_candidate_is_rejected_with_its_class(candidate, rejection, words):
    result = evaluate(RELU, CANDIDATES / candidate, CPU)
    assert result.verdict is Verdict.REJECTED
    assert result.rejection is rejection, result.reason
    assert words in result.reason
    assert "\n" not in result.reason
    assert result.stages[-1].status.value == "failed"


def test_hanging_candidate_is_killed_at_the_timeout():
    options = EvalOptions(device="cpu", n_seeds=1, timeout_s=15)
    result = evaluate(RELU, CANDIDATES / "relu_hangs.py", options)
    assert result.rejection is RejectionClass.TIMEOUT
    assert "killed after the 15 s time limit during correctness" in result.reason
    assert result.seconds < 60


def test_fixed_seeds_are_used_as_given():
    options = EvalOptions(device="cpu", seeds=[11, 12], timeout_s=120)
    result = evaluate(RELU, CANDIDATES / "relu_kernelbench_solution.py", options)
    assert [t.seed for t in result.trials][:2] == [11, 12]
    assert set(t.seed for t in result.trials) == {11, 12}


@pytest.mark.parametrize(
    ("problem", "candidate", "words"),
    [
        ("relu_kernelbench", "missing.py", "candidate file not found: missing.py"),
        ("no_such_problem", "relu_kernelbench_solution.py", "unknown problem 'no_such_problem'"),
        ("rmsnorm bwd typo xx", "relu_kernelbench_solution.py", "did you mean"),
        ("/nonexistent/problem.py", "relu_kernelbench_solution.py", "problem file not found"),
    ],
)
def test_bad_usage_raises_before_running(problem, candidate, words):
    problem_arg = RELU if problem == "relu_kernelbench" else problem
    with pytest.raises(KgenUsageError, match=words):
        evaluate(problem_arg, CANDIDATES / candidate if candidate != "missing.py" else candidate, CPU)


def test_unknown_target_is_bad_usage():
    options = EvalOptions(device="cpu", targets=["h900x"])
    with pytest.raises(KgenUsageError, match="h900x"):
        evaluate(RELU, CANDIDATES / "relu_kernelbench_solution.py", options)


def test_cross_compile_uses_the_default_sizes_without_allocating_them():
    # The KernelBench ReLU's default input is 4096 x 393216 fp32 (6 GB): the launch at those
    # sizes is recorded on storage-less tensors, then compiled for the target.
    options = EvalOptions(device="cpu", n_seeds=1, timeout_s=120, targets=["h100"], distributions=False)
    result = evaluate(RELU, CANDIDATES / "relu_kernelbench_solution.py", options)
    assert result.passed, result.reason
    compile_stage = result.stage("compile")
    assert compile_stage is not None and "batch_size=4096, dim=393216" in compile_stage.message
    (kernel,) = result.kernels
    assert kernel.target == "h100" and kernel.ok and kernel.registers > 0


def test_a_path_past_a_size_threshold_is_tried_and_the_threshold_named():
    """A candidate that takes another path past 8192 columns meets a trial past it, and the
    rejection names the comparison and its line; a candidate without thresholds gets no such set."""
    result = evaluate("softmax", CANDIDATES / "rt4_thresh_softmax_wide_split.py", CPU)
    assert result.rejection is RejectionClass.SHAPE_SPECIALISATION, result.reason
    assert "line 49 of the candidate: `n_cols > 8192`" in result.reason
    assert result.trials[-1].sizes == {"ROWS": 3, "COLS": 12287}


def test_the_timeline_accounts_for_the_evaluation_in_order():
    options = EvalOptions(device="cpu", n_seeds=2, timeout_s=120, distributions=False)
    result = evaluate(RELU, CANDIDATES / "relu_kernelbench_solution.py", options)
    assert result.passed, result.reason
    timeline = result.timeline
    top = [s.name for s in timeline.top_level()]
    # every stage has its span, also those with nothing to do (no targets, no training check, no timing)
    assert top[:16] == ["setup", "take_spare", "size_plan", "request", "cold_start", "startup", "open_context",
                        "static", "load", "correctness", "compile", "train_check", "timing", "report", "exit",
                        "read_report"]
    assert set(top[16:]) <= {"other"}
    # the top-level spans follow each other: none overlaps the next
    spans = timeline.top_level()
    assert all(a.end <= b.start + 0.05 for a, b in zip(spans, spans[1:], strict=False) if b.name != "other")
    assert timeline.accounted_s() >= 0.9 * result.seconds
    assert sum(s.seconds for s in spans) == pytest.approx(result.seconds, rel=0.01)
    nested = [s.name for s in timeline.spans if not s.top_level]
    assert nested.count("correctness.trial") == len(result.trials)
    assert nested[0] == "correctness.plan" and nested[-5:] == [
        "correctness.ghost_check", "correctness.input_sensitivity", "correctness.call_sequence",
        "correctness.cache_probe", "correctness.race_check"]
    assert not any(s.gpu for s in timeline.spans)  # nothing keeps a GPU busy on the CPU
    assert timeline.gpu_busy_fraction() == 0.0


class _Captured(Exception):
    """Raised by the stand-in for the child, once it has read the request."""


@pytest.mark.parametrize("rank_against_ms", [0.25, None])
def test_the_best_candidates_median_reaches_the_childs_request(monkeypatch, rank_against_ms):
    """``EvalOptions.rank_against_ms`` is what the child's timing stage ranks the candidate
    against (``timing/stopping.py``); the request carries it unchanged, None included."""
    from kgen.evals import harness
    from kgen.evals.verifier.messages import ChildRequest

    seen = {}

    def child(module, args, *_, **__):
        seen["request"] = ChildRequest.model_validate_json(Path(args[0]).read_text())
        raise _Captured

    monkeypatch.setattr(harness, "run_python_module", child)
    options = CPU.model_copy(update={"rank_against_ms": rank_against_ms, "bench": True})
    with pytest.raises(_Captured):
        evaluate(RELU, CANDIDATES / "relu_kernelbench_solution.py", options)
    assert seen["request"].rank_against_ms == rank_against_ms and seen["request"].bench
