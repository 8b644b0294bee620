"""First GPU check of kgen's timing: ceilings, repeatability, and baselines for RMSNorm backward.

Usage (GPU machine, kgen installed): python scripts/gpu_timing_check.py
Times the shipped RMSNorm-backward seed kernel twice, PyTorch eager and torch.compile
of the problem's reference at its default sizes (bf16 16384 x 4096), with kgen's
own timing (events, L2 flush, rotated inputs), and measures the device ceilings.
The deferred-work check is calibrated on the eager reference, as the verifier does;
each row shows its figures (the synced windows' hidden time against their threshold,
and the timed loops' unaccounted wall time per call), and each speedup over eager
says whether it is claimed (p10-p90 intervals disjoint) or the same speed.
"""

from __future__ import annotations

import torch

from kgen.backends.module_loading import load_module_from_file
from kgen.backends.targets import resolve_target
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem
from kgen.evals.timing.bench_result import Measurement, speedup_between
from kgen.evals.timing.measure import (
    calibrate_sync,
    measure_copy_bandwidth,
    measure_matmul_tflops,
    time_on_gpu,
)
from kgen.evals.timing.sol import speed_of_light, with_measurement
from kgen.knowledge_base import SEED_KERNELS_DIR


def main() -> None:
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    copy_tbs = measure_copy_bandwidth()
    matmul = measure_matmul_tflops()
    print(f"copy bandwidth {copy_tbs:.3f} TB/s (read + write); bf16 8192^3 matmul {matmul:.0f} TFLOP/s")
    info = resolve_problem("rmsnorm_backward")
    problem = load_problem(info.path, info.sizes)
    torch.manual_seed(0)
    input_sets = [[t.cuda() for t in problem.get_inputs()] for _ in range(4)]
    reference = problem.model_class().cuda()
    seed = load_module_from_file(SEED_KERNELS_DIR / "triton" / "rmsnorm_backward.py").ModelNew().cuda()
    compiled = torch.compile(reference)
    sol = speed_of_light(problem.bytes_moved(), problem.flops(), resolve_target("h100"), torch.bfloat16,
                         measured_bandwidth_tbs=copy_tbs)
    with torch.no_grad():
        calibration = calibrate_sync(reference, input_sets, "eager reference")
        print(f"calibration on the eager reference: hidden p10/median/p90 {calibration.hidden_p10_ms:.4f}/"
              f"{calibration.hidden_median_ms:.4f}/{calibration.hidden_p90_ms:.4f} ms, "
              f"bare-sync spread {calibration.bare_spread_ms:.4f} ms over {calibration.windows} windows")
        rows = {}
        for name, fn in (("triton seed", seed), ("triton seed again", seed), ("eager", reference),
                         ("torch.compile", compiled)):
            rows[name] = time_on_gpu(fn, input_sets, budget_s=2.0, calibration=calibration)
    eager_ms = rows["eager"].median_ms
    print(f"{'implementation':20s} {'median ms':>10s} {'p10':>8s} {'p90':>8s} {'trials':>6s} {'TB/s':>6s} "
          f"{'%SOL':>6s} {'sync ratio':>10s} {'hidden ms':>10s} {'limit ms':>9s} {'loop ms':>8s} flags")
    for name, r in rows.items():
        m = with_measurement(sol, r.median_ms, baseline_ms=eager_ms)
        ratio = f"{r.sync_ratio:.2f}" if r.sync_ratio is not None else "-"
        hidden = f"{max(r.sync_hidden_ms):.4f}" if r.sync_hidden_ms else "-"
        limit = f"{r.sync_threshold_ms:.4f}" if r.sync_threshold_ms is not None else "-"
        loop = f"{max(r.loop_unaccounted_ms):.4f}" if r.loop_unaccounted_ms else "-"
        print(f"{name:20s} {r.median_ms:10.4f} {r.p10_ms:8.4f} {r.p90_ms:8.4f} {r.trials:6d} "
              f"{m.achieved_tbs:6.2f} {m.pct_of_sol:6.1f} {ratio:>10s} {hidden:>10s} {limit:>9s} {loop:>8s} "
              f"{'; '.join(r.flags) or '-'}")
    eager = Measurement.model_validate(rows["eager"].model_dump())
    for name in ("triton seed", "triton seed again", "torch.compile"):
        speedup = speedup_between(Measurement.model_validate(rows[name].model_dump()), eager, "eager")
        print(f"{name}: {speedup.text if speedup else 'no speedup (not measured)'}")
    a, b = rows["triton seed"].median_ms, rows["triton seed again"].median_ms
    print(f"repeatability: two timings of the seed kernel differ by {abs(a - b) / min(a, b) * 100:.2f}%")


if __name__ == "__main__":
    main()
