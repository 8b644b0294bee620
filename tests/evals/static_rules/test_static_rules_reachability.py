"""Static rules judge the code that runs (evals/static_rules/reachability.py and friends).

Dead code a real candidate file carries (an uncalled ``get_inputs()``, a pasted ``class
Model``) is not judged; code the forward reaches by any route still is.
"""

from __future__ import annotations

import textwrap

import pytest

from kgen.evals.static_rules import check_candidate_source

HEAD = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n), mask=o < n)


def launch(x):
    y = torch.empty_like(x)
    _copy[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), B=128)
    return y
"""


def _rules(body: str) -> list[str]:
    return [v.rule for v in check_candidate_source(HEAD + textwrap.dedent(body))]


@pytest.mark.parametrize("body", [
    # the problem file's own helpers, pasted and never called
    """
    class ModelNew(nn.Module):
        def forward(self, x):
            return launch(x)

    def get_inputs():
        return [torch.rand(16, 16)]

    def get_init_inputs():
        return []
    """,
    # a dead copy of the reference
    """
    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)

    class ModelNew(nn.Module):
        def forward(self, x):
            return launch(x)
    """,
    # shape arithmetic is not data computation
    """
    class ModelNew(nn.Module):
        def __init__(self, shape=(4, 8)):
            super().__init__()
            self.shape = shape

        def forward(self, x):
            n = int(torch.prod(torch.tensor(self.shape)))
            return launch(x.view(-1, n))
    """,
])
def test_code_that_never_computes_data_is_not_judged(body):
    assert _rules(body) == []


@pytest.mark.parametrize("body", [
    # a helper the forward calls
    """
    def finish(y):
        return torch.relu(y)

    class ModelNew(nn.Module):
        def forward(self, x):
            return finish(launch(x))
    """,
    # a helper reached through a dict of functions
    """
    def finish(y):
        return y.exp()

    STEPS = {"finish": finish}

    class ModelNew(nn.Module):
        def forward(self, x):
            return STEPS["finish"](launch(x))
    """,
    # a base class's forward runs through super()
    """
    class Base(nn.Module):
        def forward(self, x):
            return torch.sigmoid(x)

    class ModelNew(Base):
        def forward(self, x):
            return super().forward(launch(x))
    """,
    # ModelNew bound to another class
    """
    class Impl(nn.Module):
        def forward(self, x):
            return x.sum(dim=-1)

    ModelNew = Impl
    """,
    # torch on the GPU side of a device test
    """
    class ModelNew(nn.Module):
        def forward(self, x):
            if x.is_cuda:
                return torch.relu(x)
            return launch(x)
    """,
])
def test_code_the_forward_reaches_is_still_judged(body):
    assert _rules(body), "torch math reached from the forward passed the static rules"


def test_a_cpu_fallback_under_a_device_test_is_left_to_the_run_time_checks():
    assert _rules("""
    class ModelNew(nn.Module):
        def forward(self, x):
            if not x.is_cuda:
                return torch.relu(x)
            return launch(x)
    """) == []


def test_python_randomness_stays_forbidden_where_a_torch_seed_draw_is_allowed():
    torch_seed = _rules("""
    class ModelNew(nn.Module):
        def forward(self, x):
            seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
            return launch(x) if seed >= 0 else x
    """)
    python_random = _rules("""
    import random

    class ModelNew(nn.Module):
        def forward(self, x):
            return launch(x) if random.random() < 2 else x
    """)
    assert "clock-env" not in torch_seed
    assert python_random
