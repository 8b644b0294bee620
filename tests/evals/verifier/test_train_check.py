"""The training check: correct gradient kernels train like the reference, bf16 accumulation does not.

The Triton kernels run in the CPU interpreter (tests/conftest.py sets TRITON_INTERPRET=1);
each training run with a Triton kernel takes ~10-30 s there.
"""

from pathlib import Path

import pytest
import torch

from kgen.backends.module_loading import load_module_from_file
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem
from kgen.evals.verifier.train_check import (
    TRAINING_PROBLEMS,
    default_config,
    load_train_problem,
    loss_gap,
    run_train_check,
    train_check,
)

ROOT = Path(__file__).resolve().parents[3]
SEEDS = ROOT / "knowledge_base" / "seed_kernels" / "triton"
BAD_EMBEDDING = ROOT / "tests" / "fixtures" / "candidates" / "redteam_embedding_bwd_bf16_accumulation.py"
CPU = torch.device("cpu")


def _models(problem_name: str, candidate_file: Path):
    problem = load_train_problem(resolve_problem(problem_name), CPU)
    init = problem.get_init_inputs()
    module = load_module_from_file(candidate_file)
    return problem, module.ModelNew(*init), problem.model_class(*init)


def _assert_trained(result):
    assert result.applicable
    assert len(result.reference_losses) == result.steps == len(result.candidate_losses)
    # the loss really falls: the check compares trainings, not two flat lines
    assert result.reference_losses[-1] < 0.6 * result.reference_losses[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("problem_name", "seed_file"),
    [("embedding_backward", "embedding_backward.py"), ("rmsnorm_backward", "rmsnorm_backward.py")],
)
def test_fp32_accumulating_seed_kernel_trains_like_the_reference(problem_name, seed_file):
    problem, candidate, reference = _models(problem_name, SEEDS / seed_file)
    result = train_check(problem, candidate, reference, CPU, seed=0)
    _assert_trained(result)
    assert result.passed, result.message
    assert result.max_relative_gap <= result.bound
    assert result.message.startswith("training matches the reference")


@pytest.mark.slow
def test_bf16_accumulating_embedding_backward_fails_with_training_divergence():
    problem, candidate, reference = _models("embedding_backward", BAD_EMBEDDING)
    result = train_check(problem, candidate, reference, CPU, seed=1)
    _assert_trained(result)
    assert not result.passed
    assert result.message.startswith("training divergence")
    # not a close call: measured gaps are 10x the bound and more under the interpreter
    assert result.max_relative_gap > 5 * result.bound
    assert "\n" not in result.message


def test_forward_problem_is_not_applicable():
    info = resolve_problem("softmax")
    problem = load_problem(info.path, info.cpu_sizes())
    model = problem.model_class(*problem.get_init_inputs())
    result = train_check(problem, model, model, CPU)
    assert not result.applicable
    assert result.message.startswith("no training check for softmax (forward problem)")
    assert run_train_check(info, problem.model_class, CPU).applicable is False


# -- fast checks with torch stand-ins (no interpreter) -----------------------------------------


class _FusedBf16Accumulation(torch.nn.Module):
    """The SOL-ExecBench bug in torch: fused embedding+RMSNorm backward summing rows in bf16."""

    def forward(self, grad_out, ids, emb_weight, norm_weight, rstd):
        g, w = grad_out.float(), norm_weight.float()
        x_hat = emb_weight[ids].float() * rstd.unsqueeze(-1)
        gw = g * w
        grad_x = rstd.unsqueeze(-1) * (gw - x_hat * (gw * x_hat).mean(dim=-1, keepdim=True))
        acc = torch.zeros(emb_weight.shape, dtype=torch.bfloat16)
        for t in range(ids.shape[0]):
            acc[ids[t]] = (acc[ids[t]].float() + grad_x[t]).to(torch.bfloat16)
        return acc.float(), (g * x_hat).sum(dim=0)


def test_every_registered_problem_exists_and_reference_matches_itself():
    for name in TRAINING_PROBLEMS:
        problem = load_train_problem(resolve_problem(name), CPU)
        init = problem.get_init_inputs()
        result = train_check(problem, problem.model_class(*init), problem.model_class(*init), CPU)
        assert result.passed and result.max_relative_gap == 0.0, (name, result.message)
        _assert_trained(result)


def test_fused_bf16_accumulation_fails():
    problem = load_train_problem(resolve_problem("fused_embedding_rmsnorm_backward"), CPU)
    result = train_check(problem, _FusedBf16Accumulation(), problem.model_class(), CPU, seed=2)
    assert not result.passed
    assert result.message.startswith("training divergence")


class _Raises(torch.nn.Module):
    def forward(self, *args):
        raise RuntimeError("boom")


class _NaN(torch.nn.Module):
    def forward(self, grad_out, x, weight, rstd):
        return torch.full_like(x, float("nan")), torch.zeros_like(weight)


def test_candidate_errors_fail_the_check_with_a_reason():
    emb = load_train_problem(resolve_problem("embedding_backward"), CPU)
    raised = train_check(emb, _Raises(), emb.model_class(*emb.get_init_inputs()), CPU)
    assert not raised.passed and "forward raised RuntimeError at training step 0: boom" in raised.message
    rms = load_train_problem(resolve_problem("rmsnorm_backward"), CPU)
    nan = train_check(rms, _NaN(), rms.model_class(), CPU)
    assert not nan.passed and "grad_x has NaN/Inf values at training step 0" in nan.message


def test_defaults_depend_on_the_device_and_steps_override():
    cpu, gpu = default_config("embedding_backward", "cpu"), default_config("embedding_backward", "cuda")
    assert gpu.tokens * gpu.steps > 50 * cpu.tokens * cpu.steps
    problem = load_train_problem(resolve_problem("rmsnorm_backward"), CPU)
    result = train_check(problem, problem.model_class(), problem.model_class(), CPU, steps=2)
    assert result.steps == 2 and len(result.candidate_losses) == 2


def test_loss_gap_is_relative_smoothed_and_nan_is_infinite():
    assert loss_gap([2.0, 1.0], [2.0, 1.1]) == pytest.approx((0.1, 1))
    assert loss_gap([2.0, 1.0], [2.0, 1.2], window=2) == pytest.approx((0.1 / 1.5, 1))
    assert loss_gap([1.0], [float("nan")])[0] == float("inf")
