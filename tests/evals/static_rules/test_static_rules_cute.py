"""The static rules on CuTe DSL candidates: ``@cute.kernel`` / ``@cute.jit`` functions are kernel
code exactly as ``@triton.jit`` ones are (the registry's ``kernel_decorators``), so a correct
CuTe module passes and the planted exploits of the Triton tests are caught in CuTe dress too."""

from __future__ import annotations

from kgen.evals.static_rules import check_candidate_source

HEADER = '''\
import torch
import torch.nn as nn
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def scale_kernel(gX: cute.Tensor, gY: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 256 + tidx
    if i < n:
        gY[i] = gX[i] * 2.0


@cute.jit
def scale(mX: cute.Tensor, mY: cute.Tensor, n: cutlass.Int32):
    scale_kernel(mX, mY, n).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))

'''

CORRECT = HEADER + '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        scale(from_dlpack(x.view(-1)), from_dlpack(y.view(-1)), x.numel())
        return y
'''


def _rules(source: str) -> set[str]:
    return {v.rule for v in check_candidate_source(source, "cand.py")}


def test_correct_cute_candidate_has_no_violations():
    assert check_candidate_source(CORRECT, "cand.py") == []


def test_cute_arithmetic_inside_kernels_is_the_kernel_not_torch_math():
    # operators, comparisons and subscript stores inside @cute.kernel / @cute.jit are device code
    source = CORRECT.replace("gY[i] = gX[i] * 2.0", "v = gX[i]\n        gY[i] = v * v + (v > 0) * 3.0 - v / 2")
    assert check_candidate_source(source, "cand.py") == []


def test_torch_math_in_forward_beside_a_trivial_cute_kernel_is_rejected():
    # the answer is computed by torch; the CuTe kernel only copies-and-scales a throwaway buffer
    source = HEADER + '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        scale(from_dlpack(x.view(-1)), from_dlpack(y.view(-1)), x.numel())
        z = y * 0.5
        return torch.nn.functional.gelu(x) + z
'''
    found = _rules(source)
    assert "torch-math" in found
    assert "tensor-operator" in found


def test_outputs_cached_in_a_module_dict_are_rejected():
    source = HEADER + '''
_CACHE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key not in _CACHE:
            y = torch.empty_like(x)
            scale(from_dlpack(x.view(-1)), from_dlpack(y.view(-1)), x.numel())
            _CACHE[key] = y
        return _CACHE[key]
'''
    assert "module-cache" in _rules(source)


def test_torch_inside_a_cute_kernel_or_jit_function_is_torch_in_kernel():
    in_kernel = CORRECT.replace("gY[i] = gX[i] * 2.0", "gY[i] = torch.exp(gX[i])")
    violations = check_candidate_source(in_kernel, "cand.py")
    assert {v.rule for v in violations} == {"torch-in-kernel"}
    assert "@cute.kernel" in violations[0].message
    in_host = CORRECT.replace("    scale_kernel(mX, mY, n).launch(", "    torch.relu_(mX)\n    scale_kernel(mX, mY, n).launch(")
    violations = check_candidate_source(in_host, "cand.py")
    assert {v.rule for v in violations} == {"torch-in-kernel"}
    assert "@cute.jit" in violations[0].message


def test_cute_kernel_by_call_and_by_full_module_path_counts_as_kernel_code():
    # `kernel = cute.kernel(fn)` and `@cutlass.cute.kernel` mark kernel code as the decorator does
    by_path = CORRECT.replace("@cute.kernel", "@cutlass.cute.kernel").replace("gY[i] = gX[i] * 2.0", "gY[i] = torch.exp(gX[i])")
    assert _rules(by_path) == {"torch-in-kernel"}
    by_call = CORRECT.replace("@cute.kernel\n", "").replace(
        "\n@cute.jit", "\nscale_kernel = cute.kernel(scale_kernel)\n\n@cute.jit"
    ).replace("gY[i] = gX[i] * 2.0", "gY[i] = torch.exp(gX[i])")
    assert _rules(by_call) == {"torch-in-kernel"}


def test_module_state_written_inside_a_cute_jit_function_is_still_a_cache():
    # a @cute.jit body runs as Python while it is traced: being kernel code is no licence to
    # keep state there (the torch-math family exempts kernel bodies; the state rules do not)
    source = CORRECT.replace(
        "@cute.jit\ndef scale(mX: cute.Tensor, mY: cute.Tensor, n: cutlass.Int32):\n",
        "_SEEN = {}\n\n\n@cute.jit\ndef scale(mX: cute.Tensor, mY: cute.Tensor, n: cutlass.Int32):\n    _SEEN[0] = mY\n",
    )
    assert "_SEEN[0] = mY" in source
    assert _rules(source) == {"module-cache"}


COMPILE_CACHES = {
    "module dict": '''
_COMPILED = {}


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        tx, ty = from_dlpack(x.view(-1)), from_dlpack(y.view(-1))
        key = (x.dtype, x.numel())
        if key not in _COMPILED:
            _COMPILED[key] = cute.compile(scale, tx, ty, x.numel())
        _COMPILED[key](tx, ty, x.numel())
        return y
''',
    "dict on self, with compile options": '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._compiled = {}

    def forward(self, x):
        y = torch.empty_like(x)
        tx, ty = from_dlpack(x.view(-1)), from_dlpack(y.view(-1))
        if x.dtype not in self._compiled:
            self._compiled[x.dtype] = cute.compile[cute.KeepPTX()](scale, tx, ty, x.numel())
        self._compiled[x.dtype](tx, ty, x.numel())
        return y
''',
    "setdefault on a module dict": '''
_KERNELS: dict = {}


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        tx, ty = from_dlpack(x.view(-1)), from_dlpack(y.view(-1))
        run = _KERNELS.get(x.shape) or _KERNELS.setdefault(x.shape, cute.compile(scale, tx, ty, x.numel()))
        run(tx, ty, x.numel())
        return y
''',
}


def test_compiled_executors_kept_across_calls_are_a_compile_cache_not_state():
    """A direct @cute.jit call re-traces its Python on every call; every real CuTe module keeps
    the executors cute.compile returns. Only the compile call's result may be kept."""
    for style, body in COMPILE_CACHES.items():
        assert _rules(HEADER + body) == set(), style


def test_an_output_kept_beside_the_compiled_executor_is_still_a_cache():
    body = '''
_COMPILED = {}


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        tx, ty = from_dlpack(x.view(-1)), from_dlpack(y.view(-1))
        if x.shape not in _COMPILED:
            _COMPILED[x.shape] = (cute.compile(scale, tx, ty, x.numel()), y)
            _COMPILED[x.shape][0](tx, ty, x.numel())
        return _COMPILED[x.shape][1]
'''
    assert "module-cache" in _rules(HEADER + body)
    laundered = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        self._last = y
        self._run = cute.compile(scale, from_dlpack(x.view(-1)), from_dlpack(y.view(-1)), x.numel())
        self._run(from_dlpack(x.view(-1)), from_dlpack(y.view(-1)), x.numel())
        return self._last
'''
    assert "instance-state" in _rules(HEADER + laundered)
