"""Strategy features of Triton candidates, as the search's MAP-Elites grid sees them.

Written in the styles models write: decorators spelled several ways, persistent
loops over ``tl.num_programs``, grids sized from the SM count, TMA descriptors.
"""

from __future__ import annotations

from kgen.backends.triton.features import strategy_features
from kgen.knowledge_base import SEED_KERNELS_DIR

ROW_KERNEL = '''
import torch, triton
import triton.language as tl
from triton import jit

@jit
def _row(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n)
    tl.store(y_ptr + row * n + cols, x * 2, mask=cols < n)

class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _row[(x.shape[0],)](x, y, x.shape[1], BLOCK=1024, num_warps=4)
        return y
'''

PERSISTENT_DOT = '''
import torch
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK_M": 128}, num_stages=4)], key=["M"])
@triton.jit
def _mm(a, b, c, M, N, K, BLOCK_M: tl.constexpr):
    for tile in range(tl.program_id(0), M // BLOCK_M, tl.num_programs(0)):
        acc = tl.dot(tl.load(a), tl.load(b))
        tl.store(c, acc)

@triton.jit
def _epilogue(c, n):
    pass

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        c = torch.empty(1)
        _mm[(sms,)](a, b, c, 1, 1, 1)
        _epilogue[(1,)](c, 1)
        return c
'''

TMA = '''
import torch, triton
import triton.language as tl

@triton.jit
def _copy(desc, out, BLOCK: tl.constexpr):
    d = tl.make_tensor_descriptor(desc, shape=[1], strides=[1], block_shape=[BLOCK])
    tl.store(out, d.load([0]))

class ModelNew(torch.nn.Module):
    def forward(self, x):
        _copy[(1,)](x, x, BLOCK=8192)
        return x
'''


def test_a_one_kernel_row_program():
    assert strategy_features(ROW_KERNEL) == {
        "kernels": "1", "tensor_cores": "no", "persistent": "no", "tma": "no", "block": "medium",
        "warps": "mid", "pipelined": "no",
    }


def test_a_persistent_two_kernel_matmul_on_tensor_cores():
    features = strategy_features(PERSISTENT_DOT)
    assert (features["kernels"], features["tensor_cores"], features["persistent"]) == ("2", "yes", "yes")
    assert features["tma"] == "no"


def test_tma_and_a_large_block():
    features = strategy_features(TMA)
    assert (features["tma"], features["block"], features["persistent"]) == ("yes", "large", "no")


def test_retuning_keeps_the_cell_features():
    """The cell is the strategy: warps move, the cell features (kernels, block class) do not."""
    retuned = ROW_KERNEL.replace("num_warps=4", "num_warps=16")
    a, b = strategy_features(ROW_KERNEL), strategy_features(retuned)
    assert a["warps"] != b["warps"]
    assert {k: a[k] for k in ("kernels", "tensor_cores", "persistent", "tma", "block")} == {
        k: b[k] for k in ("kernels", "tensor_cores", "persistent", "tma", "block")}


def test_every_shipped_seed_has_features_and_broken_source_has_none():
    for path in sorted((SEED_KERNELS_DIR / "triton").glob("*.py")):
        assert strategy_features(path.read_text())["kernels"] != "0", path.name
    assert strategy_features("def broken(:\n") == {}
