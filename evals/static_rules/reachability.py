"""Which code of a candidate runs, and when: the scopes the rule families judge.

A candidate file carries code that never runs: the ``get_inputs()`` the
problem file already has, a pasted copy of the reference ``class Model``,
helpers nothing calls. Rules that judge such code reject correct kernels, so
:class:`Reachability` works out, for every function (``def``, method,
``lambda``), in which of these *contexts* it can run:

* ``module`` — called while the module is imported (module-level code,
  class bodies, decorators and default arguments run then too);
* ``init`` — called only while ``ModelNew`` (or a class it builds) is
  constructed, by a direct call (``self.reset_parameters()``,
  ``self.apply(self._init_weights)``);
* ``forward`` — called on a forward call, or anywhere later: a function handed
  on as a value (stored, returned, put in a dict, passed to a hook) counts
  here, since nothing says when it is called;
* ``harness`` — an ``nn.Module`` method the harness calls between forward
  calls (``train``, ``to``, ``load_state_dict`` ...) that the class overrides.

No context at all means dead. The roots are the module's own code and the
classes bound to the name ``ModelNew`` (a ``class ModelNew``, or
``ModelNew = Other``): their ``__init__`` runs in ``init``, their other
methods as below. From there, references are followed by name, generously:

* a name that is a function of the file (module-level or nested) references
  it: a direct call in context ``S`` gives ``S``; any other use (a value in a
  dict, a decorator, an argument, an alias) gives ``S`` plus ``forward``;
* a name that is a class makes the class *live*; a class is also live when a
  live class derives from it (bases run: ``super().forward``,
  ``__init_subclass__``), when it is a metaclass, or when it is an entry;
* ``self.m`` / ``cls.m`` reference ``m`` in the class's in-file family
  (bases and subclasses), any other ``obj.m`` and any string constant
  ``"m"`` (``getattr(self, "m")``) reference every method named ``m``;
  a ``getattr``/``hasattr`` with a computed name, or ``operator.attrgetter``
  & co., references every method of every class (``forward``);
* the methods of a live class: ``__init__``/``__new__`` take the context of
  the class's instantiation (a call ``C(...)`` in ``S`` gives ``S``, the
  entry gives ``init``, a base takes its subclasses' contexts, any other use
  gives ``forward``); other dunders and ``forward``/``backward`` &
  co. run in ``forward``; the ``nn.Module`` methods in
  :data:`HARNESS_METHODS` in ``harness``; every other method in the contexts
  its references give it (unreferenced: dead). Methods of a class that is
  not live are dead.

A module with nothing bound to ``ModelNew`` (it will fail to load anyway)
has no root to judge from: every class is taken as an entry and every
unreferenced module-level function as running in ``forward``. Code under a
module-level ``if __name__ == "__main__":`` references nothing.

Separately, :meth:`Reachability.clearly_dead` names the functions the
*forbidden-construct* rules may skip: only code that nothing could run
whatever this analysis misses, i.e. the body of a module-level function or
of a method of a module-level class whose name appears nowhere else in the
module (no name, attribute or string mentions it outside its own
definition), in a module that binds ``ModelNew``. Class bodies, decorators
and default arguments always run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from kgen.evals.static_rules.ast_helpers import _is_dunder, _is_self, _literal_str, _parent

MODULE, INIT, FORWARD, HARNESS = "module", "init", "forward", "harness"

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

#: methods torch calls on a forward call (nn.Module, autograd.Function)
FORWARD_METHODS = frozenset({"forward", "backward", "setup_context", "jvp", "vjp", "vmap", "apply"})
#: nn.Module methods a harness calls on the model between forward calls, when a class overrides them
HARNESS_METHODS = frozenset({
    "train", "eval", "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "type", "_apply", "apply",
    "load_state_dict", "_load_from_state_dict", "state_dict", "_save_to_state_dict", "extra_repr",
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
    "modules", "named_modules", "zero_grad", "requires_grad_", "share_memory", "get_extra_state",
    "set_extra_state", "_call_impl", "_get_name", "register_forward_hook", "register_forward_pre_hook",
})
#: dunders that run when the class statement itself runs (or is subscripted), not per call
_DEFINITION_DUNDERS = frozenset({"__init_subclass__", "__set_name__", "__class_getitem__", "__prepare__"})
#: calls that consume a function argument at once (``self.apply(self._init_weights)``, ``map(f, xs)``)
_CONSUMERS = frozenset({"apply", "map", "filter", "sorted", "min", "max", "any", "all", "list", "tuple", "sum"})
#: calls that take a class without constructing it
_NO_CONSTRUCTION = frozenset({"isinstance", "issubclass", "super", "type"})
#: ways to reach an attribute by a computed name
_DYNAMIC_ATTR = frozenset({"getattr", "hasattr"})


def _is_function(node: ast.AST) -> bool:
    return isinstance(node, _FUNCTIONS)


class Reachability:
    """The contexts every function of one parsed module can run in (see the module docstring)."""

    def __init__(self, tree: ast.Module, never_run: set[ast.AST]):
        self.tree = tree
        self.never_run = never_run
        self.scope: dict[ast.AST, ast.AST | None] = {}  # node -> function whose body holds it
        self.class_of: dict[ast.AST, ast.ClassDef] = {}  # method -> its class
        self.contexts: dict[ast.AST, set[str]] = {}
        self._own: dict[ast.AST | None, list[ast.AST]] | None = None
        self._refs: dict[ast.AST | None, list[tuple[str, ast.AST, str]]] = {}
        self._families: dict[ast.ClassDef, set[ast.ClassDef]] = {}
        self._mentions: dict[ast.AST, bool] = {}
        self._set_scopes(tree, None)
        self.functions = [n for n in self.scope if _is_function(n)]
        self.classes = [n for n in self.scope if isinstance(n, ast.ClassDef)]
        for cls in self.classes:
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.class_of[item] = cls
        self.defs: dict[str, list[ast.AST]] = {}
        self.class_defs: dict[str, list[ast.ClassDef]] = {}
        for fn in self.functions:
            if not isinstance(fn, ast.Lambda) and fn not in self.class_of:
                self.defs.setdefault(fn.name, []).append(fn)
        for cls in self.classes:
            self.class_defs.setdefault(cls.name, []).append(cls)
        self.entries = self._entries()
        self.fallback = not self.entries
        if self.fallback:
            self.entries = list(self.classes)
        self._solve()

    # -- scopes --------------------------------------------------------------------------
    def _set_scopes(self, node: ast.AST, scope: ast.AST | None) -> None:
        """The scope a node runs in: decorators, defaults and annotations run in the enclosing one."""
        for field, value in ast.iter_fields(node):
            inner = node if _is_function(node) and field == "body" else scope
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    self.scope[child] = inner
                    self._set_scopes(child, inner)

    def unit_of(self, node: ast.AST) -> ast.AST | None:
        """The function whose body holds ``node`` (a function node is its own unit); None: module level."""
        return node if _is_function(node) else self.scope.get(node)

    def outermost(self, node: ast.AST) -> ast.AST | None:
        unit, outer = self.unit_of(node), None
        while unit is not None:
            outer = unit
            unit = self.scope.get(unit)
        return outer

    def own_nodes(self, unit: ast.AST | None) -> list[ast.AST]:
        """Nodes whose scope is ``unit`` (None: the module), skipping never-run code."""
        if self._own is None:
            self._own = {}
            for node, scope in self.scope.items():
                if node not in self.never_run:
                    self._own.setdefault(scope, []).append(node)
        return self._own.get(unit, [])

    # -- roots ---------------------------------------------------------------------------
    def _entries(self) -> list[ast.ClassDef]:
        out: list[ast.ClassDef] = list(self.class_defs.get("ModelNew", []))
        for node in self.own_nodes(None):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
                if isinstance(node.value, ast.Name):
                    out.extend(self.class_defs.get(node.value.id, []))
                else:
                    out.append(ast.ClassDef(name="<ModelNew>", bases=[], keywords=[], body=[], decorator_list=[]))
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name) == "ModelNew" for a in node.names
            ):
                out.append(ast.ClassDef(name="<ModelNew>", bases=[], keywords=[], body=[], decorator_list=[]))
        return out

    # -- references ------------------------------------------------------------------------
    def _family(self, cls: ast.ClassDef) -> set[ast.ClassDef]:
        """The class with its in-file bases and subclasses, transitively."""
        if cls in self._families:
            return self._families[cls]
        family, stack = set(), [cls]
        while stack:
            c = stack.pop()
            if c in family:
                continue
            family.add(c)
            for base in c.bases:
                if isinstance(base, ast.Name):
                    stack.extend(self.class_defs.get(base.id, []))
            stack.extend(o for o in self.classes if any(isinstance(b, ast.Name) and b.id == c.name for b in o.bases))
        self._families[cls] = family
        return family

    def _methods_named(self, name: str, classes: Iterable[ast.ClassDef]) -> list[ast.AST]:
        return [m for c in classes for m in c.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == name]

    def _kind(self, node: ast.AST) -> str:
        """"call" for a direct call, "consumed" for an argument of a consuming call, else "value"."""
        parent = _parent(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            return "call"
        if isinstance(parent, ast.Call) and node in parent.args:
            func = parent.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _CONSUMERS:
                return "consumed"
        return "value"

    def _enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        """The class whose body (not a method of it) holds ``node``."""
        parent = _parent(node)
        while parent is not None and not _is_function(parent):
            if isinstance(parent, ast.ClassDef):
                return parent
            parent = _parent(parent)
        return None

    def references(self, unit: ast.AST | None) -> list[tuple[str, ast.AST, str]]:
        """("fn"|"class"|"all-methods", target, kind) for every reference in ``unit``'s own code."""
        if unit not in self._refs:
            self._refs[unit] = list(self._find_references(unit))
        return self._refs[unit]

    def _find_references(self, unit: ast.AST | None) -> Iterator[tuple[str, ast.AST, str]]:
        own_class = self.class_of.get(self.outermost(unit)) if unit is not None else None
        for node in self.own_nodes(unit):
            if isinstance(node, ast.Lambda):  # its body runs when it is called
                yield "fn", node, self._kind(node)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                kind = self._kind(node)
                for fn in self.defs.get(node.id, []):
                    yield "fn", fn, kind
                for cls in self.class_defs.get(node.id, []):
                    yield "class", cls, self._class_use(node, kind)
                holder = self._enclosing_class(node)
                if holder is not None:  # forward = _impl in a class body
                    for method in self._methods_named(node.id, [holder]):
                        yield "fn", method, "value"
                if node.id in _DYNAMIC_ATTR and kind == "call":
                    call = _parent(node)
                    if len(call.args) < 2 or _literal_str(call.args[1]) is None:  # type: ignore[union-attr]
                        yield "all-methods", node, "value"
            elif isinstance(node, ast.Attribute):
                kind = self._kind(node)
                if node.attr in ("attrgetter", "methodcaller"):
                    yield "all-methods", node, "value"
                if _is_self(node.value) and own_class is not None:
                    targets = self._methods_named(node.attr, self._family(own_class))
                elif isinstance(node.value, ast.Name) and node.value.id in self.class_defs:
                    targets = self._methods_named(node.attr, (f for c in self.class_defs[node.value.id] for f in self._family(c)))
                    if node.attr == "apply":
                        targets += self._methods_named("forward", self.class_defs[node.value.id])
                else:
                    targets = self._methods_named(node.attr, self.classes)
                for method in targets:
                    yield "fn", method, kind
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                for method in self._methods_named(node.value, self.classes):
                    yield "fn", method, "value"
                for fn in self.defs.get(node.value, []):
                    yield "fn", fn, "value"

    def _class_use(self, node: ast.Name, kind: str) -> str:
        parent = _parent(node)
        if isinstance(parent, ast.ClassDef) and node in parent.bases:
            return "base"
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _NO_CONSTRUCTION:
            return "test"
        if isinstance(parent, ast.Attribute):
            return "attribute"
        return kind

    # -- the fixed point ------------------------------------------------------------------------
    def _solve(self) -> None:
        live_classes: dict[ast.ClassDef, set[str]] = {}  # class -> contexts its constructor runs in
        method_refs: dict[ast.AST, set[str]] = {}
        dynamic: set[str] = set()
        for cls in self.entries:
            live_classes[cls] = {INIT}
        unit_contexts: dict[ast.AST | None, set[str]] = {None: {MODULE}}
        changed = True
        while changed:
            changed = False
            for unit, contexts in list(unit_contexts.items()):
                if not contexts:
                    continue
                for what, target, kind in self.references(unit):
                    gives = set(contexts) if kind in ("call", "consumed") else set(contexts) | {FORWARD}
                    if what == "all-methods":
                        if not gives <= dynamic:
                            dynamic |= gives
                            changed = True
                    elif what == "class":
                        ctor = set() if kind in ("base", "test", "attribute") else gives
                        old = live_classes.get(target)
                        new = (old or set()) | ctor
                        if old is None or new != old:
                            live_classes[target] = new
                            changed = True
                    elif target in self.class_of:
                        if not gives <= method_refs.get(target, set()):
                            method_refs.setdefault(target, set()).update(gives)
                            changed = True
                    elif not gives <= unit_contexts.get(target, set()):
                        unit_contexts.setdefault(target, set()).update(gives)
                        changed = True
            # live classes: bases are live and construct with their subclasses; methods get contexts
            for cls, ctor in list(live_classes.items()):
                for base in cls.bases:
                    for bcls in self.class_defs.get(base.id, []) if isinstance(base, ast.Name) else []:
                        old = live_classes.get(bcls)
                        if old is None or not ctor <= old:
                            live_classes[bcls] = (old or set()) | ctor
                            changed = True
                for kw in cls.keywords:  # metaclass=M
                    for mcls in self.class_defs.get(kw.value.id, []) if isinstance(kw.value, ast.Name) else []:
                        if mcls not in live_classes or FORWARD not in live_classes[mcls]:
                            live_classes[mcls] = live_classes.get(mcls, set()) | {FORWARD}
                            changed = True
                for method in cls.body:
                    if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        continue
                    gives = self._method_contexts(method, ctor, method_refs.get(method, set()), dynamic)
                    if not gives <= unit_contexts.get(method, set()):
                        unit_contexts.setdefault(method, set()).update(gives)
                        changed = True
            if self.fallback:
                for fns in self.defs.values():
                    for fn in fns:
                        if self.scope.get(fn) is None and not unit_contexts.get(fn):
                            unit_contexts[fn] = {FORWARD}
                            changed = True
        self.contexts = {fn: unit_contexts.get(fn, set()) for fn in self.functions}
        self.live_classes = set(live_classes)

    def _method_contexts(self, method: ast.AST, ctor: set[str], refs: set[str], dynamic: set[str]) -> set[str]:
        name = method.name  # type: ignore[attr-defined]
        if name in ("__init__", "__new__"):
            return set(ctor) | refs
        if name in _DEFINITION_DUNDERS:
            return {MODULE, FORWARD} | refs
        if _is_dunder(name) or name in FORWARD_METHODS:
            return {FORWARD} | refs
        if name in HARNESS_METHODS:
            return {HARNESS} | refs
        return refs | dynamic

    # -- answers ------------------------------------------------------------------------------
    def contexts_of(self, node: ast.AST) -> set[str] | None:
        """The contexts the code holding ``node`` runs in; None for module-level code."""
        unit = self.unit_of(node)
        if unit is None:
            return None
        return self.contexts.get(unit, set())

    def clearly_dead(self, node: ast.AST) -> bool:
        """Whether ``node`` lies in a body nothing could run (see the module docstring)."""
        if self.fallback:
            return False
        outer = self.outermost(node)
        if outer is None or isinstance(outer, ast.Lambda) or self.contexts.get(outer):
            return False
        owner: ast.AST = self.class_of.get(outer, outer)
        if owner in self.entries:
            return False
        if self.scope.get(owner) is not None or _is_dunder(owner.name):  # type: ignore[attr-defined]
            return False
        return not self._mentioned_elsewhere(owner)

    def _mentioned_elsewhere(self, definition: ast.AST) -> bool:
        cache = self._mentions
        if definition in cache:
            return cache[definition]
        name = definition.name  # type: ignore[attr-defined]
        inside = set(ast.walk(definition))
        found = False
        for node in self.scope:
            if node in inside or node in self.never_run:
                continue
            if (
                (isinstance(node, ast.Name) and node.id == name)
                or (isinstance(node, ast.Attribute) and node.attr == name)
                or (isinstance(node, ast.Constant) and node.value == name)
            ):
                found = True
                break
        cache[definition] = found
        return found
