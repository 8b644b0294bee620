"""A problem file's size constants, read and rebound without executing it.

A KernelBench file names its sizes at module level, in more ways than
``batch_size = 16``::

    M = 1024 * 2                      # an integer expression
    height = width = 256              # a chain
    depth, height, width = 16, 32, 32 # an unpacking
    N = 1024; N *= 4                  # an augmented assignment
    input_shape = (32768,)            # a tuple or list of integers
    bias_shape = (out_channels, 1, 1) # ... whose elements may name other constants
    shape = (batch_size, *input_shape)
    groups = in_channels              # a constant derived from another

Every one is a size constant, keyed in the ``dict[str, int]`` that flows
through kgen (size sets, trials, reports): a name (``height``) or, for a tuple
or list, one element (``input_shape[0]``). A name's value is the one it holds
at the end of the module, which is what ``get_inputs()`` sees.

A constant is *derived* when its expression names another (``K = M * 2``,
``bias_shape[0]`` above): rebinding ``M`` makes ``K`` follow, so the files'
relations hold at every size kgen picks; rebinding ``K`` itself overrides its
expression (a size set that names it means it). Rebinding writes the value
right after every module-level statement that binds the name, so the name holds
it from its first binding on and every constant computed from it follows.

Not size constants, hence never keyed: negative integers (``hardtanh_min = -1``),
bools, floats, strings, anything a call computes, and kgen's own ``KGEN_*``
metadata. Which keys a verifier may *move* (axis indices, broadcast ones) is
``size_sets.py``'s question, not this module's.
"""

from __future__ import annotations

import ast
import copy
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

METADATA_PREFIX = "KGEN_"
#: Powers and shifts past these would build integers no problem needs (and take a while).
_MAX_EXPONENT = 64

_INT_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


@dataclass(frozen=True)
class Scalar:
    """An integer a name or tuple element holds; ``derived`` when computed from another name."""

    value: int | None  # None: not an integer (a float, a string, a call's result)
    derived: bool = False


@dataclass(frozen=True)
class IntTuple:
    """A tuple or list literal's elements, each a :class:`Scalar`."""

    items: tuple[Scalar, ...]
    is_list: bool = False


Value = Scalar | IntTuple


@dataclass(frozen=True)
class SizeConstant:
    """One rebindable integer: a module-level name, or one element of a tuple or list."""

    key: str  # "batch_size" or "input_shape[0]"
    name: str  # "input_shape"
    index: int | None  # the element's position; None for a plain name
    value: int
    derived: bool


def element_key(name: str, index: int) -> str:
    """The key of one element of a tuple or list constant: ``input_shape[0]``."""
    return f"{name}[{index}]"


def base_name(key: str) -> str:
    """The module-level name a key belongs to: ``input_shape`` for ``input_shape[0]``."""
    return key.split("[", 1)[0]


def _is_int(value: object) -> bool:
    return type(value) is int  # bools are ints to Python, not sizes to kgen


def _int_binop(op: ast.operator, left: Scalar, right: Scalar) -> Scalar:
    if left.value is None or right.value is None or type(op) not in _INT_OPS:
        return Scalar(None)
    if isinstance(op, (ast.Pow, ast.LShift)) and not 0 <= right.value <= _MAX_EXPONENT:
        return Scalar(None)
    try:
        value = _INT_OPS[type(op)](left.value, right.value)
    except (ZeroDivisionError, OverflowError, ValueError):
        return Scalar(None)
    return Scalar(value, left.derived or right.derived)


def _sequence_binop(op: ast.operator, left: Value, right: Value) -> Value | None:
    """``shape + (2,)`` and ``(1,) * 3``: tuples built from tuples."""
    if isinstance(op, ast.Add) and isinstance(left, IntTuple) and isinstance(right, IntTuple):
        return IntTuple(left.items + right.items, left.is_list)
    if isinstance(op, ast.Mult):
        seq, count = (left, right) if isinstance(left, IntTuple) else (right, left)
        if isinstance(seq, IntTuple) and isinstance(count, Scalar) and count.value is not None:
            if 0 <= count.value <= _MAX_EXPONENT:
                items = tuple(Scalar(i.value, i.derived or count.derived) for i in seq.items)
                return IntTuple(items * count.value, seq.is_list)
    return None


def _as_derived(value: Value) -> Value:
    if isinstance(value, Scalar):
        return Scalar(value.value, True)
    return IntTuple(tuple(Scalar(i.value, True) for i in value.items), value.is_list)


def evaluate(node: ast.expr, env: Mapping[str, Value], own: frozenset[str] = frozenset()) -> Value | None:
    """Value of an integer (or tuple-of-integers) expression over known constants; None if not one.

    Naming another constant makes the result derived; naming one of ``own``
    (the names being assigned: ``N = N * 2``) keeps that name's own status.
    """
    if isinstance(node, ast.Constant):
        return Scalar(node.value) if _is_int(node.value) else Scalar(None)
    if isinstance(node, ast.Name):
        known = env.get(node.id)
        if known is None:
            return None
        return known if node.id in own else _as_derived(known)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = evaluate(node.operand, env, own)
        if not isinstance(operand, Scalar) or operand.value is None:
            return None
        return Scalar(-operand.value if isinstance(node.op, ast.USub) else operand.value, operand.derived)
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left, env, own), evaluate(node.right, env, own)
        if left is None or right is None:
            return None
        if isinstance(left, Scalar) and isinstance(right, Scalar):
            result = _int_binop(node.op, left, right)
            return result if result.value is not None else None
        return _sequence_binop(node.op, left, right)
    if isinstance(node, ast.Subscript):
        return _subscript(node, env, own)
    if isinstance(node, (ast.Tuple, ast.List)):
        return _sequence(node, env, own)
    return None


def _subscript(node: ast.Subscript, env: Mapping[str, Value], own: frozenset[str]) -> Value | None:
    """``input_shape[0]``: one element of a known tuple."""
    seq, index = evaluate(node.value, env, own), evaluate(node.slice, env, own)
    if not isinstance(seq, IntTuple) or not isinstance(index, Scalar) or index.value is None:
        return None
    if not -len(seq.items) <= index.value < len(seq.items):
        return None
    item = seq.items[index.value]
    return Scalar(item.value, item.derived or index.derived) if item.value is not None else None


def _sequence(node: ast.Tuple | ast.List, env: Mapping[str, Value], own: frozenset[str]) -> IntTuple | None:
    """A tuple or list literal; an element that is not an integer keeps its place as ``None``."""
    items: list[Scalar] = []
    for element in node.elts:
        if isinstance(element, ast.Starred):
            spread = evaluate(element.value, env, own)
            if not isinstance(spread, IntTuple):
                return None  # its length is unknown, so every later index would be
            items.extend(spread.items)
            continue
        value = evaluate(element, env, own)
        items.append(value if isinstance(value, Scalar) else Scalar(None))
    return IntTuple(tuple(items), isinstance(node, ast.List))


def stored_names(node: ast.AST) -> set[str]:
    """Every name a statement stores to, outside nested function and class bodies."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    names = set()
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
        elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            names |= stored_names(child)
    return names


def _unpack(target: ast.expr, value: Value | None, bound: dict[str, Value | None]) -> None:
    """Bind ``target`` to ``value``: a name, or a tuple of names taking a tuple's elements."""
    if isinstance(target, ast.Name):
        bound[target.id] = value
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        plain = not any(isinstance(t, ast.Starred) for t in target.elts)
        fits = isinstance(value, IntTuple) and len(value.items) == len(target.elts)
        for position, element in enumerate(target.elts):
            item = value.items[position] if plain and fits else None  # type: ignore[union-attr]
            if isinstance(element, ast.Starred):
                element = element.value
            _unpack(element, item, bound)
        return
    root = target
    while isinstance(root, (ast.Subscript, ast.Attribute, ast.Starred)):
        root = root.value
    if isinstance(root, ast.Name):  # ``dims[0] = 3`` changes a list: its value is no longer known
        bound[root.id] = None


def statement_bindings(stmt: ast.stmt, env: Mapping[str, Value]) -> dict[str, Value | None]:
    """The names one module-level statement binds, each to its new value (None: no longer a constant)."""
    bound: dict[str, Value | None] = {}
    if isinstance(stmt, ast.Assign):
        own = frozenset().union(*(_target_names(t) for t in stmt.targets))
        value = evaluate(stmt.value, env, own)
        for target in stmt.targets:
            _unpack(target, value, bound)
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
        bound[stmt.target.id] = evaluate(stmt.value, env, frozenset({stmt.target.id}))
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        name = stmt.target.id
        combined = ast.BinOp(left=ast.Name(name, ast.Load()), op=stmt.op, right=stmt.value)
        bound[name] = evaluate(combined, env, frozenset({name}))
    else:
        bound = dict.fromkeys(stored_names(stmt))
    return {n: _constant_or_none(v) for n, v in bound.items() if not n.startswith(METADATA_PREFIX)}


def _constant_or_none(value: Value | None) -> Value | None:
    """A name bound to a float or a string is no constant at all (a tuple keeps such elements' places)."""
    return None if isinstance(value, Scalar) and value.value is None else value


def _target_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t.value if isinstance(t, ast.Starred) else t) for t in target.elts))
    return set()


def _apply(env: dict[str, Value], bound: Mapping[str, Value | None]) -> None:
    for name, value in bound.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value


def _final_constants(tree: ast.Module) -> dict[str, Value]:
    """The constants a module holds once its body has run."""
    env: dict[str, Value] = {}
    for stmt in tree.body:
        _apply(env, statement_bindings(stmt, env))
    return env


def read_size_constants(tree: ast.Module) -> list[SizeConstant]:
    """Every size constant of a module, in the order the file first names them."""
    env = _final_constants(tree)
    found = []
    for name, value in env.items():
        if isinstance(value, Scalar):
            if value.value is not None and value.value >= 0:
                found.append(SizeConstant(name, name, None, value.value, value.derived))
            continue
        for index, item in enumerate(value.items):
            if item.value is not None and item.value >= 0:
                found.append(SizeConstant(element_key(name, index), name, index, item.value, item.derived))
    return found


def size_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level size constants by key: the sizes a problem can be rebound at."""
    return {c.key: c.value for c in read_size_constants(tree)}


def derived_size_names(tree: ast.Module) -> list[str]:
    """Keys computed from another constant (``K = M * 2``): they follow it when it is rebound."""
    return [c.key for c in read_size_constants(tree) if c.derived]


def _override(name: str, value: Value, sizes: Mapping[str, int]) -> ast.stmt | None:
    """``name = <rebound value>`` for a name ``value`` was just bound to; None if nothing of it is rebound.

    A tuple keeps its elements that are not rebound by reading them back
    (``kernel_size = (kernel_size[0], 7)``), floats and all.
    """
    if isinstance(value, Scalar):
        if name not in sizes:
            return None
        rebound: ast.expr = ast.Constant(sizes[name])
    else:
        keys = [element_key(name, i) for i in range(len(value.items))]
        if not any(k in sizes for k in keys):
            return None
        elements = [
            ast.Constant(sizes[k]) if k in sizes
            else ast.Subscript(ast.Name(name, ast.Load()), ast.Constant(i), ast.Load())
            for i, k in enumerate(keys)
        ]
        rebound = ast.List(elements, ast.Load()) if value.is_list else ast.Tuple(elements, ast.Load())
    return ast.Assign(targets=[ast.Name(name, ast.Store())], value=rebound, lineno=0)


def rebind(tree: ast.Module, sizes: Mapping[str, int]) -> ast.Module:
    """A copy of ``tree`` with the given keys rebound: after every statement that binds one
    of their names, the name is set again, so constants computed from it follow along."""
    body: list[ast.stmt] = []
    env: dict[str, Value] = {}
    for stmt in tree.body:
        bound = statement_bindings(stmt, env)
        _apply(env, bound)
        body.append(stmt)
        for name, value in bound.items():
            override = None if value is None else _override(name, value, sizes)
            if override is not None:  # read in the rebound module, so a length a size sets is right
                _apply(env, statement_bindings(override, env))
                body.append(ast.copy_location(override, stmt))
    rebound = copy.copy(tree)
    rebound.body = body
    return ast.fix_missing_locations(rebound)


def resolved_sizes(tree: ast.Module, sizes: Mapping[str, int]) -> dict[str, int]:
    """Every size constant once ``sizes`` are rebound: what a module loaded at them will hold."""
    return size_constants(rebind(tree, sizes))
