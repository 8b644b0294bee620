"""Out of memory is never a rejection: whose allocation failed decides the cause.

Real candidate files through the real harness on the CPU, where the host allocator's
failure (``DefaultCPUAllocator: can't allocate memory``) stands in for a device OOM: the
candidate's own allocation is ``candidate_oom``, kgen's (the reference's) is ``harness_oom``.
A candidate that merely uses scratch memory passes, and every result carries its memory report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import InconclusiveCause, Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
SOLUTION = (FIXTURES / "candidates" / "relu_kernelbench_solution.py").read_text()
CPU = EvalOptions(device="cpu", n_seeds=1, distributions=False, timeout_s=240)
TOO_MUCH = "2 ** 50"

#: the same correct kernel, with an impossible allocation placed as different models place scratch
CANDIDATE_OOM = {
    "scratch in forward": SOLUTION.replace(
        "    return triton_relu(x)", f"    scratch = torch.empty({TOO_MUCH}, dtype=torch.uint8)\n        return triton_relu(x)"
    ),
    "workspace in __init__": SOLUTION.replace(
        "super(ModelNew, self).__init__()",
        f"super(ModelNew, self).__init__()\n        self.workspace = torch.zeros({TOO_MUCH}, dtype=torch.uint8)",
    ),
    "new_empty beside the output": SOLUTION.replace(
        "    out = torch.empty_like(x)", f"    out = torch.empty_like(x)\n    pad = x.new_empty(({TOO_MUCH},), dtype=torch.uint8)"
    ),
}
#: scratch that fits is fine
CORRECT_WITH_SCRATCH = {
    "a 1 MB workspace": SOLUTION.replace(
        "    return triton_relu(x)", "    scratch = torch.empty(1 << 20, dtype=torch.uint8)\n        return triton_relu(x)"
    ),
}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    assert text != SOLUTION, f"{name}: the fixture's anchor moved"
    path = tmp_path / "candidate.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(CANDIDATE_OOM))
def test_a_candidate_that_exhausts_memory_is_candidate_oom_not_rejected(tmp_path, name):
    result = evaluate(RELU, _write(tmp_path, name, CANDIDATE_OOM[name]), CPU)
    assert result.verdict is Verdict.INCONCLUSIVE, (result.verdict, result.reason)
    assert result.inconclusive is InconclusiveCause.CANDIDATE_OOM, result.reason
    assert "candidate's own allocation" in result.reason and result.exit_code == 3


@pytest.mark.parametrize("name", sorted(CORRECT_WITH_SCRATCH))
def test_a_candidate_with_scratch_that_fits_passes_with_a_memory_report(tmp_path, name):
    result = evaluate(RELU, _write(tmp_path, name, CORRECT_WITH_SCRATCH[name]), CPU)
    assert result.verdict is Verdict.PASSED, result.reason
    assert result.memory is not None and result.memory.peak_bytes is None
    assert "not measured on the CPU" in result.memory.describe()


def test_a_reference_that_exhausts_memory_is_harness_oom(tmp_path):
    problem = tmp_path / "relu_big_reference.py"
    problem.write_text(RELU.read_text().replace(
        "        return torch.relu(x)",
        f"        workspace = torch.empty({TOO_MUCH}, dtype=torch.uint8)  # kgen's side of the trial\n"
        "        return torch.relu(x)",
    ))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(SOLUTION)
    result = evaluate(problem, candidate, CPU)
    assert result.verdict is Verdict.INCONCLUSIVE, (result.verdict, result.reason)
    assert result.inconclusive is InconclusiveCause.HARNESS_OOM, result.reason
    assert "not the candidate's fault" in result.reason
