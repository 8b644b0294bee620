"""Verified-looking knowledge-base entries and results for tests that do not run kernels."""

from __future__ import annotations

from kgen.evals.result import EvalResult
from kgen.evals.verdict import OutputComparison, StageResult, StageStatus, Trial, Verdict
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.schema import (
    KernelEntry,
    Provenance,
    Timing,
    VerificationSummary,
    kernel_id,
    target_family,
)

SOURCE_TEMPLATE = '''"""A test kernel {tag}."""
import torch
import triton
import triton.language as tl


@triton.jit
def _kernel_{tag}(x_ptr, BLOCK: tl.constexpr):
    pass


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * {tag}
'''


def make_entry(
    tag: int,
    *,
    problem: str = "rmsnorm_backward",
    target: str = "h100",
    dtype: str = "bfloat16",
    backend: str = "triton",
    time_ms: float | None = 1.0,
    model: str = "openai:gpt-5",
    created: str = "2026-11-01T00:00:00+00:00",
) -> KernelEntry:
    """A verified-looking entry with distinct code per tag (store tests do not run kernels)."""
    source = SOURCE_TEMPLATE.format(tag=tag)
    code_hash = normalised_code_hash(source)
    return KernelEntry(
        id=kernel_id(code_hash, problem, backend, target, dtype),
        source=source,
        spec_text=f"{problem.replace('_', ' ')} for {target}",
        problem=problem,
        operation=problem.replace("_", " "),
        backend=backend,
        target=target,
        target_family=target_family(target),
        dtype=dtype,
        shapes={"ROWS": 128, "HIDDEN": 64},
        evidence=VerificationSummary(
            device="cuda", seeds=[1, 2], shapes=[{"ROWS": 128, "HIDDEN": 64}],
            distributions=["normal", "x64"], checks_passed=["static", "load", "correctness"],
            trials=4, max_rel_l2_error=1e-3, compiled_for=[target], kgen_version="0.1.0",
        ),
        timing=Timing(device_name="NVIDIA H100 80GB HBM3", time_ms=time_ms, eager_ms=2.0,
                      compile_ms=1.5, speedup_vs_eager=None if time_ms is None else 2.0 / time_ms,
                      speedup_vs_compile=None if time_ms is None else 1.5 / time_ms, pct_of_sol=50.0),
        provenance=Provenance(model=model, run_id="run-1", parent_ids=["k-parent"], generation=2,
                              created=created),
        code_hash=code_hash,
    )


def passed_result(problem: str = "rmsnorm_backward", **changes) -> EvalResult:
    """An EvalResult shaped like a passing CPU verification."""
    trial = Trial(
        seed=7, sizes={"ROWS": 37, "HIDDEN": 96}, distribution="normal", launches=2, passed=True,
        outputs=[OutputComparison(index=0, shape=[37, 96], dtype="torch.bfloat16", rel_l2_error=3e-3,
                                  max_abs_error=0.01, mismatched_fraction=0.0, tolerance_rel_l2=1e-2,
                                  passed=True)],
    )
    result = EvalResult(
        problem=problem, problem_path=f"{problem}.py", candidate="cand.py", backend="triton",
        device="cpu", targets=["h100"], verdict=Verdict.PASSED,
        stages=[StageResult(name=n, status=StageStatus.PASSED) for n in ("static", "load", "correctness")],
        trials=[trial, trial.model_copy(update={"seed": 8, "distribution": "x64"})],
        kgen_version="0.1.0",
    )
    return result.model_copy(update=changes)
