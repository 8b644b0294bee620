"""Host shape arithmetic: which expressions are built only from sizes, shapes and constants.

``torch.prod(torch.tensor(self.normalized_shape))``, ``math.prod(x.shape)``, ``x.numel()``,
``x.shape[0] * x.shape[1]``, ``triton.cdiv(n, BLOCK)``, ``x.size(-1) ** 0.5`` and
``int(torch.tensor(shape).prod())`` count elements or scale factors: none of them computes on
the problem's data, so the torch-math family must not call them data computation. A value is
*host* when it is built only from:

* Python constants, and module-level names assigned only such values;
* tensor metadata of anything: ``.shape``, ``.ndim``, ``.dtype``, ``.device``, ``.size()``,
  ``.numel()``, ``.stride()``, ``.dim()``...;
* attributes of ``self`` every assignment of which is host, where ``__init__``'s parameters
  count as host (KernelBench passes sizes there), and which are never registered as a buffer
  or parameter (those hold weights the evaluation loads);
* parameters annotated ``int``/``float``/``tuple``... and local names every binding of which
  is host;
* ``math``/``operator`` names, ``triton.cdiv``/``next_power_of_2``, builtins such as ``int``,
  ``len``, ``min``, ``sum`` applied to host values;
* torch functions (``torch.<name>``, ``torch.nn.functional.<name>``) and tensor methods applied
  to host values only: ``torch.tensor(shape)`` is host, and so is its ``.prod()``. Random
  number generation is never host arithmetic.

A name or ``self`` attribute holding a torch-made host tensor stops being host when it is
handed to any call that is not itself host arithmetic (a kernel launch could write the data
into it). Everything derived from ``forward``'s inputs or the module's parameters is not host.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from kgen.evals.static_rules.ast_helpers import _is_self, _params, _walk_own

if TYPE_CHECKING:
    from kgen.evals.static_rules.context import _ClassInfo, _Context

#: tensor attributes that are metadata, not data
_META_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "layout", "itemsize", "is_sparse"})
#: tensor methods that read metadata
_META_METHODS = frozenset(
    """
    size numel nelement dim ndimension stride element_size storage_offset get_device is_contiguous
    is_floating_point is_complex
    """.split()
)
#: builtins that compute on host values (on a tensor they are ``tensor-operator``'s business)
_HOST_BUILTINS = frozenset(
    "int float bool complex len tuple list range min max abs round sum pow divmod reversed sorted zip enumerate".split()
)
#: dotted names that are host functions or constants
_HOST_MODULE_PREFIXES = ("math.", "operator.", "functools.reduce")
_HOST_TRITON = frozenset({"triton.cdiv", "triton.next_power_of_2", "triton.language.constexpr"})
#: torch names that are never host arithmetic, however they are called: random numbers
_RANDOM_PREFIXES = (
    "rand", "normal", "bernoulli", "multinomial", "poisson", "dropout", "uniform", "exponential",
    "geometric", "cauchy", "log_normal", "random", "manual_seed", "seed",
)
#: torch allocations whose contents are not constants (stale memory): never host
_UNINITIALISED_PREFIXES = ("empty",)
#: torch names that are metadata, whatever they are handed
_TORCH_META = frozenset({"torch.Size", "torch.finfo", "torch.iinfo"})
#: parameter annotations that say "not a tensor"
_HOST_ANNOTATIONS = frozenset({"int", "float", "bool", "tuple", "list", "str", "complex"})


class HostValues:
    """Answers "is this expression host shape arithmetic?" for one parsed candidate."""

    def __init__(self, ctx: _Context):
        self.c = ctx
        self._names: dict[ast.AST | None, set[str]] = {}
        self._attrs: dict[str, set[str]] = {}

    # -- the question ---------------------------------------------------------------------
    def is_host(self, expr: ast.AST | None) -> bool:
        """Whether ``expr`` (a node of the candidate's tree) is built only from host values."""
        if expr is None:
            return False
        fn = self.c.enclosing.get(expr)
        return self._host(expr, fn, self._host_names(fn), frozenset())

    def is_host_call(self, call: ast.Call) -> bool:
        """Whether a call only does host arithmetic: its callee and every argument are host."""
        return self.is_host(call)

    # -- one expression, given the host names of its function -----------------------------------
    def _host(self, e: ast.AST, fn: ast.AST | None, names: set[str], bound: frozenset[str]) -> bool:
        h = lambda x: self._host(x, fn, names, bound)  # noqa: E731 - short recursive helper
        if isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.Name):
            chain = self.c.resolve(e) if e.id not in bound else None
            if chain is not None:
                return self._host_chain(chain)
            return e.id in bound or self._host_name(e.id, fn, names)
        if isinstance(e, ast.Attribute):
            chain = self.c.resolve(e)
            if chain is not None:
                return self._host_chain(chain)
            if _is_self(e.value):
                return e.attr in self._host_attrs(fn)
            return e.attr in _META_ATTRS or h(e.value)
        if isinstance(e, ast.Subscript):
            return h(e.value) and h(e.slice)
        if isinstance(e, ast.Slice):
            return all(h(p) for p in (e.lower, e.upper, e.step) if p is not None)
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            return all(h(x) for x in e.elts)
        if isinstance(e, ast.Starred):
            return h(e.value)
        if isinstance(e, ast.BinOp):
            return h(e.left) and h(e.right)
        if isinstance(e, ast.UnaryOp):
            return h(e.operand)
        if isinstance(e, ast.BoolOp):
            return all(h(x) for x in e.values)
        if isinstance(e, ast.Compare):
            return h(e.left) and all(h(x) for x in e.comparators)
        if isinstance(e, ast.IfExp):
            return h(e.test) and h(e.body) and h(e.orelse)
        if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            inner = set(bound)
            for gen in e.generators:
                if not self._host(gen.iter, fn, names, frozenset(inner)):
                    return False
                inner.update(n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name))
            return self._host(e.elt, fn, names, frozenset(inner))
        if isinstance(e, ast.Call):
            return self._host_callee(e, fn, names, bound) and all(
                h(a) for a in [*e.args, *(k.value for k in e.keywords)]
            )
        return False

    def _host_callee(self, call: ast.Call, fn, names: set[str], bound: frozenset[str]) -> bool:
        func = call.func
        chain = self.c.resolve(func)
        if chain is not None:
            return self._host_function(chain)
        if isinstance(func, ast.Name):
            return func.id in _HOST_BUILTINS and not self.c._bound_locally(call, func.id)
        if isinstance(func, ast.Attribute):
            if func.attr in _META_METHODS:
                return True
            if func.attr.startswith(_RANDOM_PREFIXES + _UNINITIALISED_PREFIXES):
                return False
            return not _is_self(func.value) and self._host(func.value, fn, names, bound)
        return False

    def _host_chain(self, chain: str) -> bool:
        """A dotted name used as a value: a math/operator constant, a dtype, a triton helper."""
        from kgen.evals.static_rules.names import TORCH_ALLOWED

        return chain.startswith(_HOST_MODULE_PREFIXES) or chain in _HOST_TRITON or chain in TORCH_ALLOWED

    def _host_function(self, chain: str) -> bool:
        """A dotted callee that computes host values when handed host values."""
        if chain.startswith(_HOST_MODULE_PREFIXES) or chain in _HOST_TRITON or chain in _TORCH_META:
            return True
        parts = chain.split(".")
        if parts[0] != "torch" or parts[-1].startswith(_RANDOM_PREFIXES + _UNINITIALISED_PREFIXES + ("_",)):
            return False
        return len(parts) == 2 or chain.startswith("torch.nn.functional.")

    def _torch_made(self, e: ast.AST) -> bool:
        """Whether a host value is a tensor torch made (which a kernel launch could write into)."""
        if not isinstance(e, ast.Call):
            return False
        chain = self.c.resolve(e.func)
        if chain is not None:
            return chain.startswith("torch.") and chain not in _TORCH_META
        func = e.func
        return isinstance(func, ast.Attribute) and func.attr not in _META_METHODS | {"item", "tolist"} and self._torch_made(func.value)

    # -- names -----------------------------------------------------------------------------------
    def _host_name(self, name: str, fn: ast.AST | None, names: set[str]) -> bool:
        """``names`` is the host set of ``fn``; a name bound further out is looked up there."""
        scope = fn
        while scope is not None:
            if name in self.c._locals_of(scope):
                return name in (names if scope is fn else self._host_names(scope))
            scope = self.c.enclosing.get(scope)
        return name in (names if fn is None else self._host_names(None))

    def _host_names(self, fn: ast.AST | None) -> set[str]:
        """Names of ``fn`` (None: the module) every binding of which is host: the greatest fixed point."""
        if fn in self._names:
            return self._names[fn]
        bindings, host_params = self._bindings(fn)
        names = set(bindings) | host_params
        self._names[fn] = names
        escaping = self._escaping(fn)
        changed = True
        while changed:
            changed = False
            for name, values in bindings.items():
                if name not in names:
                    continue
                host = all(v is not None and self._host(v, fn, names, frozenset()) for v in values)
                if not host or (name in escaping and any(self._torch_made(v) for v in values if v is not None)):
                    names.discard(name)
                    changed = True
        return names

    def _bindings(self, fn: ast.AST | None) -> tuple[dict[str, list[ast.AST | None]], set[str]]:
        """Each local name's bound values (None: not an expression we can judge) and the host parameters."""
        values: dict[str, list[ast.AST | None]] = {}
        host_params: set[str] = set()
        if fn is None:
            nodes = list(self.c._module_statements())
        else:
            nodes = list(_walk_own(fn))
            init = getattr(fn, "name", "") == "__init__"
            for arg in _params(fn):
                if arg.arg in ("self", "cls"):
                    continue
                ann = arg.annotation
                ann_name = ann.id if isinstance(ann, ast.Name) else getattr(ann, "value", None)
                if ann_name in _HOST_ANNOTATIONS or (init and ann is None):
                    host_params.add(arg.arg)
                else:
                    values.setdefault(arg.arg, []).append(None)
        for node in nodes:
            for target, value in _binding_pairs(node):
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                        values.setdefault(sub.id, []).append(value)
        for name in host_params & set(values):
            values[name].append(ast.Constant(0))
        return values, host_params

    def _escaping(self, fn: ast.AST | None) -> set[str]:
        """Names handed to a call that is not host arithmetic (a kernel launch, a helper)."""
        out: set[str] = set()
        nodes = _walk_own(fn) if fn is not None else self.c._module_statements()
        for node in nodes:
            for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
                if self._host_callee_syntax(call):
                    continue
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    if isinstance(arg, ast.Starred):
                        arg = arg.value
                    if isinstance(arg, ast.Name):
                        out.add(arg.id)
                    elif isinstance(arg, ast.Attribute) and _is_self(arg.value):
                        out.add(f"self.{arg.attr}")
        return out

    def _host_callee_syntax(self, call: ast.Call) -> bool:
        """A callee that only computes host values from what it is handed (arguments not judged)."""
        func = call.func
        chain = self.c.resolve(func)
        if chain is not None:
            return self._host_function(chain)
        if isinstance(func, ast.Name):
            return func.id in _HOST_BUILTINS
        return isinstance(func, ast.Attribute) and not _is_self(func.value)

    # -- self attributes ----------------------------------------------------------------------------
    def _host_attrs(self, fn: ast.AST | None) -> set[str]:
        method = self.c._function_of(fn) if fn is not None else None
        info = self.c.owner.get(method) if method is not None else None
        if info is None:
            return set()
        key = info.node.name
        if key not in self._attrs:
            self._class_host_attrs(key, info)
        return self._attrs[key]

    def _class_host_attrs(self, key: str, info: _ClassInfo) -> None:
        """The class's host attributes, a greatest fixed point (``self.b = self.a * 2`` is host
        when ``self.a`` is), into ``self._attrs[key]``."""
        assigned: dict[str, list[ast.AST | None]] = {}
        escaping: set[str] = set()
        registered = {n.removeprefix("self.") for n in self.c.nn_instances}
        for method in info.methods.values():
            escaping |= {n.removeprefix("self.") for n in self._escaping(method) if n.startswith("self.")}
            for node in ast.walk(method):
                for target, value in _binding_pairs(node):
                    if isinstance(target, ast.Attribute) and _is_self(target.value):
                        assigned.setdefault(target.attr, []).append(value)
                registered |= _registered_name(node)
        out = self._attrs[key] = set(assigned) - registered
        changed = True
        while changed:
            changed = False
            for attr in list(out):
                values = assigned[attr]
                host = all(v is not None and self.is_host(v) for v in values)
                if not host or (attr in escaping and any(self._torch_made(v) for v in values if v is not None)):
                    out.discard(attr)
                    changed = True


def _binding_pairs(node: ast.AST) -> list[tuple[ast.AST, ast.AST | None]]:
    """(target, value) for what a statement or comprehension binds; the value of a loop or
    comprehension target is its iterable (an element of a host iterable is host)."""
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        return [(node.target, node.value)]  # a += b: a's other bindings judge a
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return [(node.target, node.iter)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target, node.value)]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [(item.optional_vars, None) for item in node.items if item.optional_vars is not None]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [(ast.Name(node.name, ast.Store()), None)]
    return []



def _registered_name(node: ast.AST) -> set[str]:
    """``self.register_buffer("name", ...)``: a name the module's state dict loads (weights)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("register_buffer", "register_parameter", "add_module", "register_module")
        and _is_self(node.func.value)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return {node.args[0].value}
    return set()
