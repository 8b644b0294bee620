"""What strategy a CuTe DSL kernel module follows, read from its syntax tree.

The same coarse cells as the Triton backend's features (``backends/triton/features.py``),
so the search's MAP-Elites grid treats both languages alike: how many kernels, tensor
cores (warp MMA, warpgroup MMA, tcgen05), persistent CTAs, TMA, the block size class,
and whether loads are software-pipelined.
"""

from __future__ import annotations

import ast

from kgen.backends.source_names import names_in

_MMA_NAMES = ("MmaF16BF16Op", "MmaOp", "MmaTF32Op", "MmaF8Op", "warpgroup", "tcgen05", "make_trivial_tiled_mma",
              "make_tiled_mma")
_TMA_NAMES = ("CopyBulkTensorTileG2SOp", "CopyBulkTensorTileS2GOp", "make_tiled_tma_atom", "tma_partition",
              "CopyBulkTensorTileG2SMulticastOp")
_PIPELINE_NAMES = ("PipelineTmaAsync", "PipelineAsync", "PipelineTmaUmma", "PipelineCpAsync", "CopyG2SOp",
                   "cp_async_commit_group")
_SM_NAMES = ("multi_processor_count", "sm_count", "num_sms", "n_sms", "NUM_SMS", "max_active_clusters")


def _decorated(node: ast.FunctionDef, decorator: str) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == decorator:
            return True
        if isinstance(target, ast.Name) and target.id == decorator:
            return True
    return False


def _threads_per_block(tree: ast.AST) -> int:
    """The largest first ``block=`` dimension a launch gives as a literal or a module constant."""
    constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, int)}
    largest = 0
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "launch"):
            continue
        for kw in node.keywords:
            if kw.arg == "block" and isinstance(kw.value, (ast.List, ast.Tuple)) and kw.value.elts:
                first = kw.value.elts[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, int):
                    largest = max(largest, first.value)
                elif isinstance(first, ast.Name) and first.id in constants:
                    largest = max(largest, constants[first.id])
    return largest


def strategy_features(source: str) -> dict[str, str]:
    """Coarse strategy features of a CuTe DSL candidate module; empty when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    kernels = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _decorated(n, "kernel")]
    names = names_in(tree)
    threads = _threads_per_block(tree)
    return {
        "kernels": str(min(len(kernels), 3)) + ("+" if len(kernels) >= 3 else ""),
        "tensor_cores": "yes" if any(n in names for n in _MMA_NAMES) else "no",
        "persistent": "yes" if any(n in names for n in _SM_NAMES) else "no",
        "tma": "yes" if any(n in names for n in _TMA_NAMES) else "no",
        "block": "none" if not threads else "small" if threads <= 128 else "medium" if threads <= 512 else "large",
        "warps": "default" if not threads else "few" if threads <= 64 else "mid" if threads <= 256 else "many",
        "pipelined": "yes" if any(n in names for n in _PIPELINE_NAMES) else "no",
    }
