"""AST rules over candidate sources: every rule fires on its planted exploits, never on correct kernels."""

from pathlib import Path

import pytest

from kgen.evals.static_rules import (
    RULES,
    RuleViolation,
    check_candidate_file,
    check_candidate_source,
)
from kgen.evals.verdict import RejectionClass
from kgen.knowledge_base import SEED_KERNELS_DIR

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "candidates"
SEEDS = sorted((SEED_KERNELS_DIR / "triton").glob("*.py"))
CORRECT = [*SEEDS, FIXTURES / "relu_kernelbench_solution.py", *sorted(FIXTURES.glob("control_*.py"))]

HEADER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def launch(x):
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out

"""


def _forward(body: str, init: str = "", extra: str = "") -> str:
    """A candidate whose ModelNew.forward(self, x) has ``body`` (indented by the caller's dedent)."""
    lines = [HEADER, extra, "class ModelNew(nn.Module):"]
    if init:
        lines += ["    def __init__(self):", "        super().__init__()"]
        lines += ["        " + line for line in init.strip("\n").splitlines()]
    lines += ["    def forward(self, x):"]
    lines += ["        " + line for line in body.strip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def _rules(source: str) -> set[str]:
    return {v.rule for v in check_candidate_source(source, "cand.py")}


# ----------------------------------------------------------------------------------------
# Correct kernels: zero violations
# ----------------------------------------------------------------------------------------


def test_there_are_nine_seeds_and_a_solution():
    assert len(SEEDS) >= 9
    assert (FIXTURES / "relu_kernelbench_solution.py").exists()


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_kernels_have_no_violations(path):
    assert check_candidate_file(path) == []


LEGIT = '''
import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F  # imported, never used on the forward path
import triton
import triton.language as tl
from torch import Tensor

BLOCK = 1024
CONFIGS = [triton.Config({"BLOCK_M": 64}, num_warps=4), triton.Config({"BLOCK_M": 128}, num_warps=8)]
DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}
LOG2E = tl.constexpr(1.4426950408889634)


@triton.autotune(configs=CONFIGS, key=["M", "N"], reset_to_zero=["y_ptr"])
@triton.heuristics({"EVEN_N": lambda args: args["N"] % 32 == 0})
@triton.jit
def _rowwise(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, EVEN_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, 32)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=rows[:, None] < M, other=0.0)
    m = tl.max(x, axis=1)
    e = tl.exp((x - m[:, None]) * LOG2E)
    s = tl.sum(e, axis=1)
    y = tl.where(x > 0, e / s[:, None], 0.0) @ tl.trans(e) if EVEN_N else e
    tl.store(y_ptr + rows, tl.sum(y, axis=1), mask=rows < M)


def _grid(meta, M):
    return (triton.cdiv(M, meta["BLOCK_M"]),)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


class _ScaleFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        out = torch.empty_like(x)
        _rowwise[lambda meta: _grid(meta, x.shape[0])](x, out, x.shape[0], x.shape[1])
        ctx.scale = scale
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        out = torch.zeros_like(grad)
        _rowwise[(1,)](grad, out, 1, 1)
        return out, None


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.linear = nn.Linear(in_features, out_features)  # holds weight and bias only
        self.weight2 = nn.Parameter(torch.randn(out_features, in_features) * 0.02)
        self.register_buffer("scale_buf", torch.ones(1))
        self.eps = eps
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight2, a=math.sqrt(5))
        bound = 1 / math.sqrt(self.weight2.shape[1])
        nn.init.uniform_(self.linear.bias, -bound, bound)
        self.weight2.data.mul_(0.5)

    def forward(self, x: torch.Tensor, residual: Optional[Tensor] = None) -> torch.Tensor:
        assert x.is_contiguous() or x.stride(-1) == 1
        orig_shape = x.shape
        x2 = x.reshape(-1, orig_shape[-1]).contiguous()
        if x2.dtype != torch.float32:
            x2 = x2.to(torch.float32).clone()
        M, K = x2.shape
        weight = self.linear.weight.t().contiguous()
        n_cols = weight.shape[0]
        big = torch.finfo(torch.float32).max
        tiny = torch.finfo(x2.dtype).eps
        shapes = []
        shapes.append((M, n_cols))
        seen = set()
        seen.add(M)
        names = sorted(["b", "a"])
        names.sort()
        scale = 1.0 / math.sqrt(K) * self.eps
        n_programs = max(1, min(M, _num_sms(x.device)))
        if M * n_cols + K // 2 - n_programs % 3 < 0 or big < tiny:
            raise ValueError("impossible sizes")
        with torch.no_grad():
            out = _ScaleFn.apply(x2, scale)
        assert out.shape == (M, K), f"bad shape {out.shape}"
        assert x.dtype in DTYPES or x.dtype == torch.float32 or x.device.type == "cpu"
        return out.view(*orig_shape[:-1], K).to(x.dtype)
'''


def test_a_busy_legitimate_candidate_has_no_violations():
    assert check_candidate_source(LEGIT, "legit.py") == []


# ----------------------------------------------------------------------------------------
# Each rule fires
# ----------------------------------------------------------------------------------------

POSITIVE = [
    # try-except
    ("try-except", _forward("try:\n    return launch(x)\nexcept Exception:\n    return x.clamp(min=0)")),
    ("try-except", _forward("try:\n    return launch(x)\nfinally:\n    pass")),
    ("try-except", _forward("with contextlib.suppress(Exception):\n    return launch(x)", extra="import contextlib\n")),
    ("try-except", _forward("with Quiet():\n    return launch(x)", extra="class Quiet:\n    def __enter__(self):\n        return self\n    def __exit__(self, *exc):\n        return True\n")),
    # torch-math
    ("torch-math", _forward("return torch.relu(launch(x))")),
    ("torch-math", _forward("return F.gelu(launch(x))")),
    ("torch-math", _forward("return torch.nn.functional.softmax(launch(x), dim=-1)")),
    ("torch-math", _forward("return torch.matmul(x, x.t())")),
    ("torch-math", _forward("return torch.einsum('ij,kj->ik', x, x)")),
    ("torch-math", _forward("return torch.where(x > 0, x, 0)")),
    ("torch-math", _forward("return torch.ops.aten.relu(x)")),
    ("torch-math", _forward("return torch.compile(launch)(x)")),
    ("torch-math", _forward("return torch.Tensor.relu(x)")),
    ("torch-math", _forward("return torch.cumsum(x, 0)")),
    ("torch-math", _forward("return getattr(torch, 'relu')(x)")),
    ("torch-math", _forward("op = torch.relu\nreturn op(x)")),
    ("torch-math", _forward("return list(map(torch.relu, [x]))[0]")),
    ("torch-math", _forward("return relu(x)", extra="from torch import relu\n")),
    ("torch-math", _forward("return k(x)", extra="from torch.nn.functional import silu as k\n")),
    ("torch-math", _forward("return T.nn.functional.relu(x)", extra="import torch as T\n")),
    ("torch-math", _forward("m = torch\nreturn m.sigmoid(x)")),
    # tensor-method
    ("tensor-method", _forward("return launch(x).clamp(min=0)")),
    ("tensor-method", _forward("out = launch(x)\nout.relu_()\nreturn out")),
    ("tensor-method", _forward("return x.sum(dim=-1)")),
    ("tensor-method", _forward("return x.exp() / x.exp().sum()")),
    ("tensor-method", _forward("out = launch(x)\nreturn out.index_add_(0, idx, out)")),
    ("tensor-method", _forward("return x.__mul__(x.__gt__(0))")),
    ("tensor-method", _forward("return getattr(x, 'relu')()")),
    ("tensor-method", _forward("f = x.relu\nreturn f()")),
    ("tensor-method", _forward("return torch.from_numpy(x.numpy())")),
    ("tensor-method", _forward("m = type(x)\nreturn m.matmul(x, x)")),
    # tensor-operator
    ("tensor-operator", _forward("return x @ x.t()")),
    ("tensor-operator", _forward("y = launch(x)\ny @= y\nreturn y")),
    ("tensor-operator", _forward("out = launch(x)\nreturn out * (out > 0)")),
    ("tensor-operator", _forward("y = x.contiguous()\nreturn (y + abs(y)) / 2")),
    ("tensor-operator", _forward("out = torch.empty_like(x)\nout[x < 0] = 0\nreturn out")),
    ("tensor-operator", _forward("y = -x\nreturn y")),
    ("tensor-operator", _forward("out = launch(x)\nout *= 2\nreturn out")),
    ("tensor-operator", _forward("return sum(row for row in x)")),
    ("tensor-operator", _forward("return functools.reduce(operator.mul, [x, x])", extra="import functools\nimport operator\n")),
    ("tensor-operator", _forward("return launch(x) * self.w", init="self.w = nn.Parameter(torch.ones(1))")),
    ("tensor-operator", _forward("return torch.stack([r * 2 for r in x])")),
    ("tensor-operator", _forward("return h(launch(x))", extra="def h(a):\n    return a * (a > 0)\n")),
    ("tensor-operator", _forward("y = Fn.apply(x)\nreturn y - 1", extra="class Fn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, a):\n        return launch(a)\n")),
    ("tensor-operator", _forward("out = torch.empty_like(x)\nfor i in range(x.shape[0]):\n    out[i] = x[i] if x[i] > 0 else 0\nreturn out")),
    ("tensor-method", _forward("return self.h(x)").replace("    def forward", "    def h(self, a):\n        return a.clamp(min=0)\n\n    def forward")),
    # torch-module-call
    ("torch-module-call", _forward("return self.act(launch(x))", init="self.act = nn.ReLU()")),
    ("torch-module-call", _forward("return self.fc(x)", init="self.fc = nn.Linear(4, 4)")),
    ("torch-module-call", _forward("return self.fc.forward(x)", init="self.fc = nn.Linear(4, 4)")),
    ("torch-module-call", _forward("return self.layers[0](x)", init="self.layers = nn.ModuleList([nn.ReLU()])")),
    ("torch-module-call", _forward("for layer in self.layers:\n    x = layer(x)\nreturn x", init="self.layers = nn.Sequential(nn.ReLU())")),
    ("torch-module-call", _forward("return nn.ReLU()(x)")),
    ("torch-module-call", "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    act = nn.ReLU()\n\n    def forward(self, x):\n        return self.act(x)\n"),
    # torch-in-kernel
    ("torch-in-kernel", HEADER.replace("tl.store(out_ptr", "torch.relu(x_ptr)\n    tl.store(out_ptr") + "class ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n"),
    # compute-library
    ("compute-library", _forward("return launch(x)", extra="import numpy as np\n")),
    ("compute-library", _forward("return launch(x)", extra="from cupy import asarray\n")),
    # module-cache
    ("module-cache", _forward("k = x.data_ptr()\nif k not in _CACHE:\n    _CACHE[k] = launch(x)\nreturn _CACHE[k]", extra="_CACHE = {}\n")),
    ("module-cache", _forward("_OUTS.append(launch(x))\nreturn _OUTS[-1]", extra="_OUTS = []\n")),
    ("module-cache", _forward("return _STATE.setdefault(x.data_ptr(), launch(x))", extra="from collections import OrderedDict\n_STATE = OrderedDict()\n")),
    ("module-cache", _forward("ModelNew.last = launch(x)\nreturn ModelNew.last")),
    ("module-cache", _forward("launch.count = 1\nreturn launch(x)")),
    ("module-cache", _forward("return helper(x)", extra="def helper(x, _memo={}):\n    return _memo.setdefault(x.data_ptr(), launch(x))\n")),
    ("module-cache", "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    memo = {}\n\n    def forward(self, x):\n        self.memo[x.data_ptr()] = x\n        return x\n"),
    ("module-cache", _forward("_BUF.copy_(x)\nreturn launch(_BUF)", extra="_BUF = torch.empty(16)\n")),
    ("module-cache", _forward("return _run(x)", extra="def make():\n    cache = {}\n    def run(x):\n        if x.data_ptr() not in cache:\n            cache[x.data_ptr()] = launch(x)\n        return cache[x.data_ptr()]\n    return run\n_run = make()\n")),
    ("module-cache", _forward("return _run(x)", extra="def make():\n    outs = []\n    def run(x):\n        outs.append(launch(x))\n        return outs[-1]\n    return run\n_run = make()\n")),
    # global-statement
    ("global-statement", _forward("global _LAST\n_LAST = launch(x)\nreturn _LAST", extra="_LAST = None\n")),
    ("global-statement", _forward("n = 0\ndef bump():\n    nonlocal n\n    n += 1\nbump()\nreturn launch(x)")),
    # cache-decorator
    ("cache-decorator", _forward("return cached(x.data_ptr(), x)", extra="import functools\n@functools.lru_cache(maxsize=None)\ndef cached(p, x):\n    return launch(x)\n")),
    ("cache-decorator", _forward("return cached(x)", extra="from functools import cache\n@cache\ndef cached(x):\n    return launch(x)\n")),
    # instance-state
    ("instance-state", _forward("self.calls += 1\nreturn launch(x)", init="self.calls = 0")),
    ("instance-state", _forward("self._out = launch(x)\nreturn self._out")),
    ("instance-state", _forward("return self.helper(x)", extra="") .replace("    def forward(self, x):", "    def helper(self, x):\n        self.memo[x.data_ptr()] = launch(x)\n        return self.memo[x.data_ptr()]\n\n    def forward(self, x):")),
    ("instance-state", _forward("setattr(self, 'last', launch(x))\nreturn self.last")),
    ("instance-state", _forward("self.register_buffer('last', launch(x))\nreturn self.last")),
    ("instance-state", _forward("self.outs.append(launch(x))\nreturn self.outs[-1]", init="self.outs = []")),
    ("instance-state", _forward("if hasattr(x, 'cached'):\n    return x.cached\nx.cached = launch(x)\nreturn x.cached")),
    # stream
    ("stream", _forward("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    return launch(x)")),
    ("stream", _forward("e = torch.cuda.Event(enable_timing=True)\nreturn launch(x)")),
    ("stream", _forward("out = launch(x)\nout.record_stream(torch.cuda.current_stream())\nreturn out")),
    ("stream", _forward("g = torch.cuda.CUDAGraph()\nreturn launch(x)")),
    ("stream", _forward("return launch(x)", extra="from torch.cuda import Stream\nS = Stream()\n")),
    # monkey-patch
    ("monkey-patch", _forward("return launch(x)", extra="torch.cuda.Event.elapsed_time = lambda self, e: 0.001\n")),
    ("monkey-patch", _forward("return launch(x)", extra="triton.testing.do_bench = lambda *a, **k: 0.001\n")),
    ("monkey-patch", _forward("return launch(x)", extra="from torch.cuda import Event\nEvent.elapsed_time = lambda self, e: 0.001\n")),
    ("monkey-patch", _forward("setattr(torch, 'allclose', lambda *a, **k: True)\nreturn launch(x)")),
    ("monkey-patch", _forward("del torch.testing.assert_close\nreturn launch(x)")),
    ("monkey-patch", _forward("type(x).__eq__ = lambda a, b: True\nreturn launch(x)")),
    ("monkey-patch", _forward("torch.backends.cuda.matmul.allow_tf32 = True\nreturn launch(x)")),
    # forbidden-import
    *[("forbidden-import", _forward("return launch(x)", extra=f"import {m}\n")) for m in (
        "os", "sys", "subprocess", "socket", "threading", "multiprocessing", "concurrent.futures", "asyncio",
        "ctypes", "cffi", "signal", "shutil", "pathlib", "io", "builtins", "importlib", "pickle", "gc",
        "inspect", "urllib.request", "http.client", "requests", "weakref", "tempfile",
        "torch.multiprocessing", "torch.utils.cpp_extension",
    )],
    ("forbidden-import", _forward("return launch(x)", extra="from os import path\n")),
    ("forbidden-import", _forward("import os\nreturn launch(x)")),
    ("forbidden-import", _forward("return launch(x)", extra="from torch.utils import cpp_extension\n")),
    ("forbidden-import", _forward("return relu(x)", extra="from torch import *\n")),
    ("forbidden-import", _forward("return Model()(x)", extra="from kgen.evals.problems.softmax import Model\n")),
    ("forbidden-import", _forward("return launch(x)", extra="import __main__\n")),
    ("forbidden-import", "__name__ = '__main__'\n" + _forward("return launch(x)") + "\nif __name__ == '__main__':\n    import os\n"),
    # forbidden-call
    ("forbidden-call", _forward("open('/tmp/out', 'w').write('x')\nreturn launch(x)")),
    ("forbidden-call", _forward("return eval('torch.relu')(x)")),
    ("forbidden-call", _forward("exec('y = 1')\nreturn launch(x)")),
    ("forbidden-call", _forward("code = compile('1', 'f', 'eval')\nreturn launch(x)")),
    ("forbidden-call", _forward("return __import__('torch').relu(x)")),
    ("forbidden-call", _forward("return globals()['torch'].relu(x)")),
    ("forbidden-call", _forward("return vars(torch)['relu'](x)")),
    ("forbidden-call", _forward("name = 'rel' + 'u'\nreturn getattr(torch, name)(x)")),
    ("forbidden-call", _forward("name = 'rel' + 'u'\nreturn getattr(x, name)()")),
    ("forbidden-call", _forward("g = getattr\nreturn g(torch, 'relu')(x)")),
    ("forbidden-call", _forward("return getattr(x, f'rel{\"u\"}')()")),
    ("forbidden-call", _forward("return getattr(torch, f'relu{\"\"}')(x)")),
    ("forbidden-call", _forward("return operator.methodcaller('relu')(x)", extra="import operator\n")),
    ("forbidden-call", _forward("torch.save(x, '/tmp/x.pt')\nreturn launch(x)")),
    ("forbidden-call", _forward("torch.os.system('true')\nreturn launch(x)")),
    ("forbidden-call", _forward("return launch(x)", extra="import typing\nMODULES = typing.sys.modules\n")),
    # dunder-access
    ("dunder-access", _forward("return torch.__dict__['relu'](x)")),
    ("dunder-access", _forward("return launch.__globals__['torch'].relu(x)")),
    ("dunder-access", _forward("return __builtins__['eval']('1')")),
    ("dunder-access", _forward("return object.__getattribute__(torch, 'relu')(x)")),
    ("dunder-access", _forward("return launch.__wrapped__(x)")),
    ("dunder-access", "import torch\n\nclass Spy:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        return func(*args, **(kwargs or {}))\n"),
    # tensor-subclass
    ("tensor-subclass", "import torch\n\nclass Lazy(torch.Tensor):\n    pass\n"),
    ("tensor-subclass", "from torch.utils._python_dispatch import TorchDispatchMode\n\nclass Mode(TorchDispatchMode):\n    pass\n"),
    # torch-private
    ("torch-private", _forward("return torch._C._nn.gelu(x)")),
    ("torch-private", _forward("with torch._C.DisableTorchFunction():\n    return launch(x)")),
    ("torch-private", _forward("return launch(x)", extra="from torch import _dynamo\n")),
    ("torch-private", _forward("return torch._dynamo.optimize('inductor')(launch)(x)")),
    # clock-env (more below)
    ("clock-env", _forward("return launch(x) if time.monotonic() - T0 < 60 else x.clone()", extra="import time\nT0 = time.monotonic()\n")),
    # syntax-error
    ("syntax-error", "def forward(self, x)\n    return x\n"),
]


@pytest.mark.parametrize(("rule", "source"), POSITIVE, ids=[f"{r}-{i}" for i, (r, _) in enumerate(POSITIVE)])
def test_rule_fires(rule, source):
    violations = check_candidate_source(source, "cand.py")
    assert rule in {v.rule for v in violations}, [v.message for v in violations]
    for v in violations:
        assert v.rejection is RULES[v.rule][0]


def test_every_rule_has_a_positive_test():
    assert {rule for rule, _ in POSITIVE} == set(RULES)


def test_rule_classes():
    not_a_kernel = {"try-except", "torch-math", "tensor-method", "tensor-operator", "torch-module-call",
                    "torch-in-kernel", "compute-library"}
    for rule, (rejection, description) in RULES.items():
        assert description
        if rule == "syntax-error":
            assert rejection is RejectionClass.LOAD_ERROR
        elif rule in not_a_kernel:
            assert rejection is RejectionClass.NOT_A_KERNEL, rule
        else:
            assert rejection is RejectionClass.FORBIDDEN_CONSTRUCT, rule


# ----------------------------------------------------------------------------------------
# Things that must stay allowed (false positives count as failures)
# ----------------------------------------------------------------------------------------

NEGATIVE = [
    _forward("return launch(x.contiguous().view(-1)).view(x.shape)"),
    _forward("y = launch(x)\nreturn y.reshape(x.shape).clone()"),
    _forward("n = x.shape[0] * x.shape[1]\nm = x.numel() // 2 + 1\nreturn launch(x)"),
    _forward("assert x.dtype == torch.float32 and x.dim() == 2\nreturn launch(x.float())"),
    _forward("y = torch.zeros_like(x)\ny.zero_()\ny.fill_(0.0)\nreturn launch(x)"),
    _forward("idx = torch.arange(x.shape[0], device=x.device)\nreturn launch(x)"),
    _forward("out = launch(x)\nreturn out.to(torch.bfloat16).to(x.dtype)"),
    _forward("sm = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4\nreturn launch(x)"),
    _forward("lo = torch.finfo(x.dtype).min\nhi = torch.iinfo(torch.int32).max\nreturn launch(x)"),
    _forward("configs = []\nconfigs.append(1)\nconfigs.sort()\nreturn launch(x)"),
    _forward("scale = math.sqrt(x.shape[-1])\nreturn launch(x)", extra="import math\n"),
    _forward("torch.cuda.synchronize() if x.is_cuda else None\nreturn launch(x)"),
    _forward("return launch(x)", init="self.w = nn.Parameter(torch.randn(4, 4) * 0.02)\nnn.init.kaiming_uniform_(self.w)\nself.w.data.mul_(0.5)"),
    _forward("w = self.fc.weight\nb = self.fc.bias\nreturn launch(x)", init="self.fc = nn.Linear(4, 4)"),
    _forward("self.zero_ws()\nreturn launch(x)").replace("    def forward", "    def zero_ws(self):\n        return None\n\n    def forward"),
    _forward("a, b = x.chunk(2, dim=-1)\nreturn launch(a)"),
    _forward("if x.shape[0] > 1024 or x.stride(-1) != 1:\n    x = x.contiguous()\nreturn launch(x)"),
    _forward("return launch(x)", extra="BLOCKS = (256, 512, 1024)\nNAMES = ['a', 'b']\n"),
    _forward("return launch(x).view(x.shape).t().transpose(0, 1).permute(1, 0).unsqueeze(0).squeeze(0).expand(-1, -1)"),
    # a test harness under the main guard never runs when the candidate is imported
    _forward("return launch(x)") + "\nif __name__ == '__main__':\n    import time\n    x = torch.randn(4)\n    print(torch.allclose(ModelNew()(x), torch.relu(x)))\n",
    # KernelBench habits copied from the reference model
    _forward("w = getattr(self.lstm, f'weight_ih_l{0}')\nreturn launch(x)", init="self.lstm = nn.LSTM(4, 4)"),
    "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, stages=[3, 7]):\n        super().__init__()\n        self.stages = stages\n\n    def forward(self, x):\n        return x\n",
    _forward("self.w.data = self.w.data.contiguous().to(x.device)\nreturn launch(x)", init="self.w = nn.Parameter(torch.ones(2))"),
    _forward("return launch(x)", init="self.w = nn.Parameter(torch.ones(2, 2))\nfan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.w)"),
    _forward("feats = [x, x]\nif any(f.requires_grad for f in feats):\n    pass\nreturn launch(x)"),
    _forward("out = torch.empty_like(x)\ndef fill(i):\n    out[i] = x[i]\nreturn launch(torch.select(x, 0, 0))"),
]


@pytest.mark.parametrize("source", NEGATIVE, ids=range(len(NEGATIVE)))
def test_allowed_patterns_pass(source):
    assert check_candidate_source(source, "cand.py") == []


def test_tl_inside_jit_is_the_kernel_not_torch_math():
    # tl.sum / tl.exp / tl.where / @ inside @triton.jit are fine; the same names on torch are not
    source = HEADER.replace(
        "tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)",
        "v = tl.load(x_ptr + offs, mask=offs < n)\n"
        "    v = tl.where(v > 0, tl.exp(v) - tl.sum(v, axis=0), -v)\n"
        "    tl.store(out_ptr + offs, v.to(tl.float32), mask=offs < n)",
    ) + "class ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n"
    assert check_candidate_source(source) == []


# ----------------------------------------------------------------------------------------
# The planted red-team fixtures
# ----------------------------------------------------------------------------------------

REDTEAM = {
    "redteam_try_except_fallback.py": {"try-except", "torch-math"},
    "redteam_torch_inside.py": {"torch-math"},
    "redteam_getattr_torch.py": {"forbidden-call"},
    "redteam_dunder_import.py": {"forbidden-call", "tensor-method"},
    "redteam_operator_math.py": {"tensor-operator"},
    "redteam_nn_module_call.py": {"torch-module-call"},
    "redteam_output_cache.py": {"module-cache"},
    "redteam_lru_cache.py": {"cache-decorator"},
    "redteam_call_counter.py": {"instance-state"},
    "redteam_side_stream.py": {"stream"},
    "redteam_monkeypatch_timer.py": {"monkey-patch"},
    "redteam_spawns_thread.py": {"forbidden-import"},
    "redteam_writes_file.py": {"forbidden-import", "forbidden-call"},
    "redteam_network.py": {"forbidden-import"},
}


@pytest.mark.parametrize(("name", "rules"), sorted(REDTEAM.items()), ids=sorted(REDTEAM))
def test_planted_fixture_is_caught(name, rules):
    path = FIXTURES / name
    assert path.read_text().startswith('"""Planted exploit')
    violations = check_candidate_file(path)
    assert {v.rule for v in violations} == rules, [v.message for v in violations]


def test_violation_names_file_and_line():
    violations = check_candidate_file(FIXTURES / "redteam_torch_inside.py")
    assert len(violations) == 1
    v = violations[0]
    assert isinstance(v, RuleViolation)
    line = (FIXTURES / "redteam_torch_inside.py").read_text().splitlines()[v.line - 1]
    assert "torch.nn.functional.relu" in line
    assert v.message.startswith(f"redteam_torch_inside.py:{v.line}: ")
    assert "\n" not in v.message
    assert v.rejection is RejectionClass.NOT_A_KERNEL


def test_bad_input_fixtures_pass_the_rules_to_fail_later():
    # These exercise later stages (no launch, a crash): the static rules must let them through.
    assert _rules((FIXTURES / "relu_never_launches.py").read_text()) == set()
    assert _rules((FIXTURES / "relu_segfault.py").read_text()) == set()


def test_violations_are_sorted_and_unique():
    source = _forward("y = torch.relu(x)\ny = torch.relu(y)\nreturn y.sum()", extra="import os\n")
    violations = check_candidate_source(source)
    keys = [(v.line, v.rule, v.message) for v in violations]
    assert keys == sorted(set(keys), key=lambda k: (k[0], k[1], keys.index(k)))


# ----------------------------------------------------------------------------------------
# clock-env: clocks, environment and process state
# ----------------------------------------------------------------------------------------

CLOCK_ENV = [
    # a clock compared with an import-time stamp: switch to a shortcut once the checks are over
    _forward("if time.time() - _IMPORTED_AT > 300:\n    return x.clone()\nreturn launch(x)",
             extra="import time\n_IMPORTED_AT = time.time()\n"),
    _forward("return launch(x) if pc() - _T0 < 30.0 else x.clone()",
             extra="from time import perf_counter as pc\n_T0 = pc()\n"),
    _forward("if dt.datetime.now().minute % 2:\n    return x.clone()\nreturn launch(x)", extra="import datetime as dt\n"),
    _forward("now = getattr(time, 'monotonic')()\nreturn launch(x) if now < 1e9 else x", extra="import time\n"),
    _forward("from datetime import datetime as _when\nreturn launch(x) if _when.now().hour else x"),
    # allocator and RNG state tell the checker's calls from the timing loop's
    _forward("if torch.cuda.memory_allocated() > 1 << 30:\n    return x.clone()\nreturn launch(x)"),
    _forward("free, total = torch.cuda.mem_get_info()\nreturn launch(x) if free < total // 2 else x"),
    _forward("return launch(x)", init="self.baseline = mma()", extra="from torch.cuda import max_memory_allocated as mma\n"),
    _forward("return launch(x) if torch.initial_seed() < 100 else x.clone()"),
    _forward("state = torch.get_rng_state()\nreturn launch(x) if state is not None else x"),
    _forward("state = torch.random.get_rng_state()\nreturn launch(x)"),
    _forward("return launch(x) if torch.cuda.initial_seed() else x"),
    _forward("return launch(x) if not torch.cuda.is_current_stream_capturing() else x"),
    _forward("return launch(x) if getattr(torch.cuda, 'utilization')() < 50 else x"),
    # randomness, host, user
    _forward("if random.random() < 0.05:\n    return x.clone()\nreturn launch(x)", extra="import random\n"),
    _forward("if platform.node().startswith('eval'):\n    return x.clone()\nreturn launch(x)", extra="import platform\n"),
    _forward("return launch(x)", extra="import getpass\nUSER = getpass.getuser()\n"),
    _forward("return launch(x) if torch.platform.system() == 'Linux' else x"),
    # benchmarking and the environment through triton
    _forward("ms = triton.testing.do_bench(lambda: launch(x))\nreturn launch(x)"),
    _forward("return launch(x)", extra="from triton.testing import do_bench_cudagraph\n"),
    _forward("return launch(x) if triton.knobs.getenv('KGEN_EVAL') is None else x"),
    # the allocation behind a view: a padded check buffer is bigger than the tensor
    _forward("if x.untyped_storage().nbytes() > x.numel() * x.element_size():\n    return x.clone()\nreturn launch(x)"),
    _forward("if x.storage().size() != x.numel():\n    return x.clone()\nreturn launch(x)"),
    _forward("return launch(x) if x._base is None else x.clone()"),
    _forward("s = getattr(x, 'untyped_storage')()\nreturn launch(x)"),
    # the call stack: who is calling
    _forward("def probe():\n    yield me.gi_frame.f_back\nme = probe()\ncaller = next(me)\nreturn launch(x)"),
    _forward("import traceback\nreturn launch(x) if len(traceback.extract_stack()) < 9 else x"),
]


@pytest.mark.parametrize("source", CLOCK_ENV, ids=range(len(CLOCK_ENV)))
def test_clock_env_fires(source):
    violations = check_candidate_source(source, "cand.py")
    assert "clock-env" in {v.rule for v in violations}, [v.message for v in violations]
    for v in violations:
        if v.rule == "clock-env":
            assert v.rejection is RejectionClass.FORBIDDEN_CONSTRUCT


def test_clock_env_message_says_why():
    (v,) = check_candidate_source(_forward("return launch(x)", extra="import time as _t\n"), "cand.py")
    assert v.rule == "clock-env"
    assert "import of `time`" in v.message
    assert "depend on when and where it runs" in v.message
    (v,) = check_candidate_source(_forward("n = x.untyped_storage().nbytes()\nreturn launch(x)"), "cand.py")
    assert "inspecting the allocator" in v.message


@pytest.mark.parametrize(
    "source",
    [
        _forward("return launch(x) if os.environ.get('KGEN_EVAL') is None else x", extra="import os\n"),
        _forward("return launch(x) if env('KGEN_EVAL') is None else x", extra="from os import getenv as env\n"),
        _forward("return launch(x) if getattr(os, 'environ') else x", extra="import os\n"),
    ],
    ids=["os.environ", "from-os-import-getenv", "getattr-os-environ"],
)
def test_environment_variables_are_caught_through_os(source):
    assert "forbidden-import" in _rules(source)


CLOCK_ENV_LOOKALIKES = [
    # a local named time, a timestep
    _forward("time = x.shape[0]\ntimestep = time // 2 + 1\nreturn launch(x)"),
    # a dt: float parameter
    _forward("return launch(x)", extra="def _steps(n: int, dt: float) -> float:\n    return n * dt\n\n\nSTEPS = _steps(4, 0.5)\n"),
    # a seed kept as a plain int, set in __init__; and a method named random_init
    _forward("seed = self.seed\nreturn launch(x) if seed >= 0 else x", init="self.seed = 1234\nself.random_init()").replace(
        "    def forward", "    def random_init(self):\n        self.w = nn.Parameter(torch.randn(4) * 0.02)\n\n    def forward"
    ),
    _forward("return launch(x)").replace(
        "class ModelNew(nn.Module):",
        "class ModelNew(nn.Module):\n    def __init__(self, seed: int = 0):\n        super().__init__()\n        self.seed = seed\n",
    ),
    # synchronising is not reading a clock; storage_offset is how views are launched
    _forward("torch.cuda.synchronize()\nreturn launch(x)"),
    _forward("assert x.storage_offset() >= 0\nreturn launch(x)"),
    # a constexpr named TIME_STEPS, and Triton's own in-kernel RNG
    HEADER
    + "TIME_STEPS = 4\n\n\n"
    + "@triton.jit\ndef noise_kernel(out_ptr, seed, n, TIME_STEPS: tl.constexpr, BLOCK: tl.constexpr):\n"
    + "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    + "    r = tl.rand(seed, offs)\n"
    + "    for _ in tl.static_range(TIME_STEPS):\n"
    + "        r = r * 0.5\n"
    + "    tl.store(out_ptr + offs, r, mask=offs < n)\n\n\n"
    + "class ModelNew(nn.Module):\n    def forward(self, x):\n"
    + "        out = torch.empty_like(x)\n"
    + "        noise_kernel[(1,)](out, 7, x.numel(), TIME_STEPS=TIME_STEPS, BLOCK=1024)\n"
    + "        return launch(x)\n",
    # setting a seed for parameter initialisation; warnings and hashlib are fine
    _forward("return launch(x)", init="torch.manual_seed(0)\nself.w = nn.Parameter(torch.randn(4))"),
    _forward("if x.dim() != 2:\n    warnings.warn('expected 2-D input')\nreturn launch(x)",
             extra="import hashlib\nimport warnings\n\nTAG = hashlib.sha256(b'relu').hexdigest()\n"),
]


@pytest.mark.parametrize("source", CLOCK_ENV_LOOKALIKES, ids=range(len(CLOCK_ENV_LOOKALIKES)))
def test_clock_env_lookalikes_pass(source):
    assert check_candidate_source(source, "cand.py") == []


@pytest.mark.parametrize("source", ["import _posixsubprocess\n", "import _socket as s\n", "from _thread import start_new_thread\n"])
def test_private_c_modules_of_forbidden_ones_are_forbidden_too(source):
    assert "forbidden-import" in [v.rule for v in check_candidate_source(source)]


def test_device_clocks_read_in_a_kernel_are_clock_env():
    src = '''import triton
import triton.language as tl


@triton.jit
def stamp(t_ptr):
    t = tl.extra.cuda.globaltimer()
    s = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(t_ptr, t + s)
'''
    assert [(v.rule, v.line) for v in check_candidate_source(src)] == [("clock-env", 7), ("clock-env", 8)]


# ----------------------------------------------------------------------------------------
# Tampering through handles on imported modules, and code built by libraries
# ----------------------------------------------------------------------------------------

_HANDLE_STORES = {
    "local alias": "def f():\n    cuda = torch.cuda\n    cuda.synchronize = None\nf()\n",
    "tuple alias": "def f():\n    bench, cuda = triton.testing, torch.cuda\n    cuda.synchronize = None\nf()\n",
    "parameter default": "def f(target=torch.cuda):\n    target.synchronize = None\nf()\n",
    "loop over modules": "for m in (torch.cuda, triton):\n    m.synchronize = None\n",
    "with as": "import contextlib\nwith contextlib.nullcontext(torch.cuda) as m:\n    m.synchronize = None\n",
    "walrus root": "(m := torch.cuda).synchronize = None\n",
    "list root": "[torch.cuda][0].synchronize = None\n",
    "conditional root": "(torch.cuda if True else None).Event = None\n",
    "delete through alias": "def f():\n    c = torch.cuda\n    del c.synchronize\nf()\n",
}


@pytest.mark.parametrize("snippet", list(_HANDLE_STORES.values()), ids=list(_HANDLE_STORES))
def test_a_store_through_a_handle_on_an_imported_module_is_a_monkey_patch(snippet):
    assert "monkey-patch" in _rules(_forward("return launch(x)", extra=snippet))


def test_a_store_through_an_attribute_of_self_holding_a_module_is_a_monkey_patch():
    init = "self._cuda = torch.cuda\nself._cuda.synchronize = None"
    assert "monkey-patch" in _rules(_forward("return launch(x)", init=init))


_OWN_OBJECT_STORES = {
    "namespace": "import types\ncfg = types.SimpleNamespace()\ncfg.block = 1024\n",
    "class decorator": "def named(cls):\n    cls.kernel_name = 'copy'\n    return cls\n",
    "read-only alias": "def f():\n    cuda = torch.cuda\n    return cuda.is_available()\nf()\n",
    "loop over own objects": "class C:\n    pass\nfor c in (C(), C()):\n    c.size = 1\n",
    "alias name reused for an own object": "def f():\n    m = torch.cuda\n    return m.is_available()\ndef g():\n    m = types.SimpleNamespace()\n    m.x = 1\n    return m\nimport types\nf()\ng()\n",
}


@pytest.mark.parametrize("snippet", list(_OWN_OBJECT_STORES.values()), ids=list(_OWN_OBJECT_STORES))
def test_stores_on_the_candidates_own_objects_are_allowed(snippet):
    assert _rules(_forward("return launch(x)", extra=snippet)) == set()


def test_self_attributes_holding_own_values_may_be_written_in_init():
    init = "self.cfg = {'block': 1024}\nself.cfg['block'] = 512\nself.block = 256"
    assert _rules(_forward("return launch(x)", init=init)) == set()


@pytest.mark.parametrize("module", ["pydoc", "doctest", "unittest", "unittest.mock", "logging.config"])
def test_libraries_that_import_or_run_code_by_name_are_forbidden_imports(module):
    assert "forbidden-import" in _rules(_forward("return launch(x)", extra=f"import {module}\n"))


@pytest.mark.parametrize("name", ["types.FunctionType", "types.CodeType", "typing.get_type_hints", "typing.ForwardRef"])
def test_library_code_builders_are_forbidden_calls(name):
    module = name.split(".")[0]
    assert "forbidden-call" in _rules(_forward("return launch(x)", extra=f"import {module}\nf = {name}\n"))


def test_types_and_typing_names_that_build_no_code_stay_allowed():
    extra = "import types\nimport typing\nns = types.SimpleNamespace(a=1)\nT = typing.Optional[int]\n"
    assert _rules(_forward("return launch(x)", extra=extra)) == set()


def test_a_tensor_subclass_built_with_three_argument_type_is_caught():
    extra = "L = type('L', (torch.Tensor,), {'__torch_function__': classmethod(lambda *a, **k: None)})\n"
    assert {"tensor-subclass", "dunder-access"} <= _rules(_forward("return launch(x)", extra=extra))


def test_type_of_an_object_and_plain_three_argument_type_stay_allowed():
    extra = "Pair = type('Pair', (object,), {'size': 2})\nkind = type(1.0)\n"
    assert _rules(_forward("return launch(x)", extra=extra)) == set()


def test_registering_a_python_kernel_for_a_torch_op_is_a_monkey_patch():
    extra = "torch.ops.aten.relu.default.py_impl(torch.DispatchKey.CPU)(lambda x: x)\n"
    assert "monkey-patch" in _rules(_forward("return launch(x)", extra=extra))
