"""What every rule family reads: the parsed module, its imports and structure, and reporting.

:class:`_Context` parses nothing itself; it is handed the tree, resolves names to the dotted
paths they were imported as, finds classes, kernel functions (every registered backend's
``kernel_decorators``: ``@triton.jit``, ``@cute.kernel``, ``@cute.jit``), ``torch.nn`` module
instances and tensor attributes of ``self``, works out which functions run on the forward path
and which only from ``__init__``, and records violations. The rule families are mixins over it
(:mod:`.torch_math`, :mod:`.state`, :mod:`.escapes`, :mod:`.clock_env`), put together in
:mod:`.checker`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from kgen.backends.registry import all_kernel_decorators
from kgen.evals.problem.policies import Policies
from kgen.evals.static_rules.ast_helpers import (
    _is_getattr_literal,
    _is_main_test,
    _is_self,
    _literal_str,
    _local_names,
    _mutable_value,
    _parent,
    _target_names,
)
from kgen.evals.static_rules.device_guard import on_cpu_side
from kgen.evals.static_rules.math_scope import in_buffer_update, registered_buffers, seed_draw
from kgen.evals.static_rules.names import _NN_NOT_CALLABLE, _TENSOR_ALLOC
from kgen.evals.static_rules.reachability import FORWARD, INIT, Reachability
from kgen.evals.static_rules.violations import RULES, RuleViolation

#: the rules that judge only code that runs on a call (see :meth:`_Context._math_exempt`)
MATH_FAMILY = frozenset({"torch-math", "tensor-method", "tensor-operator", "torch-module-call"})


@dataclass
class _ClassInfo:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    mutable_attrs: set[str] = field(default_factory=set)


class _Context:
    """The parsed candidate and what the rules know about it; ``report`` records a violation."""

    def __init__(self, tree: ast.Module, filename: str, policies: Policies):
        self.tree = tree
        self.filename = filename
        self.policies = policies
        self.violations: list[RuleViolation] = []
        self._seen: set[tuple[str, int, str]] = set()
        self.nodes: list[ast.AST] = list(ast.walk(tree))
        self.functions = [n for n in self.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        for node in self.nodes:
            for child in ast.iter_child_nodes(node):
                child._kgen_parent = node  # type: ignore[attr-defined]
        self.bindings: dict[str, str] = {}  # local name -> dotted path it was imported as / aliases
        self.imported: set[str] = set()  # names bound by import statements
        self.module_names: dict[str, str] = {}  # module-level name -> "mutable"/"value"/"def"/"class"
        self.classes: dict[str, _ClassInfo] = {}
        #: kernel code of any backend (``kgen.backends.registry``'s ``kernel_decorators``)
        self.jit_functions: set[ast.AST] = set()
        #: kernel function -> its decorator as the source writes it ("triton.jit", "cute.kernel")
        self.kernel_decorator: dict[ast.AST, str] = {}
        self._kernel_decorators = all_kernel_decorators()
        self.nn_instances: set[str] = set()  # names / self-attributes holding torch.nn modules
        self.self_tensors: set[str] = set()  # "self.X" assigned a Parameter / buffer / allocation
        self.returns_tensor: set[ast.AST] = set()  # functions seen returning a tensor
        self.tensor_params: dict[ast.AST, set[str]] = {}  # function -> parameters passed tensors
        self.owner: dict[ast.AST, _ClassInfo | None] = {}  # function -> class it is a method of
        self.forward_path: set[ast.AST] = set()  # functions that can run on a forward call
        self.init_only: set[ast.AST] = set()  # functions that run only while constructing
        self.reach: Reachability | None = None
        self.buffers: set[str] = set()  # "self.X" registered as buffers (math_scope.registered_buffers)
        self.enclosing: dict[ast.AST, ast.AST | None] = {}  # node -> innermost enclosing function
        self.never_run: set[ast.AST] = self._main_guard_nodes()
        self._locals_cache: dict[ast.AST, set[str]] = {}
        self._handle_cache: dict[ast.AST | None, dict[str, str]] = {}  # scope -> names holding imports
        self._self_handle_cache: dict[str, str] | None = None  # self attributes holding imports

    def _main_guard_nodes(self) -> set[ast.AST]:
        """Nodes under a module-level ``if __name__ == "__main__":``, which never runs when imported.

        Only when nothing in the module assigns ``__name__`` (which would make the block run).
        """
        for node in self.nodes:
            if isinstance(node, ast.Name) and node.id == "__name__" and not isinstance(node.ctx, ast.Load):
                return set()
        out: set[ast.AST] = set()
        for stmt in self.tree.body:
            if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
                for child in stmt.body:
                    out.update(ast.walk(child))
        return out

    # -- reporting -------------------------------------------------------------------
    def report(self, rule: str, node: ast.AST, text: str) -> None:
        """Record a violation, unless ``node`` lies where ``rule`` does not look (its scope: the
        torch-math family judges only code that runs on a call, the others all but dead code)."""
        if node in self.never_run:
            return
        if rule in MATH_FAMILY:
            if self._math_exempt(node):
                return
        elif self.reach is not None and self.reach.clearly_dead(node):
            return
        line = getattr(node, "lineno", 0) or 0
        message = f"{self.filename}:{line}: {text}"
        key = (rule, line, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.violations.append(
            RuleViolation(rule=rule, line=line, message=message, rejection=RULES[rule][0])
        )

    # -- name resolution ---------------------------------------------------------------
    def resolve(self, node: ast.AST | None) -> str | None:
        """Dotted name of a Name/Attribute/getattr-literal chain rooted at an import, else None."""
        if isinstance(node, ast.Name):
            return self.bindings.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if node is not None and _is_getattr_literal(node):
            base = self.resolve(node.args[0])  # type: ignore[attr-defined]
            return f"{base}.{_literal_str(node.args[1])}" if base else None  # type: ignore[attr-defined]
        return None

    def _collect_bindings(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.bindings[alias.asname] = alias.name
                        self.imported.add(alias.asname)
                    else:
                        top = alias.name.split(".")[0]
                        self.bindings[top] = top
                        self.imported.add(top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    local = alias.asname or alias.name
                    self.bindings[local] = f"{node.module}.{alias.name}"
                    self.imported.add(local)
        # simple aliases: name = <resolvable chain>, to a fixed point
        for _ in range(4):
            changed = False
            for node in self.nodes:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    chain = self.resolve(node.value)
                    if chain is None:
                        continue
                    for target in targets:
                        if isinstance(target, ast.Name) and self.bindings.get(target.id) != chain:
                            self.bindings[target.id] = chain
                            changed = True
            if not changed:
                break

    def _collect_structure(self) -> None:
        for stmt in self._module_statements():
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                kind = "mutable" if stmt.value is not None and _mutable_value(stmt.value, self.resolve) else "value"
                for target in targets:
                    for name in _target_names(target):
                        if name not in self.imported:
                            self.module_names[name] = kind
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.module_names[stmt.name] = "def"
            elif isinstance(stmt, ast.ClassDef):
                self.module_names[stmt.name] = "class"
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                info = _ClassInfo(node)
                self.classes.setdefault(node.name, info)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        info.methods[item.name] = item
                        self.owner[item] = info
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None:
                        if _mutable_value(item.value, self.resolve):
                            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                            for target in targets:
                                info.mutable_attrs.update(_target_names(target))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._is_jit(node):
                self.jit_functions.add(node)
            # kernel = triton.jit(py_fn), cute.kernel(py_fn)
            if isinstance(node, ast.Call) and self.resolve(node.func) in self._kernel_decorators:
                for arg in node.args:
                    if isinstance(arg, ast.Name):
                        for fn in self.nodes:
                            if isinstance(fn, ast.FunctionDef) and fn.name == arg.id:
                                self.jit_functions.add(fn)
                                self.kernel_decorator.setdefault(fn, ast.unparse(node.func))
        # torch.nn module instances: x = nn.Linear(...), self.fc = nn.Linear(...)
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                if not self._is_nn_class(node.value.func):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                in_class_body = isinstance(_parent(node), ast.ClassDef)
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.nn_instances.add(target.id)
                        if in_class_body:
                            self.nn_instances.add(f"self.{target.id}")
                    elif isinstance(target, ast.Attribute) and _is_self(target.value):
                        self.nn_instances.add(f"self.{target.attr}")
        for node in self.nodes:
            # for layer in self.layers: layer(x)
            if isinstance(node, (ast.For, ast.comprehension)) and self._is_nn_holder(node.iter):
                self.nn_instances.update(_target_names(node.target))
            # self.weight = nn.Parameter(...), self.buf = torch.empty(...), self.register_buffer("buf", ...)
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                name = self.resolve(node.value.func)
                if name in _TENSOR_ALLOC or name in ("torch.nn.Parameter", "torch.nn.Buffer"):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Attribute) and _is_self(target.value):
                            self.self_tensors.add(f"self.{target.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("register_buffer", "register_parameter")
                and _is_self(node.func.value)
                and node.args
                and _literal_str(node.args[0])
            ):
                self.self_tensors.add(f"self.{_literal_str(node.args[0])}")
        # enclosing function of every node
        self._set_enclosing(self.tree, None)

    def _is_nn_holder(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.nn_instances
        if isinstance(node, ast.Attribute) and _is_self(node.value):
            return f"self.{node.attr}" in self.nn_instances
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("children", "modules", "values"):
            return self._is_nn_holder(node.func.value)
        return False

    def _set_enclosing(self, node: ast.AST, fn: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            self.enclosing[child] = fn
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else fn
            self._set_enclosing(child, inner)

    def _module_statements(self) -> Iterator[ast.stmt]:
        stack = list(self.tree.body)
        while stack:
            stmt = stack.pop(0)
            yield stmt
            if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                for name in ("body", "orelse", "finalbody"):
                    stack.extend(getattr(stmt, name, []) or [])
                for handler in getattr(stmt, "handlers", []) or []:
                    stack.extend(handler.body)

    def _is_jit(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Whether a decorator marks ``fn`` as kernel code of some registered backend."""
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self.resolve(target) in self._kernel_decorators:
                self.kernel_decorator.setdefault(fn, ast.unparse(target))
                return True
        return False

    def kernel_name_of(self, node: ast.AST) -> str:
        """The decorator of the kernel function around ``node``, as written ("@triton.jit")."""
        fn: ast.AST | None = node if node in self.jit_functions else self.enclosing.get(node)
        while fn is not None and fn not in self.jit_functions:
            fn = self.enclosing.get(fn)
        return f"@{self.kernel_decorator.get(fn, 'kernel')}" if fn is not None else "@kernel"

    def _is_nn_class(self, func: ast.AST) -> bool:
        name = self.resolve(func)
        if not name or not name.startswith("torch.nn."):
            return False
        parts = name.split(".")
        return len(parts) >= 3 and parts[-1][:1].isupper() and parts[-1] not in _NN_NOT_CALLABLE

    # -- reachability ------------------------------------------------------------------
    def _function_of(self, node: ast.AST) -> ast.AST | None:
        """The outermost function or method (module-level def or class method) containing node."""
        is_fn = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        fn = node if is_fn else self.enclosing.get(node)
        outer = None
        while fn is not None:
            outer = fn
            fn = self.enclosing.get(fn)
        return outer

    def _compute_paths(self) -> None:
        """Which functions run when (:mod:`.reachability`), and the registered buffers."""
        self._module_defs = {
            s.name: s for s in self.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.reach = Reachability(self.tree, self.never_run)
        self.forward_path = {fn for fn, where in self.reach.contexts.items() if FORWARD in where}
        self.init_only = {fn for fn, where in self.reach.contexts.items() if where == {INIT}}
        self.buffers = registered_buffers(self.nodes, self.resolve, self.nn_instances)

    def _per_call(self, fn: ast.AST | None) -> bool:
        """Whether ``fn`` runs only on forward calls (a closure it makes is fresh every call)."""
        return self.reach is not None and fn is not None and self.reach.contexts.get(fn) == {FORWARD}

    def _in_jit(self, node: ast.AST) -> bool:
        fn = self.enclosing.get(node)
        while fn is not None:
            if fn in self.jit_functions:
                return True
            fn = self.enclosing.get(fn)
        return node in self.jit_functions

    def _math_exempt(self, node: ast.AST) -> bool:
        """True where the torch-math family does not look: kernels, code that never runs or runs
        only while constructing, the non-GPU side of a device test (:mod:`.device_guard`),
        buffer updates and seed draws (:mod:`.math_scope`). Module-level code is judged."""
        if self._in_jit(node):
            return True
        if self.reach is None:
            return False
        where = self.reach.contexts_of(node)
        if where is not None and not where - {INIT}:
            return True
        return (
            on_cpu_side(node, self.resolve)
            or seed_draw(node, self.resolve)
            or in_buffer_update(node, self.buffers)
        )

    def _locals_at(self, node: ast.AST) -> set[str]:
        fn = self.enclosing.get(node)
        return self._locals_of(fn) if fn is not None else set()

    def _locals_of(self, fn: ast.AST) -> set[str]:
        found = self._locals_cache.get(fn)
        if found is None:
            found = self._locals_cache[fn] = _local_names(fn)
        return found

    def _bound_locally(self, node: ast.AST, name: str) -> bool:
        fn = self.enclosing.get(node)
        while fn is not None:
            if name in self._locals_of(fn):
                return True
            fn = self.enclosing.get(fn)
        return name in self.bindings or name in self.module_names

