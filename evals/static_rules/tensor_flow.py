"""Tensor arithmetic through operators (``tensor-operator``): a small statement-order type tracker.

Which local names hold tensors is followed through one function at a time, in statement
order: ``forward``'s parameters, tensor-annotated parameters, ``nn.Parameter``/buffer attributes
of ``self``, torch allocations and view/cast methods of tensors; across the candidate's own
helpers, parameters that are passed tensors and helpers that return them (found as a fixed
point by :meth:`~kgen.evals.static_rules.torch_math._TorchMathRules._check_tensor_flow`).
Arithmetic, unary and comparison operators and the ``sum``/``abs``/``pow``/``min``/``max``/
``round`` builtins on a tensor are ``tensor-operator``; an attribute stored on a tensor
(``x._out = out``) is ``instance-state``.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kgen.evals.static_rules.ast_helpers import _is_self, _params, _self_attr_root, _short
from kgen.evals.static_rules.names import (
    _ARITH_CMP,
    _NON_TENSOR_ANNOTATIONS,
    _TENSOR_ALLOC,
    _TENSOR_ATTRS,
    _TENSOR_BUILTINS,
    _TENSOR_SEQUENCE_METHODS,
    ALLOWED_METHODS,
    is_compute_method,
)

if TYPE_CHECKING:
    from kgen.evals.static_rules.context import _Context


class _TensorFlow:
    """Tracks which local names hold tensors in one function and flags operators on them."""

    def __init__(
        self,
        checker: _Context,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        inherited: set[str] | None = None,
        silent: bool = False,
    ):
        self.c = checker
        self.fn = fn
        self.silent = silent
        self.tensors: set[str] = set(inherited or ())
        params = _params(fn)
        for arg in params:
            self.tensors.discard(arg.arg)
        is_forward = fn.name == "forward" and checker.owner.get(fn) is not None
        passed = checker.tensor_params.get(fn, set())
        for arg in params:
            if arg.arg in ("self", "cls", "ctx"):
                continue
            if arg.arg in passed and not self._non_tensor_annotation(arg.annotation):
                self.tensors.add(arg.arg)
                continue
            if self._tensor_annotation(arg.annotation) or (is_forward and not self._non_tensor_annotation(arg.annotation)):
                self.tensors.add(arg.arg)

    def _tensor_annotation(self, ann: ast.AST | None) -> bool:
        if ann is None:
            return False
        name = self.c.resolve(ann) or (ann.id if isinstance(ann, ast.Name) else "")
        return name in ("torch.Tensor", "Tensor", "torch.nn.Parameter")

    def _non_tensor_annotation(self, ann: ast.AST | None) -> bool:
        if ann is None:
            return False
        if isinstance(ann, ast.Name) and ann.id in _NON_TENSOR_ANNOTATIONS:
            return True
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value in _NON_TENSOR_ANNOTATIONS
        return not self._tensor_annotation(ann) and not isinstance(ann, (ast.BinOp, ast.Subscript))

    def run(self) -> None:
        self.block(self.fn.body)

    # -- classification --------------------------------------------------------------------
    def is_tensor(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.tensors
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        if isinstance(node, ast.Attribute):
            if _is_self(node.value):
                return f"self.{node.attr}" in self.c.self_tensors
            return node.attr in _TENSOR_ATTRS and self.is_tensor(node.value)
        if isinstance(node, ast.Call):
            name = self.c.resolve(node.func)
            if name in _TENSOR_ALLOC:
                return True
            if self._callee(node.func) in self.c.returns_tensor:
                return True
            if isinstance(node.func, ast.Attribute) and name is None:
                attr = node.func.attr
                if attr in ALLOWED_METHODS - {"stride", "size", "numel", "nelement", "dim", "ndimension", "is_contiguous", "data_ptr", "element_size", "storage_offset", "item", "get_device", "is_floating_point", "is_complex", "untyped_storage", "dim_order", "is_pinned"}:
                    return attr not in _TENSOR_SEQUENCE_METHODS and self.is_tensor(node.func.value)
                if is_compute_method(attr):
                    return self.is_tensor(node.func.value)
            return False
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self.is_tensor(node.operand)
        if isinstance(node, ast.Compare):
            return any(isinstance(op, _ARITH_CMP) for op in node.ops) and any(
                self.is_tensor(x) for x in [node.left, *node.comparators]
            )
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body) or self.is_tensor(node.orelse)
        if isinstance(node, ast.NamedExpr):
            return self.is_tensor(node.value)
        return False

    def _callee(self, func: ast.AST) -> ast.AST | None:
        """The candidate's own function a call goes to: helper(...), self.helper(...), Fn.apply(...)."""
        c = self.c
        if isinstance(func, ast.Name) and c.module_names.get(func.id) == "def":
            return c._module_defs.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner == "self":
                info = c.owner.get(c._function_of(self.fn))
                return info.methods.get(func.attr) if info else None
            if owner in c.classes and c.module_names.get(owner) == "class":
                method = "forward" if func.attr == "apply" else func.attr
                return c.classes[owner].methods.get(method)
        return None

    def _note_tensor_arguments(self, call: ast.Call) -> None:
        """Remember which parameters of the candidate's own functions receive tensors."""
        callee = self._callee(call.func)
        if callee is None or callee in self.c.jit_functions:
            return
        params = [a.arg for a in [*callee.args.posonlyargs, *callee.args.args]]  # type: ignore[attr-defined]
        bound_first = isinstance(call.func, ast.Attribute) and (
            _is_self(call.func.value) or call.func.attr == "apply"
        )
        if bound_first or (params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute)):
            params = params[1:]
        found = self.c.tensor_params.setdefault(callee, set())
        for name, arg in zip(params, call.args, strict=False):
            if self.is_tensor(arg):
                found.add(name)
        for keyword in call.keywords:
            if keyword.arg and self.is_tensor(keyword.value):
                found.add(keyword.arg)

    def _tensor_elements(self, node: ast.AST) -> bool:
        """A list/tuple/comprehension of tensors (sum(row for row in x), max([a, b]))."""
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            return self.is_tensor(node.elt)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return any(self.is_tensor(e) for e in node.elts)
        return self._is_tensor_sequence(node)

    def _is_tensor_sequence(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _TENSOR_SEQUENCE_METHODS
            and self.is_tensor(node.func.value)
        )

    # -- binding -------------------------------------------------------------------------------
    def bind(self, target: ast.AST, value: ast.AST | None, element_tensor: bool | None = None) -> None:
        if isinstance(target, ast.Name):
            tensor = element_tensor if element_tensor is not None else self.is_tensor(value)
            (self.tensors.add if tensor else self.tensors.discard)(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self.bind(t, v)
            else:
                elem = value is not None and (self._is_tensor_sequence(value) or self.is_tensor(value))
                for t in target.elts:
                    self.bind(t, None, element_tensor=bool(elem))
        elif isinstance(target, ast.Starred):
            self.bind(target.value, None, element_tensor=False)

    # -- statements ------------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt not in self.c.jit_functions:
                _TensorFlow(self.c, stmt, inherited=self.tensors, silent=self.silent).run()
            return
        if isinstance(stmt, ast.ClassDef):
            return
        if isinstance(stmt, ast.Assign):
            self.scan(stmt.value)
            for target in stmt.targets:
                self.scan_target(target)
                self._tensor_attribute_store(stmt, target)
                self.bind(target, stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            self.scan(stmt.value)
            if stmt.value is not None:
                self.bind(stmt.target, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self.scan(stmt.value)
            self.scan_target(stmt.target)
            self._tensor_attribute_store(stmt, stmt.target)
            if not isinstance(stmt.op, ast.MatMult) and (self.is_tensor(stmt.target) or self.is_tensor(stmt.value)):
                self.report("tensor-operator", stmt, f"`{ast.unparse(stmt)}` is tensor arithmetic outside a kernel")
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.scan(stmt.iter)
            elem = self.is_tensor(stmt.iter) or self._is_tensor_sequence(stmt.iter)
            self.bind(stmt.target, None, element_tensor=elem)
            self.block(stmt.body)
            self.block(stmt.orelse)
        elif isinstance(stmt, (ast.While, ast.If)):
            self.scan(stmt.test)
            self.block(stmt.body)
            self.block(stmt.orelse)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self.scan(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, None, element_tensor=False)
            self.block(stmt.body)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.block(stmt.body)  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                self.block(handler.body)
            self.block(stmt.orelse)  # type: ignore[attr-defined]
            self.block(stmt.finalbody)  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.Return):
            self.scan(stmt.value)
            value = stmt.value
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            if any(self.is_tensor(v) for v in values):
                self.c.returns_tensor.add(self.fn)
        elif isinstance(stmt, ast.Match):
            self.scan(stmt.subject)
            for case in stmt.cases:
                self.block(case.body)
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self.scan(child)

    def _tensor_attribute_store(self, stmt: ast.stmt, target: ast.AST) -> None:
        """x._out = out: state parked on an input tensor survives to the next call with that tensor."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._tensor_attribute_store(stmt, elt)
        elif isinstance(target, ast.Attribute) and not _self_attr_root(target) and self.is_tensor(target.value):
            self.report("instance-state", stmt, f"`{ast.unparse(target)}` stores state on a tensor")

    def scan_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Subscript):
            self.scan(target.slice)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.scan_target(elt)

    # -- expressions ------------------------------------------------------------------------------
    def scan(self, expr: ast.AST | None) -> None:
        if expr is None:
            return
        saved = set(self.tensors)
        for node in ast.walk(expr):
            if isinstance(node, ast.comprehension):
                elem = self.is_tensor(node.iter) or self._is_tensor_sequence(node.iter)
                self.bind(node.target, None, element_tensor=elem)
        for node in ast.walk(expr):
            self.check_expr(node)
        # comprehension targets do not leak; walrus targets do
        named = {n.target.id: self.is_tensor(n.value) for n in ast.walk(expr) if isinstance(n, ast.NamedExpr)}
        self.tensors = saved | {k for k, v in named.items() if v}

    def report(self, rule: str, node: ast.AST, text: str) -> None:
        if not self.silent:
            self.c.report(rule, node, text)

    def check_expr(self, node: ast.AST) -> None:
        report = self.report
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            if self.is_tensor(node.left) or self.is_tensor(node.right):
                report("tensor-operator", node, f"`{_short(node)}` is tensor arithmetic outside a kernel")
        elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            if self.is_tensor(node.operand):
                report("tensor-operator", node, f"`{_short(node)}` is tensor arithmetic outside a kernel")
        elif isinstance(node, ast.Compare):
            if self.is_tensor(node):
                report("tensor-operator", node, f"`{_short(node)}` is a tensor comparison outside a kernel")
        if isinstance(node, ast.Call):
            self._note_tensor_arguments(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in _TENSOR_BUILTINS and name not in self.c.bindings and name not in self.c.module_names:
                if any(self.is_tensor(a) or self._tensor_elements(a) for a in node.args):
                    report("tensor-operator", node, f"`{name}()` on a tensor computes in PyTorch")
