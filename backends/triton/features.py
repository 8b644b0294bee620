"""What strategy a Triton kernel module follows, read from its syntax tree.

The search's MAP-Elites grid (``agent/search/archive.py``) keeps the fastest kernel of
each strategy, so a slower kernel with a different idea (persistent programs,
a matmul on tensor cores, a two-kernel split) survives beside the leader and can
be improved or crossed later instead of being pushed out by one lucky tuning.
The features are coarse on purpose: a cell should hold a family of kernels, not
one configuration.
"""

from __future__ import annotations

import ast

from kgen.backends.source_names import names_in

_TMA_NAMES = ("make_tensor_descriptor", "tensor_descriptor", "_experimental_descriptor", "TensorDescriptor")
_SM_NAMES = ("multi_processor_count", "sm_count", "num_sms", "n_sms", "NUM_SMS")


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("jit", "autotune", "heuristics")


def _int_keywords(tree: ast.AST, keyword: str) -> list[int]:
    values = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == keyword and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, int):
                    values.append(kw.value.value)
    return values


def _block_literals(tree: ast.AST) -> list[int]:
    """Power-of-two literals given to names that read as block sizes (BLOCK, TILE, ...)."""
    values = []
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.expr]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Call):
            pairs = [(kw.arg, kw.value) for kw in node.keywords if kw.arg]
        for name, value in pairs:
            if ("BLOCK" in name.upper() or "TILE" in name.upper()) and isinstance(value, ast.Constant) \
                    and isinstance(value.value, int) and value.value > 0 and value.value & (value.value - 1) == 0:
                values.append(value.value)
    return values


def _persistent(kernels: list[ast.FunctionDef], names: set[str]) -> bool:
    """A kernel that loops over work items from its program id (a grid sized to the SMs)."""
    if any(n in names for n in _SM_NAMES):
        return True
    for kernel in kernels:
        for node in ast.walk(kernel):
            if isinstance(node, ast.For) and any(
                isinstance(n, ast.Attribute) and n.attr in ("program_id", "num_programs")
                for n in ast.walk(node.iter)
            ):
                return True
    return False


def strategy_features(source: str) -> dict[str, str]:
    """Coarse strategy features of a Triton candidate module; empty when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    kernels = [n for n in ast.walk(tree)
               if isinstance(n, ast.FunctionDef) and any(_is_jit(d) for d in n.decorator_list)]
    names = set().union(*(names_in(k) for k in kernels)) if kernels else set()
    all_names = names_in(tree)
    blocks = _block_literals(tree)
    warps = _int_keywords(tree, "num_warps")
    stages = _int_keywords(tree, "num_stages")
    biggest = max(blocks, default=0)
    return {
        "kernels": str(min(len(kernels), 3)) + ("+" if len(kernels) >= 3 else ""),
        "tensor_cores": "yes" if "dot" in names or "dot_scaled" in names else "no",
        "persistent": "yes" if _persistent(kernels, all_names) else "no",
        "tma": "yes" if any(n in all_names for n in _TMA_NAMES) else "no",
        "block": "none" if not biggest else "small" if biggest <= 256 else "medium" if biggest <= 2048 else "large",
        "warps": "default" if not warps else "few" if max(warps) <= 2 else "mid" if max(warps) <= 8 else "many",
        "pipelined": "yes" if any(s >= 3 for s in stages) else "no",
    }
