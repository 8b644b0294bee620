"""The fused linear cross-entropy problem: its loss and both gradients are what autograd gives for
torch's own cross-entropy of the LM head's logits, and its inputs and outputs are what the
problem file says they are."""

import pytest
import torch
import torch.nn.functional as F

from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem

NAME = "fused_linear_cross_entropy"


def _loaded(**sizes):
    info = resolve_problem(NAME)
    return load_problem(info.path, sizes or info.cpu_sizes())


@pytest.mark.parametrize(("tokens", "hidden", "vocab"), [(37, 64, 301), (1, 5, 7), (9, 1, 2), (4, 3, 1)])
def test_the_reference_is_autograd_of_torch_cross_entropy_in_fp64(tokens, hidden, vocab):
    gen = torch.Generator().manual_seed(tokens * 10007 + hidden * 101 + vocab)
    h = torch.randn(tokens, hidden, dtype=torch.float64, generator=gen, requires_grad=True)
    w = (2.0 * torch.randn(vocab, hidden, dtype=torch.float64, generator=gen)).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    if tokens > 2:
        targets[1] = targets[0]  # two tokens share a target: their gradients add in one row

    expected_loss = F.cross_entropy(h @ w.t(), targets)
    expected = torch.autograd.grad(expected_loss, (h, w))

    loss, grad_hidden, grad_weight = _loaded().model_class()(h.detach(), w.detach(), targets)
    assert loss.dim() == 0 and loss.dtype == torch.float64
    torch.testing.assert_close(loss, expected_loss.detach(), rtol=1e-12, atol=1e-12)
    for name, got, want in (("grad_hidden", grad_hidden, expected[0]), ("grad_weight", grad_weight, expected[1])):
        assert got.dtype == torch.float64 and got.shape == want.shape, name
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=name)


def test_bf16_inputs_give_an_fp32_loss_and_gradients_in_the_inputs_dtypes():
    problem = _loaded()
    torch.manual_seed(0)
    hidden, weight, targets = problem.get_inputs()
    assert (hidden.dtype, weight.dtype, targets.dtype) == (torch.bfloat16, torch.bfloat16, torch.int64)
    assert hidden.shape[1] == weight.shape[1] and targets.shape == (hidden.shape[0],)
    loss, grad_hidden, grad_weight = problem.model_class()(hidden, weight, targets)
    assert loss.shape == () and loss.dtype == torch.float32
    assert grad_hidden.dtype == torch.bfloat16 and grad_hidden.shape == hidden.shape
    assert grad_weight.dtype == torch.bfloat16 and grad_weight.shape == weight.shape
    # the fp32 answer is the fp64 one to fp32's precision (loss) and bf16's (gradients)
    up = problem.model_class()(hidden.double(), weight.double(), targets)
    assert abs(loss.double() - up[0]).item() <= 1e-6 * up[0].abs().item()
    for got, want in zip((grad_hidden, grad_weight), up[1:], strict=True):
        assert ((got.double() - want).norm() / want.norm()).item() < 5e-3


@pytest.mark.parametrize("hidden", [64, 2048])
def test_the_inputs_give_logits_of_a_realistic_spread_at_every_hidden_size(hidden):
    """Logits near zero would hide a missing max-subtraction or a wrong softmax; logits in the
    hundreds would make every softmax one-hot. A trained LM head's spread is a few units."""
    problem = _loaded(N_TOKENS=64, HIDDEN=hidden, VOCAB=1000)
    torch.manual_seed(0)
    h, w, _ = problem.get_inputs()
    std = (h.float() @ w.float().t()).std().item()
    assert 1.0 < std < 5.0


def test_the_flop_and_byte_counts_are_the_three_gemms_and_the_unavoidable_traffic():
    problem = _loaded(N_TOKENS=8, HIDDEN=4, VOCAB=10)
    assert problem.flops() == 6 * 8 * 4 * 10
    # inputs and gradients once each (bf16), targets (int64), the loss; never the logits
    assert problem.bytes_moved() == 2 * (8 * 4 + 10 * 4) * 2 + 8 * 8 + 4
