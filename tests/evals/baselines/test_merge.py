"""The job's baselines in the candidate's bench: speedups, the SOL score against eager and the
terminal lines read them as they read baselines the verifier timed; figures from another GPU
or other sizes are never compared."""

from __future__ import annotations

import pytest
import torch

from kgen.backends.targets import resolve_target
from kgen.evals.baselines.merge import merge_baselines
from kgen.evals.baselines.messages import BaselineFigures
from kgen.evals.timing.bench_result import BenchResult, Measurement
from kgen.evals.timing.sol import speed_of_light, with_measurement

H100 = "NVIDIA H100 80GB HBM3"
SIZES = {"n_rows": 16384, "n_cols": 4096}


def _bench() -> BenchResult:
    sol = speed_of_light(2 * 16384 * 4096 * 4, None, resolve_target("h100"), torch.float32)
    return BenchResult(
        device_name=H100, sizes=SIZES,
        measurements={"candidate": Measurement(median_ms=0.17, p10_ms=0.169, p90_ms=0.173, trials=500)},
        errors={"shared_gpu": "shared GPU: 1 other process(es)"},
        sol=with_measurement(sol, 0.17).model_dump(),
    )


def _figures(**fields) -> BaselineFigures:
    return BaselineFigures(**{
        "device_name": H100, "sizes": SIZES, "origin": "reused", "finished": True,
        "recheck": "eager re-checked: median 0.5150 ms against the stored 0.5200 ms",
        "measurements": {
            "eager": Measurement(median_ms=0.52, p10_ms=0.51, p90_ms=0.53, trials=200, reused=True, age_s=86400.0),
            "torch.compile": Measurement(median_ms=0.172, p10_ms=0.170, p90_ms=0.175, trials=200, reused=True,
                                         age_s=86400.0),
        },
        "errors": {"liger": "not measured: liger-kernel is not installed", "shared_gpu": "shared GPU: job"},
        **fields,
    })


def test_the_baselines_join_the_candidate_and_speedups_read_them():
    bench = _bench()
    merged = merge_baselines(bench, _figures())
    assert set(merged.measurements) == {"candidate", "eager", "torch.compile"}
    assert merged.speedup("eager").claimed and merged.speedup("eager").ratio == pytest.approx(0.52 / 0.17)
    assert not merged.speedup("torch.compile").claimed
    assert merged.errors["liger"] == "not measured: liger-kernel is not installed"
    assert merged.errors["shared_gpu"] == "shared GPU: 1 other process(es)"  # the candidate's own, kept
    assert merged.errors["baselines shared_gpu"] == "shared GPU: job"
    assert merged.baselines.startswith("baselines reused from the baseline store (eager re-checked")
    assert any(line.endswith("reused (86400 s old)") for line in merged.lines())
    assert bench.measurements.keys() == {"candidate"} and bench.baselines is None  # the input is untouched


def test_the_sol_score_is_taken_against_the_job_s_eager():
    bench = _bench()
    assert bench.sol["score"] is None and bench.sol["baseline_ms"] is None
    merged = merge_baselines(bench, _figures())
    floor = merged.sol["floor_ms"]
    assert merged.sol["baseline_ms"] == 0.52
    assert merged.sol["score"] == pytest.approx(1 / (1 + (0.17 - floor) / (0.52 - floor)))
    assert merged.sol["pct_of_sol"] == bench.sol["pct_of_sol"]


def test_figures_from_another_gpu_or_other_sizes_are_not_compared():
    for figures in (_figures(device_name="NVIDIA A100-SXM4-80GB"), _figures(sizes={"n_rows": 8, "n_cols": 4096})):
        merged = merge_baselines(_bench(), figures)
        assert set(merged.measurements) == {"candidate"} and "not compared" in merged.errors["baselines"]
        assert merged.speedup("eager") is None and merged.sol["score"] is None


def test_a_failed_job_leaves_notes_and_no_score():
    figures = BaselineFigures(errors={"eager": "not measured: the baseline job died by SIGSEGV"})
    merged = merge_baselines(_bench(), figures)
    assert merged.errors["eager"].endswith("SIGSEGV") and merged.speedup("eager") is None
    assert merged.sol["score"] is None and merged.baselines == "baselines not measured"


def test_a_merged_bench_survives_a_round_trip():
    merged = merge_baselines(_bench(), _figures())
    again = BenchResult.model_validate_json(merged.model_dump_json())
    assert again.measurements["eager"].reused and again.baselines == merged.baselines
