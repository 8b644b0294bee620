"""A candidate's bench and the baseline job's figures, made one ``BenchResult``.

The verifier's timing stage times only the candidate (and the device's ceilings for the speed-of-light floor); eager PyTorch, ``torch.compile``, Liger and quack
come from the trusted baseline job (``baselines/job.py``). :func:`merge_baselines` puts them
where the timing stage used to, so ``BenchResult.speedup``, the SOL score against eager, the
report and the knowledge base read them unchanged. Figures from another GPU or other sizes
are never compared with the candidate: the bench then says why they are missing.
"""

from __future__ import annotations

from kgen.evals.baselines.messages import BaselineFigures
from kgen.evals.timing.bench_result import BenchResult
from kgen.evals.timing.sol import SpeedOfLight, with_measurement

#: How each origin of the figures reads in a bench (``BenchResult.baselines``).
ORIGIN_TEXT = {
    "measured": "baselines measured by the baseline job",
    "reused": "baselines reused from the baseline store",
    "remeasured_after_drift": "baselines measured again by the baseline job: the stored ones had drifted",
    "not_measured": "baselines not measured",
}


def _mismatch(bench: BenchResult, figures: BaselineFigures) -> str | None:
    """Why the figures cannot stand beside this candidate's time (None: they can)."""
    if figures.device_name and bench.device_name and figures.device_name != bench.device_name:
        return (f"baselines timed on {figures.device_name}, the candidate on {bench.device_name}: "
                "not compared")
    if figures.sizes and bench.sizes and figures.sizes != bench.sizes:
        return f"baselines timed at other sizes ({figures.sizes}) than the candidate ({bench.sizes}): not compared"
    return None


def _origin(figures: BaselineFigures) -> str:
    text = ORIGIN_TEXT[figures.origin]
    return f"{text} ({figures.recheck})" if figures.recheck else text


def merge_baselines(bench: BenchResult, figures: BaselineFigures) -> BenchResult:
    """``bench`` with the job's baselines in its measurements, the job's notes in its errors
    (a baseline not measured, drift, the store's notes; the job's shared-GPU line under
    "baselines shared_gpu"), and its SOL score taken against the eager figure. A copy:
    ``bench`` itself is left as it was."""
    out = bench.model_copy(deep=True)
    mismatch = _mismatch(bench, figures)
    if mismatch is not None:
        out.errors["baselines"] = mismatch
        out.baselines = ORIGIN_TEXT["not_measured"]
        return out
    for name, measurement in figures.measurements.items():
        if name != "candidate":
            out.measurements[name] = measurement.model_copy(deep=True)
    for key, why in figures.errors.items():
        out.errors["baselines shared_gpu" if key == "shared_gpu" else key] = why
    out.baselines = _origin(figures)
    out.baseline_versions = dict(figures.versions)
    eager_ms = out.median("eager")
    if out.sol is not None and eager_ms is not None:
        sol = SpeedOfLight.model_validate(out.sol)
        if sol.kernel_ms is not None:
            out.sol = with_measurement(sol, sol.kernel_ms, baseline_ms=eager_ms).model_dump()
    return out
