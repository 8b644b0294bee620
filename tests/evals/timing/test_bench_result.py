"""The typed bench: stored dicts still load, and a speedup is claimed only when the timings'
intervals are disjoint."""

from __future__ import annotations

from kgen.evals.result import EvalResult
from kgen.evals.timing.bench_result import BenchResult, Measurement, speedup_between
from kgen.evals.verdict import Verdict

OLD_DICT = {
    "device_name": "NVIDIA H100 80GB HBM3", "sizes": {"n_rows": 16384, "n_cols": 4096},
    "measurements": {
        "candidate": {"median_ms": 0.1702, "mean_ms": 0.171, "min_ms": 0.168, "p10_ms": 0.169, "p90_ms": 0.173,
                      "trials": 500, "warmup": 10, "input_sets": 3, "l2_flush_bytes": 1, "flags": []},
        "eager": {"median_ms": 0.52, "p10_ms": 0.51, "p90_ms": 0.53, "trials": 200, "flags": []},
        "torch.compile": {"median_ms": 0.172, "p10_ms": 0.170, "p90_ms": 0.175, "trials": 200, "flags": []},
    },
    "errors": {"liger": "not measured: liger_kernel is not installed"},
    "sol": {"pct_of_sol": 78.0, "achieved_tbs": 2.36, "bound": "memory"},
}


def test_a_result_stored_with_the_old_dict_loads_into_the_model():
    result = EvalResult(problem="p", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                        verdict=Verdict.PASSED, bench=OLD_DICT)
    again = EvalResult.model_validate_json(result.model_dump_json())
    assert isinstance(again.bench, BenchResult)
    assert again.bench.median("candidate") == 0.1702 and again.bench.measurements["candidate"].input_sets == 3
    assert again.bench.sol_value("pct_of_sol") == 78.0 and again.bench.errors["liger"].startswith("not measured")


def test_a_speedup_is_claimed_only_when_the_intervals_are_disjoint():
    bench = BenchResult.model_validate(OLD_DICT)
    eager = bench.speedup("eager")
    assert eager.claimed and eager.text == f"{0.52 / 0.1702:.2f}x vs eager"
    compiled = bench.speedup("torch.compile")
    assert not compiled.claimed and compiled.text.startswith("≈ same speed as torch.compile (1.01x")
    assert bench.speedup("liger") is None


def test_slower_with_disjoint_intervals_is_claimed_too():
    fast = Measurement(median_ms=1.0, p10_ms=0.95, p90_ms=1.05)
    slow = Measurement(median_ms=2.0, p10_ms=1.9, p90_ms=2.1)
    assert speedup_between(slow, fast, "eager").claimed and speedup_between(slow, fast, "eager").ratio == 0.5
    assert speedup_between(fast, slow, "eager").claimed


def test_no_interval_or_no_time_claims_nothing():
    assert not speedup_between(Measurement(median_ms=1.0), Measurement(median_ms=3.0), "eager").claimed
    assert speedup_between(Measurement(median_ms=1.0), Measurement(error="failed"), "eager") is None
    assert speedup_between(Measurement(median_ms=0.0), Measurement(median_ms=1.0), "eager") is None


def test_older_stored_forms_of_a_measurement_still_load():
    bench = BenchResult.model_validate({
        "measurements": {"candidate": 0.25, "eager": "OutOfMemoryError: CUDA out of memory", "torch.compile": {}},
        "errors": {"sol": {"reason": "unknown target"}},
    })
    assert bench.median("candidate") == 0.25 and bench.median("eager") is None
    assert bench.measurements["eager"].error.startswith("OutOfMemoryError")
    assert bench.median("torch.compile") is None and "unknown target" in bench.errors["sol"]
    assert bench.speedup("eager") is None


def test_a_speedup_carries_both_intervals_and_round_trips():
    bench = BenchResult.model_validate(OLD_DICT)
    eager = bench.speedup("eager")
    assert eager.candidate_interval == (0.169, 0.173) and eager.baseline_interval == (0.51, 0.53)
    again = BenchResult.model_validate_json(bench.model_dump_json())
    assert again == bench and again.speedup("torch.compile") == bench.speedup("torch.compile")


def test_the_printed_lines_say_same_speed_and_reuse():
    stored = {**OLD_DICT, "measurements": {**OLD_DICT["measurements"],
                                            "eager": {**OLD_DICT["measurements"]["eager"], "reused": True, "age_s": 42}}}
    lines = BenchResult.model_validate(stored).lines()
    assert any(line.startswith("candidate: 0.1702 ms (p10-p90 0.1690-0.1730), 500 trials") for line in lines)
    assert any("reused (42 s old)" in line for line in lines)
    assert f"{0.52 / 0.1702:.2f}x vs eager" in lines
    assert any(line.startswith("≈ same speed as torch.compile") for line in lines)
    assert "78% of speed-of-light" in lines and any(line.startswith("liger: not measured") for line in lines)


def test_the_eval_printout_shows_the_bench_lines():
    from io import StringIO

    from rich.console import Console

    from kgen.cli.display import print_eval_result

    result = EvalResult(problem="p", problem_path="p.py", candidate="c.py", backend="triton", device="cuda",
                        verdict=Verdict.PASSED, bench=OLD_DICT)
    out = StringIO()
    print_eval_result(result, Console(file=out, width=200))
    text = out.getvalue()
    assert "timing: ≈ same speed as torch.compile" in text and f"timing: {0.52 / 0.1702:.2f}x vs eager" in text
    assert "timing: not measured" not in text
