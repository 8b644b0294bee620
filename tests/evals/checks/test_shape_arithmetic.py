"""Shape arithmetic is not data computation: counting elements or taking ``1/sqrt(d)`` of a size
with torch is allowed, statically and at run time; torch on inputs or parameters still is not."""

import textwrap

import pytest
import torch

from kgen.evals.checks.torch_usage import (
    HOST_ARITHMETIC_MAX_ELEMENTS,
    judge_torch_ops,
    record_torch_ops,
)
from kgen.evals.problem.policies import Policies
from kgen.evals.static_rules import check_candidate_source

STRICT = Policies()

HEADER = """\
import math
import operator
from functools import reduce

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024
EPS = 1e-5
"""


def violations(init: str, forward: str) -> list[str]:
    source = HEADER + textwrap.dedent(
        f"""
class ModelNew(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.register_buffer("scale", torch.ones(normalized_shape))
        {init}

    def forward(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        {forward}
        return x
"""
    )
    return [f"{v.rule}: {v.message}" for v in check_candidate_source(source, "cand.py", STRICT)]


SHAPE_ARITHMETIC = [
    ("pass", "n = torch.prod(torch.tensor(self.normalized_shape))"),
    ("pass", "n = int(torch.tensor(self.normalized_shape).prod())"),
    ("pass", "n = torch.tensor(self.normalized_shape).prod().item()"),
    ("pass", "n = torch.prod(torch.tensor(x.shape[-2:]))"),
    ("pass", "n = math.prod(x.shape)"),
    ("pass", "n = x.numel()"),
    ("pass", "n = x.shape[0] * x.shape[1]"),
    ("pass", "n = reduce(operator.mul, x.shape, 1)"),
    ("pass", "grid = (triton.cdiv(x.numel(), BLOCK),)"),
    ("pass", "scale = x.size(-1) ** 0.5"),
    ("pass", "scale = torch.tensor(x.shape[-1], dtype=torch.float32) ** -0.5"),
    ("pass", "scale = torch.rsqrt(torch.tensor(float(x.size(dim))))"),
    ("pass", "eps = torch.sqrt(torch.tensor(self.eps))"),
    ("pass", "n = torch.tensor([s for s in self.normalized_shape]).prod()"),
    ("pass", "shape = x.shape\n        n = torch.prod(torch.as_tensor(shape))"),
    ("self.n = torch.tensor(normalized_shape).prod()", "k = self.n * 2"),
    ("self.numel = math.prod(self.normalized_shape)", "inv = 1.0 / torch.tensor(self.numel)"),
    ("pass", "d = torch.tensor(EPS).log()"),
    ("pass", "n = torch.tensor(x.shape)\n        m = n.prod()\n        k = int(m) // BLOCK"),
]


@pytest.mark.parametrize(("init", "forward"), SHAPE_ARITHMETIC)
def test_shape_arithmetic_is_not_data_computation(init, forward):
    assert violations(init, forward) == []


DATA_COMPUTATION = [
    ("pass", "n = torch.prod(x)", "torch-math"),
    ("pass", "n = torch.prod(torch.tensor(x))", "torch-math"),
    ("pass", "n = torch.tensor(x.shape).prod() * x", "tensor-operator"),
    ("pass", "n = x.sum() / x.numel()", "tensor-method"),
    ("pass", "n = torch.sum(self.weight)", "torch-math"),
    ("pass", "n = self.scale.prod()", "tensor-method"),
    ("pass", "n = torch.rsqrt(x.var(-1) + self.eps)", "torch-math"),
    ("self.w2 = nn.Parameter(torch.ones(3))", "n = torch.exp(self.w2)", "torch-math"),
    # a shape-looking tensor a kernel can write into is data
    ("pass", "p = torch.tensor([0.0] * 8)\n        k[(1,)](x, p)\n        n = p.sum()", "tensor-method"),
    ("self.acc = torch.zeros(8)", "k[(1,)](x, self.acc)\n        n = torch.sum(self.acc)", "torch-math"),
    # random numbers and uninitialised memory are not shape arithmetic
    ("pass", "n = torch.randn(x.shape).sum()", "tensor-method"),
    ("pass", "n = torch.empty(x.shape).sum()", "tensor-method"),
    # a helper's unannotated parameter could be anything
    ("pass", "n = (lambda s: torch.prod(s))(x)", "torch-math"),
]


@pytest.mark.parametrize(("init", "forward", "rule"), DATA_COMPUTATION)
def test_torch_on_inputs_or_parameters_stays_data_computation(init, forward, rule):
    found = violations(init, forward)
    assert any(v.startswith(rule) for v in found), found


def test_self_attribute_named_like_metadata_is_not_metadata():
    found = violations("self.shape = nn.Parameter(torch.ones(3))", "n = torch.prod(self.shape)")
    assert any(v.startswith("torch-math") for v in found), found


# -- runtime --------------------------------------------------------------------------------

x = torch.randn(8, 32)
normalized_shape = (8, 32)


@pytest.mark.parametrize(
    "fn",
    [
        lambda: torch.prod(torch.tensor(normalized_shape)),
        lambda: int(torch.tensor(normalized_shape).prod()),
        lambda: torch.tensor(x.shape).float().prod().rsqrt(),
        lambda: torch.tensor(x.shape[-1], dtype=torch.float32) ** -0.5,
        lambda: torch.sqrt(torch.tensor(1e-5)),
        lambda: torch.ones(4).cumsum(0),
    ],
)
def test_runtime_host_arithmetic_is_not_compute(fn):
    with record_torch_ops() as usage:
        fn()
    assert usage.compute_ops == {}, usage
    assert usage.host_ops, usage
    assert judge_torch_ops(usage, STRICT, 1).compute_ops == {}


@pytest.mark.parametrize(
    "fn",
    [
        lambda: torch.prod(x),
        lambda: torch.tensor(x.shape) * x[0, :2],
        lambda: x.sum() / x.numel(),
        lambda: torch.ones(HOST_ARITHMETIC_MAX_ELEMENTS + 1).sum(),
        lambda: torch.empty(4).sum(),
        lambda: torch.rand(4).sum(),
    ],
)
def test_runtime_data_arithmetic_stays_compute(fn):
    with record_torch_ops() as usage:
        fn()
    assert usage.compute_ops, usage


def test_runtime_host_tensor_overwritten_with_data_is_data():
    with record_torch_ops() as usage:
        c = torch.tensor([0.0] * 4)
        c.copy_(x[0, :4])
        c.sum()
        view = torch.tensor([1.0, 2.0]).view(2)
        view[:1].copy_(x[0, :1])
        view.prod()
    assert usage.compute_ops == {"aten.sum.default": 1, "aten.prod.default": 1}, usage


def test_runtime_host_tensor_written_by_a_kernel_is_data():
    import triton
    import triton.language as tl

    @triton.jit
    def write_kernel(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    with record_torch_ops() as usage:
        partial = torch.tensor([0.0] * 8)
        write_kernel[(1,)](x, partial, 8, BLOCK=8)
        partial.sum()
    assert usage.compute_ops == {"aten.sum.default": 1}, usage
