"""`kgen.train_check.check`: stock noise, correct kernels agree, planted bad kernels are caught
(by the loss curve, the drift, or each kernel's calls judged on the run's own tensors).

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


#: (problem, fixture): correct kernels in designs unlike the seeds'; each must agree
CORRECT = [
    ("embedding_backward", "train_check_embedding_bwd_reversed_fp32_ok.py"),  # tokens last to first, fp32
    ("embedding_backward", "train_check_embedding_bwd_sorted_torch_ok.py"),  # sorted runs summed in fp64
    ("cross_entropy_forward", "train_check_cross_entropy_fwd_two_pass_ok.py"),  # max pass, then sum pass
]

#: (problem, fixture, the loss curve must show it too): planted bad kernels, each must disagree and be
#: named on the run's own tensors
PLANTED = [
    # the seeds' lesson: a hot row's running sum in bf16; the loss curve does not show it at this size
    ("embedding_backward", "redteam_embedding_bwd_bf16_accumulation.py", False),
    ("rmsnorm_backward", "train_check_rmsnorm_bwd_dropped_mean_term.py", True),  # omitted math
    # a bf16 sum of exps: its loss gap sits at the band's edge (outside here, inside in a CI run)
    ("cross_entropy_forward", "train_check_cross_entropy_fwd_bf16_sum.py", False),
    ("swiglu", "train_check_swiglu_hard_sigmoid.py", False),  # another activation
]


@pytest.mark.slow
@pytest.mark.parametrize(("problem", "fixture"), CORRECT, ids=[f for _, f in CORRECT])
def test_unusual_but_correct_kernels_agree(tmp_path: Path, problem: str, fixture: str) -> None:
    kernels = _kernels(tmp_path, problem, fixture)
    result = run_check(kernels=kernels, steps=STEPS, size=SIZE)
    assert result.verdict == "agree", result.reason
    assert any(str(kernels) in k for s in result.swaps for k in s.kernels)
    assert {op.problem for op in result.ops} >= {problem} and all(op.ok for op in result.ops)


@pytest.mark.slow
@pytest.mark.parametrize(("problem", "fixture", "in_the_loss"), PLANTED, ids=[f for _, f, _ in PLANTED])
def test_planted_bad_kernels_are_caught(tmp_path: Path, problem: str, fixture: str, in_the_loss: bool) -> None:
    result = run_check(kernels=_kernels(tmp_path, problem, fixture), steps=STEPS, size=SIZE)
    assert result.verdict == "disagree", result.reason
    failed = [op for op in result.ops if not op.ok]
    assert failed and {op.problem for op in failed} == {problem}, result.reason
    assert f"{problem} on the run's own tensors" in result.reason
    if in_the_loss:
        assert result.steps_outside, "the loss curve used to show this one too"


def test_a_kernel_that_cannot_run_is_inconclusive_never_caught(tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "swiglu.py").write_text(
        "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, gate, up):\n"
        "        raise RuntimeError('no device here')\n")
    result = run_check(kernels=folder, steps=2, size=SIZE)
    assert result.verdict == "inconclusive"
    assert "no device here" in result.reason


@pytest.mark.slow
def test_the_fused_seams_swapped_in_agree_and_every_kernel_call_is_judged() -> None:
    result = run_check(steps=STEPS, size=SIZE, fused=True)
    assert result.verdict == "agree", result.reason
    judged = {op.problem for op in result.ops}
    assert judged >= {"fused_add_rmsnorm_forward", "fused_add_rmsnorm_backward", "fused_linear_cross_entropy"}
    assert "cross_entropy_forward" not in judged  # the fused LM head serves the loss
    assert any("residual add" in s.replaced for s in result.swaps)


#: (problem, fixture): planted bad fused kernels; train-check with the fused seams must name each
PLANTED_FUSED = [
    ("fused_add_rmsnorm_backward", "rt5_addrms_bwd_ignores_grad_residual_out.py"),  # the stream's gradient lost
    ("fused_linear_cross_entropy", "rt5_flce_grads_of_sum.py"),  # gradients of the summed loss, N times too large
]


@pytest.mark.slow
@pytest.mark.parametrize(("problem", "fixture"), PLANTED_FUSED, ids=[f for _, f in PLANTED_FUSED])
def test_planted_bad_fused_kernels_are_caught(tmp_path: Path, problem: str, fixture: str) -> None:
    result = run_check(kernels=_kernels(tmp_path, problem, fixture), steps=STEPS, size=SIZE, fused=True)
    assert result.verdict == "disagree", result.reason
    assert f"{problem} on the run's own tensors" in result.reason
