"""The checker: one pass over every node, each rule family asked in a fixed order.

:class:`_Checker` combines the families (mixins over :class:`~.context._Context`). Where
several families look at the same node (an import, a call, a dotted name), the order they are
asked in here decides which rule reports it, and the first report ends the look at that name;
keep the order when adding a rule.
"""

from __future__ import annotations

import ast

from kgen.evals.static_rules.ast_helpers import _is_getattr_literal, _literal_str, _parent
from kgen.evals.static_rules.clock_env import _ClockEnvRules
from kgen.evals.static_rules.escapes import _EscapeRules
from kgen.evals.static_rules.names import _STREAM_METHODS
from kgen.evals.static_rules.state import _StateRules
from kgen.evals.static_rules.torch_math import _TorchMathRules
from kgen.evals.static_rules.violations import RuleViolation


class _Checker(_TorchMathRules, _StateRules, _EscapeRules, _ClockEnvRules):
    def run(self) -> list[RuleViolation]:
        self._collect_bindings()
        self._collect_structure()
        self._compute_paths()
        for node in self.nodes:
            self._check_node(node)
        self._check_module_state()
        self._check_instance_state()
        self._check_tensor_flow()
        self.violations.sort(key=lambda v: (v.line, v.rule))
        return self.violations

    def _check_node(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self._check_try(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self._check_import(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            self._check_global(node)
        elif isinstance(node, ast.ClassDef):
            self._check_class_escapes(node)
            self._check_exit_methods(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._check_function_def(node)
        elif isinstance(node, ast.BinOp):
            self._check_matmul_operator(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            self._check_matmul_operator(node)
            self._check_store(node)
        elif isinstance(node, ast.Call):
            self._check_call(node)
        if isinstance(node, (ast.Name, ast.Attribute)) or _is_getattr_literal(node):
            self._check_chain(node)

    def _check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        modules: list[str] = []
        if self._import_torch_library_ok(node):
            return
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif node.module and not node.level:
            if self._star_import(node):
                return
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        rules = (
            self._import_forbidden_module,
            self._import_compute_library,
            self._import_forbidden_submodule,
            self._import_torch_private,
            self._import_cache_decorator,
            self._import_clock_env,
        )
        for module in modules:
            if any(rule(node, module) for rule in rules):
                return  # one report per import statement

    def _check_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id not in self.bindings:
            name = func.id
            if name in ("getattr", "hasattr") and node.args:
                attr = node.args[1] if len(node.args) > 1 else None
                literal = _literal_str(attr)
                if not self._getattr_escape(node, name, attr, literal) and not self._getattr_compute(node, name, literal):
                    self._getattr_clock_env(node, name, literal)
            elif name in ("setattr", "delattr") and node.args:
                self._setattr_escape(node, name)
        if isinstance(func, ast.Name) and func.id == "type" and "type" not in self.bindings:
            self._type_call_escape(node)
        self._stream_method_call(node)
        self._nn_module_call(node)
        self._asm_clock_env(node)

    def _check_chain(self, node: ast.AST) -> None:
        parent = _parent(node)
        self._check_dunder_attribute(node)
        # only maximal chains: not the .value of a longer attribute chain or getattr literal
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if self.resolve(parent) is not None:
                return
        if _is_getattr_literal(parent) and parent.args[0] is node:  # type: ignore[union-attr]
            return
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                return
            self._check_name(node)
        elif isinstance(node, ast.Attribute):
            if not isinstance(node.ctx, ast.Load):
                return
            if node.attr in _STREAM_METHODS:
                return  # reported at the call
            if self.resolve(node) is None:
                self._check_method_reference(node, parent)
                self._attribute_clock_env(node)
                return
        chain = self.resolve(node)
        if chain is None:
            return
        self._check_dotted(node, chain, parent)

    def _check_dotted(self, node: ast.AST, chain: str, parent: ast.AST | None) -> None:
        parts = chain.split(".")
        top = parts[0]
        called = isinstance(parent, ast.Call) and parent.func is node
        shown = f"{chain}(...)" if called else chain
        if self._dotted_cache_decorator(node, chain):
            return
        if top == "operator" and len(parts) == 2:
            self._operator_arith(node, chain)
            self._operator_indirect(node, chain)
            return
        if self._dotted_suppress(node, chain):
            return
        if top in ("builtins", "__builtins__"):
            return  # reported at the import
        if self._dotted_escape_segment(node, chain):
            return
        if self._dotted_code_builder(node, chain):
            return
        if top != "torch":
            self._dotted_clock_env(node, chain, shown)
            return
        if self._dotted_torch_in_kernel(node, chain):
            return
        if self._dotted_torch_library(node, chain):
            return  # a Triton kernel registered as a custom op: neither an escape nor math
        if self._dotted_torch_ops_registration(node, chain):
            return
        if self._dotted_torch_escapes(node, chain, shown):
            return
        if self._dotted_clock_env(node, chain, shown):
            return
        self._dotted_torch_math(node, chain, shown)
