"""Forbidden constructs (``FORBIDDEN_CONSTRUCT``): state kept from one call to the next.

* ``module-cache`` — module-level state written from a function: stores or
  mutating calls (``append``, ``update``, ``setdefault``, in-place tensor ops,
  ...) through a module-level name, attribute stores on module-level
  objects/classes/functions, class-level mutable attributes mutated through
  ``self``/the class, mutable default arguments that the function writes to
  (``def f(x, _cache={})``), and closure variables of a factory that
  outlives the call (``def make(): cache = {}; def run(x): cache[k] = ...``).
  Read-only module constants (ints, floats, tuples, even lists that nobody
  mutates) are fine.
* ``global-statement`` — ``global`` and ``nonlocal``.
* ``cache-decorator`` — ``functools.lru_cache``/``cache``/``cached_property``.
* ``instance-state`` — writing to ``self`` on the forward path (any method
  reachable from ``forward``/``__call__``, ``__init__`` excepted):
  ``self.calls += 1``, ``self._out = out``, ``self._memo[k] = v``,
  ``setattr(self, ...)``, ``self.register_buffer(...)``, in-place ops on
  ``self.X`` other than ``zero_``/``fill_``; also attributes stored on a
  tensor (``x._out = out``). Re-laying out an attribute in place
  (``self.w.data = self.w.data.contiguous()``) is allowed. State carried
  from one call to the next is how outputs get cached and how checks get
  told apart from timing. Updating a registered buffer (in place, by
  reassignment, ``+=``, or by index) is allowed: it is how BatchNorm in
  training mode keeps its running statistics, which KernelBench references
  update too (:func:`~.math_scope.registered_buffers` names the buffers). Run
  time judges it: a forward that changes state the reference leaves alone is
  ``state_mutation``, one that hands out a buffer it writes again is
  ``stale_output``. ``self.register_buffer(...)`` on the forward path, plain
  attributes, parameters and containers on ``self`` stay ``instance-state``.
"""

from __future__ import annotations

import ast

from kgen.backends.registry import all_compile_functions
from kgen.evals.static_rules.ast_helpers import (
    _assignment_targets,
    _is_self,
    _mutable_value,
    _relayout_of,
    _root_name,
    _self_attr_root,
    _store_targets,
    _walk_own,
)
from kgen.evals.static_rules.context import _ClassInfo, _Context
from kgen.evals.static_rules.math_scope import buffer_of
from kgen.evals.static_rules.names import _CACHE_DECORATORS, _MUTATORS


class _StateRules(_Context):
    """module-cache, global-statement, cache-decorator, instance-state."""

    def _check_global(self, node: ast.Global | ast.Nonlocal) -> None:
        word = "global" if isinstance(node, ast.Global) else "nonlocal"
        self.report("global-statement", node, f"`{word} {', '.join(node.names)}` keeps state across calls")

    # -- cache-decorator ----------------------------------------------------------------------
    def _import_cache_decorator(self, node: ast.AST, module: str) -> bool:
        if module in _CACHE_DECORATORS:
            self.report("cache-decorator", node, f"`{module}` caches results across calls")
            return True
        return False

    def _dotted_cache_decorator(self, node: ast.AST, chain: str) -> bool:
        if chain in _CACHE_DECORATORS:
            self.report("cache-decorator", node, f"`{chain}` caches results across calls")
            return True
        return False

    # -- module-cache ---------------------------------------------------------------------------
    def _check_function_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            if _mutable_value(default, self.resolve) and self._mutated_in(node, arg.arg):
                self.report(
                    "module-cache", default,
                    f"mutable default argument `{arg.arg}` of {node.name}() is written to: it persists across calls",
                )

    def _mutated_in(self, fn: ast.AST, name: str) -> bool:
        """Whether ``name`` is stored into (``name[k] = v``, ``name.a = v``) or mutated by a method call."""
        for node in ast.walk(fn):
            targets = _assignment_targets(node)
            for target in targets:
                for sub in _store_targets(target):
                    root = _root_name(sub)
                    if isinstance(sub, (ast.Attribute, ast.Subscript)) and root is not None and root.id == name:
                        return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                method = node.func.attr
                root = _root_name(node.func.value)
                if root is not None and root.id == name and (
                    method in _MUTATORS or (method.endswith("_") and not method.endswith("__"))
                ):
                    return True
        return False

    def _check_module_state(self) -> None:
        class_attrs = {name: info.mutable_attrs for name, info in self.classes.items()}
        # kernel functions are judged too: a Triton body runs as Python under the CPU interpreter,
        # and a @cute.jit one while it is traced, so either could write module state there
        for fn in self.functions:
            local = self._locals_of(fn)
            info = self.owner.get(fn)
            for node in _walk_own(fn):
                targets = _assignment_targets(node)
                for target in targets:
                    for sub in _store_targets(target):
                        self._check_state_store(sub, node, local, info, class_attrs)
                        self._check_closure_state(fn, sub, node, local)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    self._check_state_mutator(node, local, info, class_attrs)
                    name = node.func.attr
                    if name in _MUTATORS or (name.endswith("_") and not name.endswith("__")):
                        self._check_closure_state(fn, node.func.value, node, local, allow_root=True)

    def _check_closure_state(self, fn, sub, node, local, allow_root: bool = False) -> None:
        """Writes into a variable captured from an enclosing function that outlives the call."""
        if not allow_root and not isinstance(sub, (ast.Attribute, ast.Subscript)):
            return
        root = _root_name(sub)
        if root is None or root.id in local or root.id == "self":
            return
        owner = self.enclosing.get(fn)
        while owner is not None and root.id not in self._locals_of(owner):
            owner = self.enclosing.get(owner)
        if owner is None or self._per_call(self._function_of(owner)):
            return  # not a closure variable, or one created afresh on every call
        owner_name = getattr(owner, "name", "<lambda>")
        self.report("module-cache", node, f"writes into `{root.id}` captured from {owner_name}() (state kept across calls)")

    def _module_level(self, root: ast.Name, local: set[str]) -> bool:
        return root.id in self.module_names and root.id not in local and root.id not in self.imported

    def _stores_compiled_kernel(self, node: ast.AST) -> bool:
        """``CACHE[key] = cute.compile(fn, ...)``: the value stored is a compiled executor (a
        backend's compile call, ``registry.all_compile_functions``). Every real CuTe module
        keeps one (a direct call re-traces on every call); the executor computes from the
        arguments it is handed, and the run-time checks (cache probe, stale outputs) judge
        what a cache returns. Anything else stored alongside is still state."""
        value = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setdefault":
            value = node.args[1] if len(node.args) == 2 else None
        if not isinstance(value, ast.Call):
            return False

        func = value.func.value if isinstance(value.func, ast.Subscript) else value.func  # cute.compile[opts](...)
        return self.resolve(func) in all_compile_functions()

    def _check_state_store(self, sub, node, local, info, class_attrs) -> None:
        if not isinstance(sub, (ast.Attribute, ast.Subscript)):
            return
        if self._stores_compiled_kernel(node):
            return
        root = _root_name(sub)
        if root is None:
            return
        if self._module_level(root, local):
            self.report("module-cache", node, f"writes into module-level `{root.id}` (state kept across calls)")
            return
        # class-level mutable attribute written through self / the class: self.CACHE[k] = v
        attr = self._class_attr(sub, info, class_attrs)
        if attr and isinstance(sub, ast.Subscript):
            self.report("module-cache", node, f"writes into class-level `{attr}` (state kept across calls)")

    def _class_attr(self, sub: ast.AST, info: _ClassInfo | None, class_attrs) -> str | None:
        base = sub.value if isinstance(sub, (ast.Subscript, ast.Attribute)) else None
        while isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            owner = base.value.id
            if owner in ("self", "cls") and info is not None and base.attr in info.mutable_attrs:
                return f"{info.node.name}.{base.attr}"
            if owner in class_attrs and base.attr in class_attrs[owner]:
                return f"{owner}.{base.attr}"
        return None

    def _check_state_mutator(self, node: ast.Call, local, info, class_attrs) -> None:
        func = node.func
        assert isinstance(func, ast.Attribute)
        name = func.attr
        inplace = name.endswith("_") and not name.endswith("__")
        if name not in _MUTATORS and not inplace:
            return
        receiver = func.value
        root = _root_name(receiver)
        if root is None:
            return
        if self._stores_compiled_kernel(node):
            return
        if self._module_level(root, local):
            self.report("module-cache", node, f"`.{name}()` mutates module-level `{root.id}` (state kept across calls)")
            return
        probe = ast.Subscript(value=receiver, slice=ast.Constant(0), ctx=ast.Load())
        attr = self._class_attr(probe, info, class_attrs)
        if attr:
            self.report("module-cache", node, f"`.{name}()` mutates class-level `{attr}` (state kept across calls)")

    def _check_instance_state(self) -> None:
        for fn in self.forward_path:
            if getattr(fn, "name", "") == "__init__":
                continue
            for node in ast.walk(fn):
                targets = _assignment_targets(node)
                for target in targets:
                    for sub in _store_targets(target):
                        if isinstance(sub, (ast.Attribute, ast.Subscript)) and _self_attr_root(sub):
                            if isinstance(node, ast.Assign) and _relayout_of(node.value, sub):
                                continue  # self.w.data = self.w.data.contiguous(): same values, new layout
                            if self._stores_compiled_kernel(node):
                                continue  # self._compiled[key] = cute.compile(...): a compile cache
                            if buffer_of(sub, self.buffers) is not None:
                                continue  # self.running_mean = ...: a registered buffer's update
                            self.report("instance-state", node, f"`{ast.unparse(sub)}` written on the forward path (state kept across calls)")
                if isinstance(node, ast.Call):
                    func = node.func
                    if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args and _is_self(node.args[0]):
                        self.report("instance-state", node, f"{func.id}(self, ...) on the forward path (state kept across calls)")
                    elif isinstance(func, ast.Attribute) and _self_attr_root(func.value) or (
                        isinstance(func, ast.Attribute) and _is_self(func.value)
                    ):
                        name = func.attr
                        inplace = name.endswith("_") and not name.endswith("__") and name not in ("zero_", "fill_")
                        if inplace and buffer_of(_receiver_root(func.value), self.buffers) is not None:
                            continue  # self.running_mean.mul_(1 - m).add_(m * mean)
                        if name in _MUTATORS or inplace:
                            self.report("instance-state", node, f"`{ast.unparse(func)}(...)` mutates self on the forward path (state kept across calls)")




def _receiver_root(node: ast.AST) -> ast.AST:
    """``self.buf`` under a chain of in-place calls (``self.buf.mul_(a).add_`` -> ``self.buf``)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_"):
        node = node.func.value
    return node
