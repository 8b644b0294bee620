"""The fused add + RMSNorm pair: the backward's explicit gradients are the forward's autograd
gradients, and the backward's inputs are made from the forward's as get_inputs() makes them."""

import pytest
import torch

from kgen.evals.problem.catalog import paired_backward, resolve_problem
from kgen.evals.problem.format import load_problem
from kgen.evals.problem.tolerances import tolerance_for

FORWARD = "fused_add_rmsnorm_forward"
BACKWARD = "fused_add_rmsnorm_backward"


def _loaded(name, **sizes):
    info = resolve_problem(name)
    return load_problem(info.path, sizes or info.cpu_sizes())


def test_the_forward_is_paired_with_the_backward():
    assert paired_backward(resolve_problem(FORWARD)).name == BACKWARD


@pytest.mark.parametrize(("rows", "hidden"), [(37, 96), (5, 1), (1, 300)])
def test_the_backward_reference_is_the_forwards_autograd_in_fp64(rows, hidden):
    fwd, bwd = _loaded(FORWARD), _loaded(BACKWARD)
    (eps,) = fwd.get_init_inputs()
    gen = torch.Generator().manual_seed(rows * 1000 + hidden)
    x = torch.randn(rows, hidden, dtype=torch.float64, generator=gen, requires_grad=True)
    residual = torch.randn(rows, hidden, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = (1.0 + 0.1 * torch.randn(hidden, dtype=torch.float64, generator=gen)).requires_grad_()
    grad_y = torch.randn(rows, hidden, dtype=torch.float64, generator=gen)
    grad_residual_out = torch.randn(rows, hidden, dtype=torch.float64, generator=gen)

    y, residual_out = fwd.model_class(eps)(x, residual, weight)
    expected = torch.autograd.grad((y, residual_out), (x, residual, weight), (grad_y, grad_residual_out))

    s = (x + residual).detach()
    rstd = torch.rsqrt(s.pow(2).mean(dim=-1) + eps)  # fp64 here, so the comparison is exact to rounding
    got = bwd.model_class()(grad_y, grad_residual_out, x.detach(), residual.detach(), weight.detach(), rstd)
    assert len(got) == 3
    for name, g, e in zip(("grad_x", "grad_residual", "grad_weight"), got, expected, strict=True):
        assert g.dtype == torch.float64 and g.shape == e.shape, name
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12, msg=name)
    # equal values, never one tensor: a caller may write into either gradient
    assert got[0].untyped_storage().data_ptr() != got[1].untyped_storage().data_ptr()


def test_backward_inputs_are_made_from_the_forwards_as_get_inputs_makes_them():
    fwd, bwd = _loaded(FORWARD), _loaded(BACKWARD)
    torch.manual_seed(0)
    inputs, init = fwd.get_inputs(), fwd.get_init_inputs()
    y, residual_out = fwd.model_class(*init)(*inputs)
    grads = [torch.randn_like(y), torch.randn_like(residual_out)]
    made = bwd.module.kgen_backward_inputs(grads, inputs, init)
    own = bwd.get_inputs()
    assert [(t.shape, t.dtype) for t in made] == [(t.shape, t.dtype) for t in own]
    x, residual = inputs[0], inputs[1]
    assert made[0] is grads[0] and made[1] is grads[1] and made[2] is x and made[3] is residual
    # rstd: fp32, from the fp32 sum x + residual and the forward's eps (as get_inputs computes it)
    expected = torch.rsqrt((x.float() + residual.float()).pow(2).mean(dim=-1) + init[0])
    assert torch.equal(made[5], expected)
    # a gradient autograd left out (an output nothing used) is zeros
    made = bwd.module.kgen_backward_inputs([None, grads[1]], inputs, init)
    assert made[0].shape == x.shape and not made[0].any()
    out = bwd.model_class()(*made)
    floats = [t for t in inputs if t.is_floating_point()]
    assert [(g.shape, g.dtype) for g in out] == [(t.shape, t.dtype) for t in floats]


def test_normalising_the_rounded_residual_is_within_bf16_tolerance():
    """The docstring's choice: y normalises the unrounded sum, and a kernel that normalises the
    bf16-rounded residual_out instead (an unfused model, vLLM's kernel) stays well inside the
    tolerance, so the verifier must pass both."""
    fwd = _loaded(FORWARD, ROWS=64, HIDDEN=4096)
    torch.manual_seed(0)
    x, residual, weight = fwd.get_inputs()
    (eps,) = fwd.get_init_inputs()
    ref_y, ref_s = fwd.model_class(eps)(x.double(), residual.double(), weight.double())
    s = (x.float() + residual.float()).to(torch.bfloat16).float()  # rounded first
    y = (s * torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(torch.bfloat16)
    tol = tolerance_for(torch.bfloat16)
    error = ((y.double() - ref_y).norm() / ref_y.norm()).item()
    assert error < tol.rel_l2 / 2
    assert ((y.double() - ref_y).abs() <= tol.rtol * ref_y.abs() + tol.atol * ref_y.pow(2).mean().sqrt()).all()
    assert torch.equal(s.to(torch.bfloat16).double(), ref_s.to(torch.bfloat16).double())
