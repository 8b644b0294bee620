"""Small AST helpers shared by the rule families (no rule logic here)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kgen.evals.static_rules.names import _MUTABLE_FACTORIES, ALLOWED_METHODS


def _parent(node: ast.AST) -> ast.AST | None:
    return getattr(node, "_kgen_parent", None)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _literal_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _is_getattr_literal(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) == 2
        and not node.keywords
        and _literal_str(node.args[1]) is not None
    )


def _root_name(node: ast.AST) -> ast.Name | None:
    """The Name at the bottom of an attribute/subscript/call chain (``a`` in ``a.b[c].d()``)."""
    while True:
        if isinstance(node, ast.Name):
            return node
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


def _relayout_of(value: ast.AST, target: ast.AST) -> bool:
    """Whether ``value`` is ``target`` (e.g. ``self.w.data``) passed through view/cast/copy methods only."""
    text = ast.dump(target, include_attributes=False).replace("ctx=Store()", "ctx=Load()")
    seen_method = False
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr not in ALLOWED_METHODS:
            return False
        seen_method = True
        value = value.func.value
    return seen_method and ast.dump(value, include_attributes=False) == text


def _is_main_test(test: ast.AST) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _self_attr_root(node: ast.AST) -> bool:
    """Whether ``node`` is ``self.X...`` (an attribute/subscript chain whose root is ``self``)."""
    root = _root_name(node)
    return root is not None and root.id == "self" and node is not root


def _mutable_value(node: ast.AST, resolve) -> bool:
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        name = resolve(node.func)
        if name is None and isinstance(node.func, ast.Name):
            name = node.func.id
        return name in _MUTABLE_FACTORIES
    return False


def _walk_own(node: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function body, not descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(child))


def _params(fn: ast.AST) -> list[ast.arg]:
    args = fn.args  # type: ignore[attr-defined]
    out = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if args.vararg:
        out.append(args.vararg)
    if args.kwarg:
        out.append(args.kwarg)
    return out


def _assignment_targets(node: ast.AST) -> list[ast.AST]:
    """What an assignment, augmented assignment or ``del`` statement stores into."""
    if isinstance(node, (ast.Assign, ast.Delete)):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _target_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _local_names(fn: ast.AST) -> set[str]:
    """Names a function binds locally (parameters, assignments, loop/with/except targets, imports)."""
    names = {a.arg for a in _params(fn)}
    declared_global: set[str] = set()
    for node in _walk_own(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared_global.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names - declared_global



def _store_targets(target: ast.AST) -> Iterator[ast.AST]:
    """The single targets of a (possibly unpacking) store: ``a, (b, *c) = ...`` gives a, b, c."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _store_targets(elt)
    elif isinstance(target, ast.Starred):
        yield from _store_targets(target.value)
    else:
        yield target


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."
