"""Where the torch-math family does not look, besides dead code: state updates and seed draws.

Two things a correct KernelBench solution does in PyTorch without computing
its output, which the torch-math family (``torch-math``, ``tensor-method``,
``tensor-operator``, ``torch-module-call``) lets pass:

* updating a registered buffer, as BatchNorm in training mode updates its
  running statistics: a statement whose only store is into a buffer
  (``self.running_mean.mul_(1 - m).add_(m * mean)``,
  ``self.running_var = (1 - m) * self.running_var + m * var``,
  ``self.num_batches_tracked += 1``, ``self.bn.running_mean.copy_(...)``).
  The output is not made there; a candidate that parks its output in a buffer
  still fails at run time (state the reference leaves alone changed, a stale
  output, the aten ops the dispatch recorder sees);
* drawing a host seed from torch's generator, which the verifier seeds
  (``torch.randint(0, 2**31, (1,)).item()``, ``int(torch.randint(...))``):
  one number, not data. Python's ``random``, ``secrets``, ``os.urandom`` and
  clock-seeded generators stay ``clock-env``/``forbidden-import``.

:func:`registered_buffers` names the buffers (``register_buffer`` with a
literal name, ``nn.Buffer``, and ``running_mean``/``running_var``/
``num_batches_tracked`` of a ``torch.nn`` submodule); ``instance-state``
(:mod:`.state`) allows writes to them too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from kgen.evals.static_rules.ast_helpers import _is_self, _literal_str, _parent
from kgen.evals.static_rules.device_guard import Resolve

#: buffers every torch.nn norm module registers
NORM_BUFFERS = frozenset({"running_mean", "running_var", "num_batches_tracked"})
#: torch's generator draws that can make a host seed
_SEED_DRAWS = frozenset({"torch.randint", "torch.randn", "torch.rand"})


def registered_buffers(nodes: Iterable[ast.AST], resolve: Resolve, nn_instances: Iterable[str]) -> set[str]:
    """``"self.X"`` (and ``"self.m.running_mean"``) for every buffer the candidate registers,
    among its ``nodes``; ``nn_instances`` name the attributes that hold torch.nn modules."""
    found: set[str] = set()
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "register_buffer"
            and _is_self(node.func.value)
            and node.args
            and _literal_str(node.args[0])
        ):
            found.add(f"self.{_literal_str(node.args[0])}")
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            if resolve(node.value.func) == "torch.nn.Buffer":
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update(f"self.{t.attr}" for t in targets if isinstance(t, ast.Attribute) and _is_self(t.value))
    for holder in nn_instances:
        if holder.startswith("self."):
            found.update(f"{holder}.{name}" for name in NORM_BUFFERS)
    return found


def buffer_of(node: ast.AST, buffers: set[str]) -> str | None:
    """The buffer ``node`` is or indexes (``self.running_mean``, ``self.buf[0]``), else None."""
    while isinstance(node, ast.Subscript):
        node = node.value
    text = ast.unparse(node) if isinstance(node, ast.Attribute) else ""
    return text if text in buffers else None


def _inplace_chain_on_buffer(call: ast.AST, buffers: set[str]) -> bool:
    """``self.buf.mul_(a).add_(b)``: in-place methods only, down to a buffer."""
    seen = False
    while isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        name = call.func.attr
        if not (name.endswith("_") and not name.endswith("__")):
            return False
        seen = True
        call = call.func.value
    return seen and buffer_of(call, buffers) is not None


def buffer_update(stmt: ast.stmt, buffers: set[str]) -> bool:
    """Whether the statement's only effect is an update of registered buffers."""
    if isinstance(stmt, ast.Expr):
        return _inplace_chain_on_buffer(stmt.value, buffers)
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return all(buffer_of(t, buffers) is not None for t in targets)
    return False


def _statement_of(node: ast.AST) -> ast.stmt | None:
    while node is not None and not isinstance(node, ast.stmt):
        node = _parent(node)
    return node


def in_buffer_update(node: ast.AST, buffers: set[str]) -> bool:
    stmt = _statement_of(node)
    return stmt is not None and buffer_update(stmt, buffers)


def seed_draw(node: ast.AST, resolve: Resolve) -> bool:
    """Whether ``node`` names ``torch.randint`` & co. in a call that draws one host number."""
    call = _parent(node)
    return (
        isinstance(call, ast.Call)
        and call.func is node
        and resolve(node) in _SEED_DRAWS
        and _one_number(call)
    )


def _one_number(call: ast.Call) -> bool:
    """A draw of shape ``(1,)``/``()``, or one handed straight to ``.item()``/``int()``."""
    parent = _parent(call)
    if isinstance(parent, ast.Attribute) and parent.attr == "item":
        return True
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "int" and parent.args[:1] == [call]:
        return True
    size = next((k.value for k in call.keywords if k.arg == "size"), None)
    if size is None and call.args:
        size = call.args[-1] if isinstance(call.args[-1], (ast.Tuple, ast.List)) else None
    if isinstance(size, (ast.Tuple, ast.List)):
        return all(isinstance(e, ast.Constant) and e.value == 1 for e in size.elts)
    return False

