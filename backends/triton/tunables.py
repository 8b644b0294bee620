"""Finding the knobs of a Triton kernel source: what a person tunes by hand.

Launches ``kernel[grid](..., num_warps=4, BLOCK_SIZE=1024)`` (their meta-parameter keywords
named by Triton's conventions: ``BLOCK*``, ``GROUP*``, ``*_PER_SM``, ``num_warps``,
``num_stages``), assignments to such names (``BLOCK_M = 128``, ``num_warps = 8``), the
literal bounds of ``min``/``max`` block sizes, and ``2 * props.multi_processor_count``
program counts. Everything is read off the syntax tree, never the text, and a knob is the
exact source span(s) of its literal, so rewriting one keeps the parent's layout. A block
size computed from the problem's sizes (``triton.next_power_of_2(n_cols)``) is part of the
kernel's correctness and is never a knob. Imports no triton.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kgen.backends.tunables import SourceSpan, Tunable, TunableKind, choices_for

if TYPE_CHECKING:
    from kgen.backends.targets import HardwareTarget

_SM_COUNT_NAMES = frozenset({"multi_processor_count", "sm_count", "num_sms", "n_sms", "sms"})
_PROGRAM_COUNT_WORDS = ("program", "grid", "cta")


def find_tunables(source: str, target: HardwareTarget | None = None) -> list[Tunable]:
    """Every knob of ``source`` in source order, with its choices for ``target``
    (no target: the widest choices any target allows). No knobs, or source that
    does not parse: an empty list."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    scan = _Scan()
    scan.visit(tree)
    found = _Discovery(scan).run()
    tunables = _name_uniquely(found)
    for tunable in tunables:
        tunable.choices = choices_for(tunable, target)
    return [t for t in tunables if t.choices]


@dataclass
class _Scope:
    """A function (or the module): where names are bound, and how often."""

    name: str
    params: set[str] = field(default_factory=set)
    stores: Counter[str] = field(default_factory=Counter)
    #: name -> the expression it is bound to, for single-name and tuple-unpacking assignments
    bindings: dict[str, ast.expr] = field(default_factory=dict)


@dataclass
class _Found:
    base_name: str
    kind: TunableKind
    value: int | str
    nodes: list[ast.expr]
    axis: Literal["m", "n", "k"] | None = None


class _Scan(ast.NodeVisitor):
    """One pass over the tree: scopes and their bindings, launches, knob assignments,
    and ``int * <SM count>`` products, each with its enclosing scope."""

    def __init__(self) -> None:
        self.module = _Scope("<module>")
        self.stack: list[_Scope] = [self.module]
        self.launches: list[tuple[ast.Call, _Scope]] = []
        self.assignments: list[tuple[str, ast.expr, _Scope]] = []
        self.products: list[tuple[ast.BinOp, _Scope, str | None]] = []
        self._assign_target: list[str | None] = [None]

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope = _Scope(node.name)
        args = node.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                scope.params.add(arg.arg)
        self.stack.append(scope)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.stack[-1].stores[node.id] += 1

    def visit_Assign(self, node: ast.Assign) -> None:
        scope = self.stack[-1]
        pairs = list(_assigned_pairs(node))
        for name, value in pairs:
            scope.bindings[name] = value
            self.assignments.append((name, value, scope))
        single = pairs[0][0] if len(pairs) == 1 else None
        self._assign_target.append(single)
        self.generic_visit(node)
        self._assign_target.pop()

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        scope = self.stack[-1]
        if isinstance(node.target, ast.Name) and node.value is not None:
            scope.bindings[node.target.id] = node.value
            self.assignments.append((node.target.id, node.value, scope))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Subscript) and node.keywords:
            self.launches.append((node, self.stack[-1]))
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Mult):
            self.products.append((node, self.stack[-1], self._assign_target[-1]))
        self.generic_visit(node)


def _assigned_pairs(node: ast.Assign) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) for ``x = v`` and for ``a, b = 1, 2``; other targets bind nothing we follow."""
    if len(node.targets) != 1:
        return
    target, value = node.targets[0], node.value
    if isinstance(target, ast.Name):
        yield target.id, value
    elif (
        isinstance(target, ast.Tuple | ast.List)
        and isinstance(value, ast.Tuple | ast.List)
        and len(target.elts) == len(value.elts)
    ):
        for elt, val in zip(target.elts, value.elts, strict=True):
            if isinstance(elt, ast.Name):
                yield elt.id, val


def _int_literal(node: ast.expr | None) -> int | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
        and node.value > 0
    ):
        return node.value
    return None


def _kwarg_kind(keyword: str) -> TunableKind | None:
    """What a launch keyword tunes, by Triton's naming conventions for meta-parameters."""
    if keyword == "num_warps":
        return "num_warps"
    if keyword == "num_stages":
        return "num_stages"
    key = keyword.upper()
    if key.startswith("BLOCK") or "_BLOCK" in key:
        return "block"
    if key.startswith("GROUP"):
        return "group"
    if key.endswith("_PER_SM"):
        return "programs_per_sm"
    if key.startswith("ROWS") or key.endswith("_PER_PROGRAM") or key == "SPLIT_K":
        return "count"
    return None


def _variable_kind(name: str) -> TunableKind | None:
    """What an assignment tunes, judged by the variable's name."""
    key = name.lower()
    if "num_warps" in key:
        return "num_warps"
    if "num_stages" in key:
        return "num_stages"
    if "block" in key:
        return "block"
    if key.startswith("group"):
        return "group"
    if key.endswith("per_sm"):
        return "programs_per_sm"
    if key.startswith("rows_") or key.endswith("_per_program") or key == "split_k":
        return "count"
    return None


def _axis(name: str) -> Literal["m", "n", "k"] | None:
    last = name.lower().rsplit("_", 1)[-1]
    if last == "m":
        return "m"
    if last == "n":
        return "n"
    if last == "k":
        return "k"
    return None


def _literal_slots(value: ast.expr) -> list[tuple[ast.Constant, str]]:
    """The literals of a block-like value that may move: the value itself when it is a
    literal, or the bounds of a top-level ``min(...)``/``max(...)``. Anything computed
    from the problem's sizes stays as written."""
    if _int_literal(value) is not None:
        assert isinstance(value, ast.Constant)
        return [(value, "")]
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("min", "max")
        and not value.keywords
    ):
        role = "cap" if value.func.id == "min" else "floor"
        return [(arg, role) for arg in value.args if isinstance(arg, ast.Constant) and _int_literal(arg)]
    return []


def _mentions_sm_count(node: ast.expr) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr.lower() in _SM_COUNT_NAMES:
            return True
        if isinstance(sub, ast.Name) and sub.id.lower() in _SM_COUNT_NAMES:
            return True
    return False


class _Discovery:
    def __init__(self, scan: _Scan) -> None:
        self.scan = scan
        self.found: list[_Found] = []
        self.taken: set[int] = set()  # id() of nodes already owned by a tunable

    def run(self) -> list[_Found]:
        for call, scope in self.scan.launches:
            self._launch(call, scope)
        for name, value, scope in self.scan.assignments:
            self._assignment(name, value, scope)
        for product, scope, target_name in self.scan.products:
            self._programs_per_sm(product, scope, target_name)
        return sorted(self.found, key=lambda f: (f.nodes[0].lineno, f.nodes[0].col_offset))

    def _add(self, found: _Found) -> None:
        if any(id(node) in self.taken for node in found.nodes):
            return
        self.taken.update(id(node) for node in found.nodes)
        self.found.append(found)

    def _resolve(self, name: str, scope: _Scope) -> ast.expr | None:
        """The one expression ``name`` is bound to where it is read, if there is exactly one."""
        if name in scope.params:
            return None
        if scope.stores[name]:
            return scope.bindings.get(name) if scope.stores[name] == 1 else None
        module = self.scan.module
        if module.stores[name] == 1:
            return module.bindings.get(name)
        return None

    def _launch(self, call: ast.Call, scope: _Scope) -> None:
        assert isinstance(call.func, ast.Subscript)
        kernel = ast.unparse(call.func.value)
        block_literals = Counter(
            _int_literal(kw.value)
            for kw in call.keywords
            if kw.arg and _kwarg_kind(kw.arg) not in (None, "num_warps", "num_stages")
        )
        for kw in call.keywords:
            if kw.arg is None or (kind := _kwarg_kind(kw.arg)) is None:
                continue
            label = f"{kw.arg}@{kernel}"
            axis = _axis(kw.arg) if kind == "block" else None
            if kind in ("num_warps", "num_stages"):
                self._meta_parameter(label, kind, kw.value, scope)
            elif (literal := _int_literal(kw.value)) is not None:
                grid = self._grid_literals(call.func.slice, literal, scope)
                if grid and block_literals[literal] > 1:
                    continue  # the grid's literal could belong to either knob: leave both
                self._add(_Found(label, kind, literal, [kw.value, *grid], axis))
            elif isinstance(kw.value, ast.Name):
                bound = self._resolve(kw.value.id, scope)
                if bound is not None:
                    self._slots(kw.value.id, kind, bound, axis)
            else:
                self._slots(label, kind, kw.value, axis)

    def _meta_parameter(self, label: str, kind: TunableKind, value: ast.expr, scope: _Scope) -> None:
        """num_warps / num_stages never change results, so the launch argument itself moves,
        whatever it was; a literal it names is shown as its current value."""
        if isinstance(value, ast.Constant) and _int_literal(value) is None:
            return  # True, None, 0: not a setting a power of two can replace
        current: int | str | None = _int_literal(value)
        if current is None and isinstance(value, ast.Name):
            bound = self._resolve(value.id, scope)
            if bound is not None:
                current = _int_literal(bound) or ast.unparse(bound)
                self.taken.add(id(bound))  # the launch argument is the knob, not its binding
        if current is None:
            current = ast.unparse(value)
        self._add(_Found(label, kind, current, [value]))

    def _slots(self, label: str, kind: TunableKind, value: ast.expr, axis: str | None) -> None:
        for literal, role in _literal_slots(value):
            name = f"{role}({label})" if role else label
            self._add(_Found(name, kind, literal.value, [literal], axis if not role else None))

    def _grid_literals(self, grid: ast.expr, value: int, scope: _Scope) -> list[ast.expr]:
        """Literals equal to a launch argument's value inside that launch's grid
        (followed through one name): the same block size written twice."""
        if isinstance(grid, ast.Name):
            bound = self._resolve(grid.id, scope)
            if bound is None:
                return []
            grid = bound
        return [node for node in ast.walk(grid) if _int_literal(node) == value]

    def _assignment(self, name: str, value: ast.expr, scope: _Scope) -> None:
        kind = _variable_kind(name)
        if kind is None or scope.stores[name] != 1 or name in scope.params:
            return
        if kind in ("num_warps", "num_stages"):
            if _int_literal(value) is not None:  # not launched directly: the literal moves
                self._add(_Found(name, kind, _int_literal(value) or 0, [value]))
            return
        self._slots(name, kind, value, _axis(name) if kind == "block" else None)

    def _programs_per_sm(self, product: ast.BinOp, scope: _Scope, target_name: str | None) -> None:
        """``2 * props.multi_processor_count`` where a program count is computed: the 2 moves."""
        words = (scope.name.lower(), (target_name or "").lower())
        if not any(w in name for name in words for w in _PROGRAM_COUNT_WORDS):
            return
        for factor, other in ((product.left, product.right), (product.right, product.left)):
            if _int_literal(factor) is not None and _mentions_sm_count(other):
                assert isinstance(factor, ast.Constant)
                label = f"programs_per_sm@{scope.name}" if scope is not self.scan.module else (
                    f"programs_per_sm@{target_name}"
                )
                self._add(_Found(label, "programs_per_sm", factor.value, [factor]))
                return


def _name_uniquely(found: list[_Found]) -> list[Tunable]:
    """Names must be unique: later duplicates (a kernel launched twice) get ``#2``, ``#3``."""
    seen: Counter[str] = Counter()
    tunables = []
    for item in found:
        seen[item.base_name] += 1
        count = seen[item.base_name]
        name = item.base_name if count == 1 else f"{item.base_name}#{count}"
        tunables.append(
            Tunable(
                name=name,
                kind=item.kind,
                value=item.value,
                spans=[SourceSpan.of(node) for node in item.nodes],
                axis=item.axis,
            )
        )
    return tunables
