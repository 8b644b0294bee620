"""`kgen.train_check.check`: stock noise, correct kernels agree, planted bad kernels are caught.

The model is smaller than `tiny` (hidden 32, vocab 256, 4 x 32 tokens a step, 6 steps) so each
check (two stock runs, one kernel run in Triton's CPU interpreter) takes ~20 s on two cores."""

import shutil
from pathlib import Path

import pytest

from kgen.train_check.check import run_check, stock_run
from kgen.train_check.model import ModelSize

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "candidates"
SIZE = ModelSize(hidden=32, layers=2, heads=2, intermediate=64, vocab=256, batch=4, seq=32)
STEPS = 6


def _kernels(tmp_path: Path, problem: str, fixture: str) -> Path:
    """A --kernels folder holding one fixture as ``problem``'s kernel (the seeds serve the rest)."""
    folder = tmp_path / "kernels"
    folder.mkdir()
    shutil.copy(FIXTURES / fixture, folder / f"{problem}.py")
    return folder


def test_same_seed_stock_runs_are_identical_and_the_jittered_one_is_not() -> None:
    first = stock_run(SIZE, 3, seed=0, device="cpu")
    second = stock_run(SIZE, 3, seed=0, device="cpu")
    jittered = stock_run(SIZE, 3, seed=0, device="cpu", jitter_seed=1)
    assert first.losses == second.losses
    assert all((first.params[n] == second.params[n]).all() for n in first.params)
    assert jittered.losses != first.losses  # the noise band is measured, not zero


def test_seed_kernels_agree_with_stock() -> None:
    result = run_check(steps=STEPS, size=SIZE)
    assert result.verdict == "agree", result.reason
    assert result.band is not None and result.band.noise[-1] > 0
    assert len(result.kernel) == STEPS and [s.replaced for s in result.swaps][0].endswith("LlamaRMSNorm modules")
    assert all(row.ok for row in result.drift)


def test_unusual_but_correct_embedding_backward_agrees(tmp_path: Path) -> None:
    kernels = _kernels(tmp_path, "embedding_backward", "train_check_embedding_bwd_reversed_fp32_ok.py")
    result = run_check(kernels=kernels, steps=STEPS, size=SIZE)
    assert result.verdict == "agree", result.reason
    assert any(str(kernels) in k for s in result.swaps for k in s.kernels)


def test_rmsnorm_backward_without_its_mean_term_is_caught(tmp_path: Path) -> None:
    kernels = _kernels(tmp_path, "rmsnorm_backward", "train_check_rmsnorm_bwd_dropped_mean_term.py")
    result = run_check(kernels=kernels, steps=STEPS, size=SIZE)
    assert result.verdict == "disagree", result.reason
    assert result.steps_outside


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="not caught at CPU sizes: AdamW's per-element normalisation hides a few "
                                      "percent of error in the hot rows' gradients, and a hot row here sums tens "
                                      "of bf16 contributions, not thousands. Measured with only the embedding "
                                      "backward swapped (tiny size, 6 steps): embedding drift from stock 7.38e-3 "
                                      "in bf16 against 7.46e-3 for an fp32 kernel, loss gaps 1.2e-4 and 1.0e-4")
def test_embedding_backward_accumulating_in_bf16_is_caught(tmp_path: Path) -> None:
    kernels = _kernels(tmp_path, "embedding_backward", "redteam_embedding_bwd_bf16_accumulation.py")
    result = run_check(kernels=kernels, steps=STEPS, size=SIZE)
    assert result.verdict == "disagree", result.reason


def test_a_kernel_that_cannot_run_is_inconclusive_never_caught(tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "swiglu.py").write_text(
        "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, gate, up):\n"
        "        raise RuntimeError('no device here')\n")
    result = run_check(kernels=folder, steps=2, size=SIZE)
    assert result.verdict == "inconclusive"
    assert "no device here" in result.reason
