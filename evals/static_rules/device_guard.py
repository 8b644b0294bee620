"""Branches guarded by a device test: the side that runs only where there is no GPU.

Public kernels often carry a PyTorch fallback for CPU tensors
(``if not x.is_cuda: return torch.relu(x)``, ``if x.device.type == "cpu": ...``,
``if x.is_cuda: return launch(x)`` followed by ``return torch.relu(x)``). The
verifier makes a candidate's tensors report a GPU device while it judges it,
so that side does not run, and if it did the dispatch recorder
(``kgen.evals.checks.torch_usage``) would see its aten ops. So the torch-math family
does not report code on the non-GPU side of such a test; :func:`on_cpu_side`
says whether a node is there.

A test counts as a device test only in these forms (``t`` any expression):
``t.is_cuda``, ``t.is_cpu``, ``torch.cuda.is_available()``,
``t.device.type == "cuda"``/``"cpu"`` (or ``!=``, or ``t.type`` for a device
``t``), combined with ``not``, ``and``, ``or``. A side is the non-GPU one only
when every way into it implies the test says "no GPU": in
``if not x.is_cuda or n == 0:`` the body also runs on a GPU, so it is judged.
``try``/``except`` fallbacks are not device tests and stay rejected.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from kgen.evals.static_rules.ast_helpers import _literal_str, _parent

Resolve = Callable[[ast.AST | None], str | None]

_GPU_NAMES = ("cuda", "hip", "xpu")


def _atom(test: ast.AST, resolve: Resolve) -> str | None:
    """"gpu" when the test is true exactly on a GPU, "cpu" when true exactly off one, else None."""
    if isinstance(test, ast.Attribute) and test.attr in ("is_cuda", "is_cpu"):
        return "gpu" if test.attr == "is_cuda" else "cpu"
    if isinstance(test, ast.Call) and not test.args and resolve(test.func) == "torch.cuda.is_available":
        return "gpu"
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        sides = [test.left, test.comparators[0]]
        device = next((s for s in sides if isinstance(s, ast.Attribute) and s.attr == "type"), None)
        literal = next((_literal_str(s) for s in sides if _literal_str(s) is not None), None)
        if device is None or literal not in (*_GPU_NAMES, "cpu"):
            return None
        says_gpu = literal in _GPU_NAMES
        if isinstance(test.ops[0], ast.NotEq):
            says_gpu = not says_gpu
        return "gpu" if says_gpu else "cpu"
    return None


def true_only_off_gpu(test: ast.AST, resolve: Resolve) -> bool:
    """Whether ``test`` being true implies there is no GPU (its body is the non-GPU side)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return false_only_off_gpu(test.operand, resolve)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And):
            return any(true_only_off_gpu(v, resolve) for v in test.values)
        return all(true_only_off_gpu(v, resolve) for v in test.values)
    return _atom(test, resolve) == "cpu"


def false_only_off_gpu(test: ast.AST, resolve: Resolve) -> bool:
    """Whether ``test`` being false implies there is no GPU (its ``else`` is the non-GPU side)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return true_only_off_gpu(test.operand, resolve)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.Or):
            return any(false_only_off_gpu(v, resolve) for v in test.values)
        return all(false_only_off_gpu(v, resolve) for v in test.values)
    return _atom(test, resolve) == "gpu"


def _terminates(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _after_guard(stmt: ast.stmt, block: list[ast.stmt], resolve: Resolve) -> bool:
    """Whether an earlier ``if`` in ``block`` leaves only the non-GPU side to reach ``stmt``."""
    for earlier in block[: block.index(stmt)]:
        if not isinstance(earlier, ast.If):
            continue
        if _terminates(earlier.body) and false_only_off_gpu(earlier.test, resolve):
            return True  # if x.is_cuda: return launch(x)
        if earlier.orelse and _terminates(earlier.orelse) and true_only_off_gpu(earlier.test, resolve):
            return True
    return False


def on_cpu_side(node: ast.AST, resolve: Resolve) -> bool:
    """Whether ``node`` runs only where the device tests around it say there is no GPU."""
    child, parent = node, _parent(node)
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp)):
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            orelse = parent.orelse if isinstance(parent.orelse, list) else [parent.orelse]
            if child in body and true_only_off_gpu(parent.test, resolve):
                return True
            if child in orelse and false_only_off_gpu(parent.test, resolve):
                return True
        if isinstance(child, ast.stmt):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(parent, field, None)
                if isinstance(block, list) and child in block and _after_guard(child, block, resolve):
                    return True
        child, parent = parent, _parent(parent)
    return False
