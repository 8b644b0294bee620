"""Library baselines: a clear reason when one cannot be timed, never a silent gap; wired ops
compute the problem's operation."""

import importlib.util

import pytest
import torch

from kgen.evals.baselines.library import (
    LIBRARIES,
    BaselineUnavailable,
    library_baseline,
    library_problems,
    problem_eps,
)
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem


def _problem(name):
    info = resolve_problem(name)
    return load_problem(info.path, info.cpu_sizes())


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_problem_without_a_library_op_says_so(library):
    label = LIBRARIES[library][0]
    with pytest.raises(BaselineUnavailable, match=f"no {label} baseline wired for gemm_bias_gelu"):
        library_baseline(library, _problem("gemm_bias_gelu"))


def test_an_op_left_unwired_on_purpose_says_why():
    with pytest.raises(BaselineUnavailable, match="fuses the backward into the forward"):
        library_baseline("liger", _problem("cross_entropy_forward"))


def test_each_library_serves_the_norms_and_losses_it_has():
    assert {"rmsnorm_forward", "rmsnorm_backward", "layernorm_forward", "layernorm_backward"} <= set(
        library_problems("liger"))
    assert {"rmsnorm_forward", "rmsnorm_backward", "layernorm_forward", "layernorm_backward",
            "cross_entropy_forward", "cross_entropy_backward", "softmax"} <= set(library_problems("quack"))
    assert "cross_entropy_forward" not in library_problems("liger")


def test_epsilon_comes_from_the_problem():
    assert problem_eps(_problem("layernorm_forward"), 0.5) == 1e-5
    assert problem_eps(_problem("rmsnorm_backward"), 0.5) == 1e-6
    assert problem_eps(_problem("softmax"), 0.5) == 0.5


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is not None, reason="liger-kernel is installed here")
def test_missing_liger_is_reported_not_hidden():
    with pytest.raises(BaselineUnavailable, match="liger-kernel is not installed"):
        library_baseline("liger", _problem("rmsnorm_backward"))


@pytest.mark.skipif(importlib.util.find_spec("quack") is not None, reason="quack-kernels is installed here")
def test_missing_quack_is_reported_not_hidden():
    with pytest.raises(BaselineUnavailable, match="quack-kernels is not installed"):
        library_baseline("quack", _problem("layernorm_backward"))


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger-kernel is not installed here")
def test_liger_layernorm_backward_computes_the_problems_gradients():
    """Liger's backward is called with the problem's saved mean and rstd (and the weight in the
    bias's place, read only for its dtype): its three gradients match the fp64 reference."""
    problem = _problem("layernorm_backward")
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    reference = problem.model_class()(*[t.double() for t in inputs])
    got = library_baseline("liger", problem)(*inputs)
    for ours, ref in zip(got, reference, strict=True):
        assert ((ours.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="liger-kernel is not installed here")
def test_liger_rope_computes_the_problems_rotation_and_leaves_x_alone():
    """Liger rotates in place: it works on a private copy, so the problem's x is unchanged
    (later calls rotate the copy again: the same work, timed only)."""
    problem = _problem("rope_forward")
    torch.manual_seed(0)
    x, cos, sin = problem.get_inputs()
    before = x.clone()
    run = library_baseline("liger", problem)
    reference = problem.model_class()(x.double(), cos.double(), sin.double())
    first = run(x, cos, sin).clone()
    assert torch.equal(x, before)
    assert first.shape == x.shape
    assert ((first.double() - reference).norm() / reference.norm()).item() < 1e-2
    assert "rope_forward" in library_problems("liger")
