"""Forbidden constructs (``FORBIDDEN_CONSTRUCT``): ways out of the sandbox and around the rules.

* ``stream`` — ``torch.cuda.Stream``/``stream``/``ExternalStream``/
  ``set_stream``/``current_stream``/``default_stream``/``Event``/
  ``graph``/``CUDAGraph``, ``torch.Stream``/``Event``, and the
  ``record_stream``/``wait_stream``/``wait_event`` methods. Nothing
  stream-related is allowed (``torch.cuda.synchronize`` is not stream
  switching and is allowed).
* ``monkey-patch`` — assigning or deleting through an imported name
  (``torch.x = ...``, ``triton.testing.do_bench = ...``,
  ``Event.elapsed_time = ...`` after ``from torch.cuda import Event``), or
  through a handle on one: a local alias (``cuda = torch.cuda``, a loop
  variable over a tuple of modules, a ``with ... as`` name, a parameter
  defaulting to a module), an attribute of ``self`` that holds one
  (``self._cuda = torch.cuda``), an expression built from one
  (``(m := torch.cuda).x``, ``[triton.testing][0].x``); any store to a
  dunder attribute, ``setattr``/``delattr`` on anything but ``self``,
  touching ``builtins``; registering a Python implementation of a
  ``torch.ops`` op (``torch.ops.aten.relu.default.py_impl(...)``).
* ``forbidden-import`` — importing os, sys, subprocess, socket, threading,
  multiprocessing, concurrent, asyncio, ctypes, cffi, signal, shutil,
  pathlib, io, builtins, importlib, pickle, gc, inspect, network clients,
  weakref, tempfile, kgen itself, ``__main__`` ... (:data:`FORBIDDEN_MODULES`),
  torch's own escape hatches (``torch.multiprocessing``,
  ``torch.utils.cpp_extension``, ``torch.distributed``, ``torch.library``,
  ...), and star imports (they hide which names are used). From
  ``torch.library`` only :data:`TORCH_LIBRARY_OK` may be used
  (``triton_op``, ``wrap_triton``: a Triton kernel registered as a custom
  op; ``custom_op``: a function that launches kernels, registered as one),
  under a namespace of the candidate's own: an op name in ``aten``/``prims``
  or one that is not a literal string is ``monkey-patch`` (it would replace
  a built-in op). Every other ``torch.library`` name (``Library``, ``impl``,
  ``register_kernel`` ...) registers Python implementations of ops, aten's
  included, and stays forbidden. The bodies of such ops are judged like any
  other code that runs on a call.
* ``forbidden-call`` — code built or text evaluated by a library
  (:data:`CODE_BUILDERS`: ``types.FunctionType``/``CodeType``,
  ``typing.get_type_hints``, which evaluates string annotations), ``open``, ``exec``, ``eval``, ``compile``,
  ``__import__``, ``globals``, ``vars``, ``locals``, ``breakpoint``, ``input``
  (called or not), ``getattr``/``hasattr`` with a computed name on anything
  but ``self`` (an f-string on a non-module object whose fixed prefix
  starts no compute name, ``getattr(lstm, f"weight_ih_l{i}")``, is allowed),
  ``getattr`` handed on as a value, ``operator.attrgetter`` /
  ``methodcaller``, torch's file and escape functions (``torch.load``,
  ``torch.save``, ``torch.hub``...), and stdlib modules reached through
  another module's attributes (``torch.os``, ``typing.sys``,
  ``dataclasses.builtins``).
* ``dunder-access`` — ``__dict__``, ``__globals__``, ``__builtins__``,
  ``__code__``, ``__subclasses__``, ``__getattribute__``, ``__wrapped__`` ...
  (:data:`DUNDER_DENY`), defining ``__torch_function__``/``__torch_dispatch__``.
* ``tensor-subclass`` — a class deriving from ``torch.Tensor`` or a torch
  function/dispatch mode, by a class statement or by ``type(name, bases, ns)``
  (whose namespace naming ``__torch_function__``/``__torch_dispatch__`` is
  ``dunder-access`` too).
* ``torch-private`` — any ``torch._*`` name (``torch._C``, ``torch._dynamo``,
  ...): the way around the dispatcher and around these rules (except
  ``nn.init._calculate_fan_in_and_fan_out``/``_calculate_correct_fan``,
  which KernelBench code copies from ``nn.Linear``).
"""

from __future__ import annotations

import ast

from kgen.evals.static_rules.ast_helpers import (
    _is_dunder,
    _is_self,
    _literal_str,
    _parent,
    _root_name,
    _store_targets,
)
from kgen.evals.static_rules.context import _Context
from kgen.evals.static_rules.names import (
    _ESCAPE_SEGMENTS,
    _MUTATORS,
    _OPERATOR_INDIRECT,
    _STREAM_METHODS,
    _STREAM_SEGMENTS,
    _TORCH_ESCAPE_CALLS,
    _TORCH_PRIVATE_OK,
    CODE_BUILDERS,
    COMPUTE_METHODS,
    DUNDER_DENY,
    FORBIDDEN_BUILTINS,
    FORBIDDEN_MODULES,
    FORBIDDEN_SUBMODULES,
    FRAME_ATTRS,
    STORAGE_ATTRS,
    TORCH_OPS_REGISTRATION,
)

#: the torch.library names that register a Triton kernel (or a launcher) as a custom op
TORCH_LIBRARY_OK = frozenset({"torch.library.triton_op", "torch.library.wrap_triton", "torch.library.custom_op"})
#: op namespaces that are torch's own: registering into one patches a built-in op
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "_", "quantized", "torchvision"})
#: the bases that make a class a tensor subclass or a torch mode
_TENSOR_BASES = frozenset({"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"})
_MODE_PREFIXES = ("torch.overrides.", "torch.utils._python_dispatch.")


class _EscapeRules(_Context):
    """stream, monkey-patch, forbidden-import, forbidden-call, dunder-access, tensor-subclass, torch-private."""

    # -- imports ----------------------------------------------------------------------------
    def _star_import(self, node: ast.ImportFrom) -> bool:
        if any(a.name == "*" for a in node.names):
            self.report("forbidden-import", node, f"`from {node.module} import *` hides which names the candidate uses")
            return True
        return False

    def _import_forbidden_module(self, node: ast.AST, module: str) -> bool:
        top = module.split(".")[0]
        # A private top-level module (_posixsubprocess, _socket, _thread ...) is the C half of a
        # forbidden one: the same escape without the public name.
        if top in FORBIDDEN_MODULES or (top.startswith("_") and not _is_dunder(top)):
            self.report("forbidden-import", node, f"import of `{module}` is not allowed in a candidate (sandbox escape / state)")
            return True
        return False

    def _import_forbidden_submodule(self, node: ast.AST, module: str) -> bool:
        if any(module == p or module.startswith(p + ".") for p in FORBIDDEN_SUBMODULES):
            self.report("forbidden-import", node, f"import of `{module}` is not allowed in a candidate")
            return True
        return False

    def _import_torch_library_ok(self, node: ast.Import | ast.ImportFrom) -> bool:
        """``from torch.library import triton_op, wrap_triton`` (nothing but allowed names), or
        ``import torch.library`` (its names are judged where they are used)."""
        if isinstance(node, ast.Import):
            return all(a.name == "torch.library" for a in node.names)
        return (
            isinstance(node, ast.ImportFrom)
            and node.module == "torch.library"
            and not node.level
            and all(f"torch.library.{a.name}" in TORCH_LIBRARY_OK for a in node.names)
        )

    def _dotted_torch_library(self, node: ast.AST, chain: str) -> bool:
        """An allowed torch.library name: fine under the candidate's own op namespace."""
        if chain not in TORCH_LIBRARY_OK:
            return False
        call = _parent(node)
        if chain != "torch.library.wrap_triton" and isinstance(call, ast.Call) and call.func is node:
            name = _literal_str(call.args[0]) if call.args else None
            if name is None or "::" not in name or name.split("::")[0] in _TORCH_NAMESPACES:
                self.report("monkey-patch", node, f"`{chain}` with op name {ast.unparse(call.args[0]) if call.args else '?'}: "
                            "only an op of the candidate's own namespace (\"mylib::op\") may be registered")
        return True

    def _import_torch_private(self, node: ast.AST, module: str) -> bool:
        if module.split(".")[0] == "torch" and any(part.startswith("_") and not _is_dunder(part) for part in module.split(".")):
            self.report("torch-private", node, f"import of private `{module}`")
            return True
        return False

    # -- classes ----------------------------------------------------------------------------
    def _check_class_escapes(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.resolve(base) or ""
            if name in _TENSOR_BASES or name.startswith(_MODE_PREFIXES):
                self.report("tensor-subclass", node, f"class {node.name} derives from {name}")
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if item.name in ("__torch_function__", "__torch_dispatch__"):
                    self.report("dunder-access", item, f"{node.name} defines {item.name}: it would intercept torch calls")

    # -- stores -----------------------------------------------------------------------------
    def _check_store(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> None:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.Delete):
            targets = node.targets
        else:
            targets = [node.target]
        for target in targets:
            for sub in _store_targets(target):
                if not isinstance(sub, (ast.Attribute, ast.Subscript)):
                    continue
                if isinstance(sub, ast.Attribute) and _is_dunder(sub.attr):
                    self.report("monkey-patch", node, f"assignment to dunder attribute `{sub.attr}`")
                    continue
                root = _root_name(sub)
                if root is None:
                    self._store_through_expression(node, sub)
                    continue
                if self._store_through_handle(node, sub, root):
                    continue
                if root.id in ("__builtins__", "builtins"):
                    self.report("monkey-patch", node, "modifies builtins")
                elif root.id in self.imported or (root.id in self.bindings and root.id not in self._locals_at(node)):
                    where = self.resolve(sub.value) if isinstance(sub, ast.Attribute) else self.resolve(root)
                    shown = f"{where}.{sub.attr}" if isinstance(sub, ast.Attribute) and where else (where or root.id)
                    self.report("monkey-patch", node, f"assignment to `{shown}` patches an imported module or object")

    def _imported_in(self, expr: ast.AST) -> str | None:
        """The first imported module or object an expression mentions (``torch.cuda`` in
        ``[torch.cuda][0]``), or None."""
        for sub in ast.walk(expr):
            if isinstance(sub, (ast.Name, ast.Attribute)) and isinstance(getattr(sub, "ctx", None), ast.Load):
                chain = self.resolve(sub)
                if chain is not None:
                    return chain
        return None

    def _store_through_expression(self, node: ast.AST, sub: ast.AST) -> None:
        """``(m := torch.cuda).x = ...``, ``[triton.testing][0].x = ...``: no name at the root,
        an imported module inside."""
        chain = self._imported_in(sub.value) if isinstance(sub, (ast.Attribute, ast.Subscript)) else None
        if chain is not None:
            self.report("monkey-patch", node, f"assignment through an expression holding `{chain}` patches it")

    def _handles(self, scope: ast.AST) -> dict[str, str]:
        """Local names a scope binds to an imported module or object, whatever the binding:
        an assignment, a walrus, a loop over a literal tuple holding one, ``with ... as``,
        a parameter's default."""
        cache = self._handle_cache
        if scope in cache:
            return cache[scope]
        found: dict[str, str] = {}

        def bind(target: ast.AST, chain: str | None) -> None:
            if chain is not None:
                for t in _store_targets(target):
                    if isinstance(t, ast.Name):
                        found[t.id] = chain

        for sub in ast.walk(scope):
            if isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.value is not None:
                for target in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                    if isinstance(target, ast.Tuple) and isinstance(sub.value, ast.Tuple):
                        for t, v in zip(target.elts, sub.value.elts, strict=False):
                            bind(t, self.resolve(v))
                    else:
                        bind(target, self.resolve(sub.value))
            elif isinstance(sub, ast.NamedExpr):
                bind(sub.target, self.resolve(sub.value))
            elif isinstance(sub, (ast.For, ast.AsyncFor, ast.comprehension)):
                if isinstance(sub.iter, (ast.Tuple, ast.List, ast.Set)):
                    bind(sub.target, self._imported_in(sub.iter))
            elif isinstance(sub, ast.withitem) and sub.optional_vars is not None:
                bind(sub.optional_vars, self._imported_in(sub.context_expr))
            elif isinstance(sub, ast.arguments):
                params = [*sub.posonlyargs, *sub.args]
                for arg, default in zip(params[len(params) - len(sub.defaults):], sub.defaults, strict=True):
                    bind(ast.Name(id=arg.arg), self.resolve(default))
                for arg, default in zip(sub.kwonlyargs, sub.kw_defaults, strict=True):
                    if default is not None:
                        bind(ast.Name(id=arg.arg), self.resolve(default))
        cache[scope] = found
        return found

    def _self_handles(self) -> dict[str, str]:
        """Attributes of ``self`` assigned an imported module or object (``self._cuda = torch.cuda``)."""
        if self._self_handle_cache is None:
            self._self_handle_cache = {}
            for sub in self.nodes:
                if isinstance(sub, ast.Assign):
                    chain = self.resolve(sub.value)
                    for target in sub.targets:
                        if chain is not None and isinstance(target, ast.Attribute) and _is_self(target.value):
                            self._self_handle_cache[target.attr] = chain
        return self._self_handle_cache

    def _store_through_handle(self, node: ast.AST, sub: ast.AST, root: ast.Name) -> bool:
        """A store through a local name or an attribute of ``self`` that holds an imported module."""
        chain = None
        if root.id not in self.imported and root.id in self._locals_at(node):
            chain = self._handles(self.enclosing.get(node) or self.tree)
        elif root.id not in self.imported and root.id not in self.bindings:
            chain = self._handles(self.tree)
        chain = chain.get(root.id) if chain else None
        if chain is None and _is_self(root):
            inner = sub.value if isinstance(sub, (ast.Attribute, ast.Subscript)) else None
            while isinstance(inner, (ast.Attribute, ast.Subscript)):
                if isinstance(inner, ast.Attribute) and _is_self(inner.value):
                    chain = self._self_handles().get(inner.attr)
                    break
                inner = inner.value
        if chain is None:
            return False
        self.report("monkey-patch", node, f"assignment through `{ast.unparse(sub)}`, a handle on `{chain}`, patches it")
        return True

    # -- calls ------------------------------------------------------------------------------
    def _type_call_escape(self, node: ast.Call) -> None:
        """``type("L", (torch.Tensor,), {...})``: a class statement by another name."""
        if len(node.args) == 3:
            bases = node.args[1]
            for base in bases.elts if isinstance(bases, (ast.Tuple, ast.List)) else [bases]:
                name = self.resolve(base) or ""
                if name in _TENSOR_BASES or name.startswith(_MODE_PREFIXES):
                    self.report("tensor-subclass", node, f"type(...) builds a class deriving from {name}")
        for sub in node.args[2:3]:
            if isinstance(sub, ast.Dict):
                for key in sub.keys:
                    if _literal_str(key) in ("__torch_function__", "__torch_dispatch__"):
                        self.report("dunder-access", node, f"type(...) defines {_literal_str(key)}: it would intercept torch calls")


    def _getattr_escape(self, node: ast.Call, name: str, attr: ast.AST | None, literal: str | None) -> bool:
        """getattr/hasattr with a computed name, or with a denied dunder."""
        if literal is None and not _is_self(node.args[0]) and not self._harmless_computed_name(node.args[0], attr):
            self.report("forbidden-call", node, f"{name}() with a computed attribute name")
            return True
        if literal is not None and _is_dunder(literal) and literal in DUNDER_DENY:
            self.report("dunder-access", node, f"{name}(..., {literal!r})")
            return True
        return False

    def _setattr_escape(self, node: ast.Call, name: str) -> None:
        if not _is_self(node.args[0]):
            self.report("monkey-patch", node, f"{name}() on something other than self")

    def _stream_method_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _STREAM_METHODS:
            self.report("stream", node, f".{func.attr}() synchronises with another stream")

    def _harmless_computed_name(self, receiver: ast.AST, attr: ast.AST | None) -> bool:
        """getattr(lstm, f"weight_ih_l{i}"): an f-string whose fixed prefix names no compute or dunder.

        The receiver must not be an imported module or object (getattr(torch, f"...") stays
        forbidden), and no name the rules care about may start with the fixed prefix.
        """
        if not isinstance(attr, ast.JoinedStr) or not attr.values or self.resolve(receiver) is not None:
            return False
        first = attr.values[0]
        prefix = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
        if len(prefix) < 3 or prefix.startswith("_"):
            return False
        names = COMPUTE_METHODS | _STREAM_METHODS | _MUTATORS | STORAGE_ATTRS | FRAME_ATTRS
        names |= {"forward", "apply", "register_buffer"}
        return not any(name.startswith(prefix) or prefix.startswith(name) for name in names)

    # -- names and dotted chains ---------------------------------------------------------------
    def _check_dunder_attribute(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute) and node.attr in DUNDER_DENY and isinstance(node.ctx, ast.Load):
            self.report("dunder-access", node, f"`.{node.attr}` opens a way around the rules")

    def _check_name(self, node: ast.Name) -> None:
        if node.id in ("__builtins__", "__loader__", "__spec__"):
            self.report("dunder-access", node, f"`{node.id}`")
        elif node.id in FORBIDDEN_BUILTINS and not self._bound_locally(node, node.id):
            self.report("forbidden-call", node, f"`{node.id}` is not allowed in a candidate")
        elif node.id in ("getattr", "setattr", "delattr") and not self._bound_locally(node, node.id):
            parent = _parent(node)
            if not (isinstance(parent, ast.Call) and parent.func is node):
                self.report("forbidden-call", node, f"`{node.id}` handed on as a value")

    def _operator_indirect(self, node: ast.AST, chain: str) -> None:
        """``operator.attrgetter`` & co. (``chain`` is ``operator.<name>``)."""
        if chain.split(".")[1] in _OPERATOR_INDIRECT:
            self.report("forbidden-call", node, f"`{chain}` reaches attributes by computed name")

    def _dotted_escape_segment(self, node: ast.AST, chain: str) -> bool:
        """A stdlib module reached through another module's attributes (torch.os, typing.sys)."""
        parts = chain.split(".")
        escape = next((p for p in parts[1:] if p in _ESCAPE_SEGMENTS), None)
        if escape is not None and parts[0] not in FORBIDDEN_MODULES:  # those are reported at the import
            self.report("forbidden-call", node, f"`{chain}` reaches the `{escape}` module")
            return True
        return False

    def _dotted_code_builder(self, node: ast.AST, chain: str) -> bool:
        """``types.FunctionType``, ``typing.get_type_hints`` & co.: code built, or text evaluated."""
        if chain in CODE_BUILDERS:
            self.report("forbidden-call", node, f"`{chain}` builds code or evaluates text as Python")
            return True
        return False

    def _dotted_torch_ops_registration(self, node: ast.AST, chain: str) -> bool:
        """``torch.ops.<ns>.<op>.<overload>.py_impl(...)``: a Python kernel for an op, torch's included."""
        parts = chain.split(".")
        if len(parts) > 2 and parts[1] == "ops" and parts[-1] in TORCH_OPS_REGISTRATION:
            self.report("monkey-patch", node, f"`{chain}` registers a Python implementation of an op")
            return True
        return False

    def _dotted_torch_escapes(self, node: ast.AST, chain: str, shown: str) -> bool:
        """torch-private, stream and torch's file/escape functions, for a ``torch.*`` chain."""
        parts = chain.split(".")
        if chain not in _TORCH_PRIVATE_OK and any(p.startswith("_") and not _is_dunder(p) for p in parts[1:]):
            self.report("torch-private", node, f"`{chain}` is a private torch name")
            return True
        if any(p in _STREAM_SEGMENTS for p in parts[1:]):
            self.report("stream", node, f"`{shown}`: streams, events and graphs are not allowed")
            return True
        if chain in _TORCH_ESCAPE_CALLS or any(chain == p or chain.startswith(p + ".") for p in FORBIDDEN_SUBMODULES):
            self.report("forbidden-call", node, f"`{shown}` is not allowed in a candidate")
            return True
        return False
