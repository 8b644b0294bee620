"""The size thresholds a candidate branches on: integers it compares sizes with.

On the CPU the verifier's trials stay short (a few thousand columns, a thousand rows), so a
kernel whose code changes behaviour past some size (``if n_cols > 8192:`` a split path,
``USE_SPLIT = N >= 1 << 14``, a bf16 partial sum only past 4096 columns, ``grid =
(min(rows, 2048),)``, ``BLOCK = min(next_power_of_2(n), 65536)``) is never run on the other
side. :func:`find_size_thresholds` reads the candidate's source (never runs it) and returns
every integer that looks like such a threshold, with the line it came from and the input
dims the compared value was traced to; ``evals/problem/threshold_sets.py`` turns them into
size sets. Generous on purpose: an extra trial costs seconds, a missed threshold costs trust;
the planner drops thresholds the plan already crosses and bounds the rest.

Where thresholds are found:

* comparisons (``if``, ``while``, ternaries, ``tl.constexpr`` flags computed on the host, heuristics
  lambdas, ``@triton.jit`` code) between a size-derived value and an integer, the integer
  folded from literals and names bound once to one (``SPLIT_AT = 16384``, ``1 << 13``, ``16 * 1024``),
  and moved through constant factors (``n * 4 > 65536`` is ``n > 16384``);
* ``min``/``max``/``tl.minimum``/``tl.maximum`` of a size-derived value and an integer (a capped
  block or a capped grid);
* ``n // K`` and ``cdiv(n, K)`` of a size-derived ``n`` (the count changes past ``K`` and ``2K``);
* tables: a compared name that loops over a literal (``for limit, block in ((1024, 128), (8192, 512))``),
  ``bisect`` over one: every integer in the table;
* ``@triton.autotune`` with ``prune_configs_by``: the integers of its configs, against its ``key``.

A value is size-derived when it traces (through local assignments, function and kernel
parameters at their call and launch sites, ``self`` attributes) to ``.shape``/``.size()``/
``numel()``/``len()``; one whose origin cannot be traced (a program id, an ``__init__`` argument)
counts as an unknown size; values that are never sizes (``.ndim``, ``.dtype``,
``element_size()``, loop counters over literal ranges) do not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kgen.evals.problem.size_threshold import SizeThreshold, ThresholdAxis
from kgen.evals.static_rules.ast_helpers import _params, _short, _walk_own

#: integers below this are no thresholds worth a trial: the plan's ``ones`` and small sets
#: already sit on both sides of them, and ``x.dim() == 2``, ``stride == 1`` would be noise
MIN_THRESHOLD = 16
#: integers at or above this are never reached by any trial (2**31 index guards)
MAX_THRESHOLD = 1 << 30
#: at most this many thresholds are returned (the planner bounds the trials further)
MAX_FOUND = 32
#: tracing gives up this deep (a name bound to a name bound to a parameter ...)
MAX_DEPTH = 8

#: an unknown size: the finder could not tell which
UNKNOWN = ThresholdAxis()
#: tensor attributes and methods that are sizes
_SHAPE_ATTRS = frozenset({"shape"})
_SIZE_METHODS = frozenset({"size"})
_NUMEL_METHODS = frozenset({"numel", "nelement"})
#: tensor metadata that is never a size
_NOT_SIZES = frozenset({"ndim", "dtype", "device", "itemsize", "is_cuda", "layout", "element_size", "dim",
                        "ndimension", "is_contiguous", "is_floating_point", "data_ptr", "get_device"})
#: methods that hand on a tensor's dims unchanged (indexing from the end stays right after a reshape)
_VIEW_METHODS = frozenset({"contiguous", "float", "half", "bfloat16", "to", "type", "detach", "clone", "cuda", "cpu"})
_RESHAPE_METHODS = frozenset({"view", "reshape", "flatten", "view_as", "reshape_as", "expand", "squeeze", "unsqueeze"})
_MINMAX = frozenset({"min", "max", "minimum", "maximum"})
_CDIV = frozenset({"cdiv"})
_PROGRAM_IDS = frozenset({"program_id", "num_programs"})
Axes = frozenset[ThresholdAxis]


def find_size_thresholds(source: str) -> list[SizeThreshold]:
    """Every size threshold in ``source``, deduplicated (one of two a step apart), smallest first (at most :data:`MAX_FOUND`);
    empty for a file that does not parse (the static stage rejects it anyway)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    finder = _Finder(tree)
    found: dict[tuple[int, tuple[ThresholdAxis, ...]], SizeThreshold] = {}
    for threshold in finder.thresholds():
        if MIN_THRESHOLD <= threshold.value < MAX_THRESHOLD:
            found.setdefault((threshold.value, threshold.axes), threshold)
    kept: list[SizeThreshold] = []
    for threshold in sorted(found.values(), key=lambda t: (t.value, t.line)):
        # ``n > 16383`` and ``n >= 16384`` are one threshold: a trial past one is past both
        if not any(k.axes == threshold.axes and threshold.value - k.value <= 1 for k in kept):
            kept.append(threshold)
    return kept[:MAX_FOUND]


class _Finder:
    """One parsed candidate: its functions, call sites and constants, and the tracing over them."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.enclosing: dict[int, ast.AST] = {}
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda]] = {}
        self.lambdas: list[ast.Lambda] = []
        self._index(tree, tree)
        self.calls: dict[str, list[tuple[ast.Call, ast.AST]]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _callee_name(node.func)
                if name:
                    self.calls.setdefault(name, []).append((node, self.enclosing.get(id(node), tree)))
        self.module_bindings = _bindings(tree)
        self.self_bindings: dict[str, list[tuple[ast.AST, ast.AST]]] = {}
        for fn_list in self.functions.values():
            for fn in fn_list:
                for node in _walk_own(fn):
                    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                        for target in _targets(node):
                            if isinstance(target, ast.Attribute) and _is_name(target.value, "self"):
                                self.self_bindings.setdefault(target.attr, []).append((node.value, fn))

    def _index(self, node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.enclosing[id(child)] = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(child.name, []).append(child)
                for decorator in child.decorator_list:
                    self._index(decorator, scope)
                for default in [*child.args.defaults, *child.args.kw_defaults]:
                    if default is not None:
                        self._index(default, scope)
                for stmt in child.body:
                    self.enclosing[id(stmt)] = child
                    self._index(stmt, child)
            elif isinstance(child, ast.Lambda):
                self.lambdas.append(child)
                self.enclosing[id(child.body)] = child
                self._index(child.body, child)
            else:
                self._index(child, scope)

    # -- where thresholds are -----------------------------------------------------------
    def thresholds(self) -> Iterator[SizeThreshold]:
        for node in ast.walk(self.tree):
            scope = self.enclosing.get(id(node), self.tree)
            if isinstance(node, ast.Compare):
                yield from self._compare(node, scope)
            elif isinstance(node, ast.Call):
                yield from self._call(node, scope)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
                yield from self._division(node, node.left, node.right, scope)
        for fn_list in self.functions.values():
            for fn in fn_list:
                yield from self._autotune(fn)

    def _compare(self, node: ast.Compare, scope: ast.AST) -> Iterator[SizeThreshold]:
        operands = [node.left, *node.comparators]
        for left, right in zip(operands, operands[1:], strict=False):
            for const_side, other in ((right, left), (left, right)):
                value = self.int_value(const_side, scope)
                if value is not None and self.int_value(other, scope) is None:
                    yield from self._against(value, other, scope, node)
                    break
            else:
                for table_side, other in ((right, left), (left, right)):
                    for value in self._table_values(table_side, scope):
                        yield from self._against(value, other, scope, node)

    def _call(self, node: ast.Call, scope: ast.AST) -> Iterator[SizeThreshold]:
        name = _callee_name(node.func)
        if name in _MINMAX and len(node.args) >= 2:
            values = [self.int_value(a, scope) for a in node.args]
            others = [a for a, v in zip(node.args, values, strict=True) if v is None]
            for value in values:
                if value is not None:
                    for other in others:
                        yield from self._against(value, other, scope, node)
        elif name in _CDIV and len(node.args) == 2:
            yield from self._division(node, node.args[0], node.args[1], scope)
        elif name.startswith("bisect") and len(node.args) >= 2:
            for value in self._literal_ints(node.args[0], scope):
                yield from self._against(value, node.args[1], scope, node)

    def _division(self, node: ast.AST, numerator: ast.AST, divisor: ast.AST, scope: ast.AST) -> Iterator[SizeThreshold]:
        """``n // K`` and ``cdiv(n, K)``: the count is 1 up to ``K`` and 2 from ``2K``; only for an
        ``n`` traced to a size (a division of an unknown value is everywhere)."""
        k = self.int_value(divisor, scope)
        if k is None or k < MIN_THRESHOLD or self.int_value(numerator, scope) is not None:
            return
        axes = self.axes(numerator, scope, 0, set())
        if axes and UNKNOWN not in axes:
            for value in (k, 2 * k):
                yield self._threshold(value, axes, node)

    def _autotune(self, fn: ast.AST) -> Iterator[SizeThreshold]:
        """``@triton.autotune(configs=..., key=[...], prune_configs_by=...)``: the pruning picks
        configs by the key's sizes, so each config's block sizes are thresholds on them."""
        for decorator in getattr(fn, "decorator_list", []):
            if not (isinstance(decorator, ast.Call) and _callee_name(decorator.func) == "autotune"):
                continue
            keywords = {k.arg: k.value for k in decorator.keywords if k.arg}
            if "prune_configs_by" not in keywords:
                continue
            key_names = [v for v in self._literal_strs(keywords.get("key"))]
            axes: set[ThresholdAxis] = set()
            for key in key_names:
                axes |= self._param_axes(fn, key, 0, set())
            configs = keywords.get("configs", decorator.args[0] if decorator.args else None)
            for value in self._config_ints(configs, fn):
                yield self._threshold(value, frozenset(axes) or frozenset({UNKNOWN}), decorator)

    def _against(self, value: int, other: ast.AST, scope: ast.AST, node: ast.AST) -> Iterator[SizeThreshold]:
        """``other`` compared with ``value``: constant factors moved across (``n * 4 > 65536``)."""
        value, other = _moved_across(value, other, lambda e: self.int_value(e, scope))
        axes = self.axes(other, scope, 0, set())
        if axes:
            yield self._threshold(value, axes, node)

    def _threshold(self, value: int, axes: Axes, node: ast.AST) -> SizeThreshold:
        known = () if UNKNOWN in axes else tuple(sorted(axes, key=lambda a: (a.input or -1, a.dim or 0, a.product)))
        return SizeThreshold(value=value, line=getattr(node, "lineno", 0), text=_short(node, 80), axes=known)

    # -- constants ------------------------------------------------------------------------
    def int_value(self, expr: ast.AST | None, scope: ast.AST, depth: int = 0) -> int | None:
        """``expr`` folded to an int when it is one (literals, names bound once to one, ``1 << 13``)."""
        if expr is None or depth > MAX_DEPTH:
            return None
        if isinstance(expr, ast.Constant):
            return expr.value if isinstance(expr.value, int) and not isinstance(expr.value, bool) else None
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            inner = self.int_value(expr.operand, scope, depth + 1)
            return None if inner is None else -inner
        if isinstance(expr, ast.BinOp):
            left, right = self.int_value(expr.left, scope, depth + 1), self.int_value(expr.right, scope, depth + 1)
            return None if left is None or right is None else _fold(expr.op, left, right)
        if isinstance(expr, ast.Name):
            bound = self._bound_values(expr.id, scope)
            if bound is not None and len(bound) == 1:
                value, where = bound[0]
                return self.int_value(value, where, depth + 1)
            return None
        if isinstance(expr, ast.Call) and len(expr.args) == 1 and _callee_name(expr.func) in ("int", "constexpr", "next_power_of_2"):
            inner = self.int_value(expr.args[0], scope, depth + 1)
            if inner is None:
                return None
            return _next_power_of_2(inner) if _callee_name(expr.func) == "next_power_of_2" else inner
        return None

    def _bound_values(self, name: str, scope: ast.AST) -> list[tuple[ast.AST, ast.AST]] | None:
        """What ``name`` is bound to, seen from ``scope``: its function's own bindings if it binds
        it, else the module's; None when it is a parameter, a loop target or not bound at all."""
        for where in (scope, self.tree):
            if where is not self.tree and not isinstance(where, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if where is not self.tree and name in {a.arg for a in _params(where)}:
                return None
            bindings = self.module_bindings if where is self.tree else _bindings(where)
            if name in bindings:
                return [(v, where) for v in bindings[name]] if None not in bindings[name] else None
        return None

    def _table_values(self, expr: ast.AST, scope: ast.AST) -> list[int]:
        """A name looping over a literal table (``for limit, block in LIMITS``): its integers."""
        if not isinstance(expr, ast.Name):
            return []
        values: list[int] = []
        for node in _walk_own(scope) if scope is not self.tree else ast.walk(self.tree):
            if isinstance(node, (ast.For, ast.comprehension)) and expr.id in _names_in(node.target):
                values += self._literal_ints(node.iter, scope)
        return values

    def _literal_ints(self, expr: ast.AST | None, scope: ast.AST, depth: int = 0) -> list[int]:
        """The integers of a literal table, reached through names, ``sorted()``, ``.items()``, ``.keys()``."""
        if expr is None or depth > MAX_DEPTH:
            return []
        if isinstance(expr, ast.Name):
            bound = self._bound_values(expr.id, scope)
            return [v for value, where in bound or [] for v in self._literal_ints(value, where, depth + 1)]
        if isinstance(expr, ast.Call):
            target = expr.func.value if isinstance(expr.func, ast.Attribute) else (expr.args[0] if expr.args else None)
            return self._literal_ints(target, scope, depth + 1)
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            elements = [*expr.keys, *expr.values] if isinstance(expr, ast.Dict) else expr.elts
            out = []
            for element in elements:
                value = self.int_value(element, scope)
                if value is not None:
                    out.append(value)
                elif isinstance(element, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
                    out += self._literal_ints(element, scope, depth + 1)
            return out
        return []

    def _literal_strs(self, expr: ast.AST | None) -> list[str]:
        if isinstance(expr, (ast.List, ast.Tuple)):
            return [e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return []

    def _config_ints(self, configs: ast.AST | None, scope: ast.AST) -> list[int]:
        """The meta-parameter values of ``triton.Config({...})`` entries (not ``num_warps``)."""
        if isinstance(configs, ast.Name):
            bound = self._bound_values(configs.id, self.tree) or []
            return [v for value, _ in bound for v in self._config_ints(value, scope)]
        values = []
        for node in ast.walk(configs) if configs is not None else []:
            if isinstance(node, ast.Call) and _callee_name(node.func) == "Config" and node.args:
                values += [v for v in self._literal_ints(node.args[0], scope) if v >= MIN_THRESHOLD]
        return values

    # -- tracing sizes -----------------------------------------------------------------------
    def axes(self, expr: ast.AST, scope: ast.AST, depth: int, seen: set[int]) -> Axes:
        """The sizes ``expr`` is built from: input dims, products of them, or :data:`UNKNOWN`;
        empty when it is built from no size at all (literals, ``.ndim``, ``.dtype``)."""
        if depth > MAX_DEPTH or id(expr) in seen:
            return frozenset({UNKNOWN})
        seen = seen | {id(expr)}
        if self.int_value(expr, scope) is not None:
            return frozenset()
        if isinstance(expr, ast.Subscript):
            return self._subscript_axes(expr, scope, depth, seen)
        if isinstance(expr, ast.Attribute):
            if expr.attr in _NOT_SIZES:
                return frozenset()
            if expr.attr in _SHAPE_ATTRS:  # a whole shape compared or multiplied out
                return frozenset({ThresholdAxis(input=self.input_of(expr.value, scope, depth, seen), product=True)})
            if _is_name(expr.value, "self"):
                return self._self_axes(expr.attr, depth, seen)
            return frozenset({UNKNOWN})
        if isinstance(expr, ast.Call):
            return self._call_axes(expr, scope, depth, seen)
        if isinstance(expr, ast.Name):
            return self._name_axes(expr.id, scope, depth, seen)
        if isinstance(expr, ast.BinOp):
            left = self.axes(expr.left, scope, depth + 1, seen)
            right = self.axes(expr.right, scope, depth + 1, seen)
            if UNKNOWN in left and left - {UNKNOWN} == set() and right - {UNKNOWN}:
                left = frozenset()  # ``n // splits`` with an untraced divisor: still a threshold on ``n``
            if UNKNOWN in right and right - {UNKNOWN} == set() and left - {UNKNOWN}:
                right = frozenset()
            if isinstance(expr.op, ast.Mult) and left and right:
                return frozenset(_as_product(left) | _as_product(right))
            return left | right
        if isinstance(expr, (ast.UnaryOp,)):
            return self.axes(expr.operand, scope, depth + 1, seen)
        if isinstance(expr, ast.IfExp):
            return self.axes(expr.body, scope, depth + 1, seen) | self.axes(expr.orelse, scope, depth + 1, seen)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return frozenset().union(*(self.axes(e, scope, depth + 1, seen) for e in expr.elts)) if expr.elts else frozenset()
        return frozenset({UNKNOWN})

    def _self_axes(self, attr: str, depth: int, seen: set[int]) -> Axes:
        """``self.n``: what every method assigns to it (an ``__init__`` argument traces to unknown)."""
        pairs = self.self_bindings.get(attr, [])
        if not pairs:
            return frozenset({UNKNOWN})
        return frozenset().union(*(self.axes(v, where, depth + 1, seen) for v, where in pairs))

    def _subscript_axes(self, expr: ast.Subscript, scope: ast.AST, depth: int, seen: set[int]) -> Axes:
        index = self.int_value(expr.slice, scope)
        base = expr.value
        if isinstance(base, ast.Attribute) and base.attr in _SHAPE_ATTRS:
            return frozenset({ThresholdAxis(input=self.input_of(base.value, scope, depth, seen), dim=index)})
        if isinstance(base, ast.Call) and _callee_name(base.func) in _SIZE_METHODS and not base.args:
            return frozenset({ThresholdAxis(input=self.input_of(base.func.value, scope, depth, seen), dim=index)})
        key = expr.slice.value if isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str) else None
        if key is not None and isinstance(base, ast.Name) and isinstance(scope, ast.Lambda):
            # ``args["n_cols"]`` in a heuristics lambda or a prune function: the kernel's parameter
            return self._kernel_param_axes(key, depth, seen)
        if key is not None and isinstance(base, ast.Name):
            return self._kernel_param_axes(key, depth, seen)
        return self.axes(base, scope, depth + 1, seen) if index is None else frozenset({UNKNOWN})

    def _call_axes(self, expr: ast.Call, scope: ast.AST, depth: int, seen: set[int]) -> Axes:
        name = _callee_name(expr.func)
        if isinstance(expr.func, ast.Attribute):
            owner = expr.func.value
            if name in _SIZE_METHODS:
                dim = self.int_value(expr.args[0], scope) if expr.args else None
                return frozenset({ThresholdAxis(input=self.input_of(owner, scope, depth, seen), dim=dim,
                                                product=not expr.args)})
            if name in _NUMEL_METHODS:
                return frozenset({ThresholdAxis(input=self.input_of(owner, scope, depth, seen), product=True)})
            if name in _NOT_SIZES:
                return frozenset()
        if name == "len" and expr.args:
            return frozenset({ThresholdAxis(input=self.input_of(expr.args[0], scope, depth, seen), dim=0)})
        args = [*expr.args, *(k.value for k in expr.keywords)]
        if name in _PROGRAM_IDS:
            return frozenset({UNKNOWN})  # a program's index: as many as the grid has, some size
        if args and all(self.int_value(a, scope) is not None for a in args):
            return frozenset()  # ``range(4)``: built from no size
        found = frozenset().union(*(self.axes(a, scope, depth + 1, seen) for a in args)) if args else frozenset()
        return found or frozenset({UNKNOWN})

    def _name_axes(self, name: str, scope: ast.AST, depth: int, seen: set[int]) -> Axes:
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            params = [a.arg for a in _params(scope)]
            if name in params:
                return self._param_axes(scope, name, depth, seen)
            bindings = _bindings(scope, with_unpacking=True)
            if name in bindings:
                return self._bound_axes(bindings[name], scope, depth, seen)
        if name in self.module_bindings:
            return self._bound_axes(self.module_bindings[name], self.tree, depth, seen)
        return frozenset({UNKNOWN})

    def _bound_axes(self, values: list[ast.AST | None], scope: ast.AST, depth: int, seen: set[int]) -> Axes:
        found: set[ThresholdAxis] = set()
        for value in values:
            if value is None:
                found.add(UNKNOWN)
            elif isinstance(value, _Unpacked):
                found |= self._unpacked_axes(value, scope, depth, seen)
            else:
                found |= self.axes(value, scope, depth + 1, seen)
        return frozenset(found)

    def _unpacked_axes(self, value: _Unpacked, scope: ast.AST, depth: int, seen: set[int]) -> Axes:
        """``rows, cols = x.shape``: position ``i`` of a shape; from the end after a star."""
        source = value.source
        owner = None
        if isinstance(source, ast.Attribute) and source.attr in _SHAPE_ATTRS:
            owner = source.value
        elif isinstance(source, ast.Call) and _callee_name(source.func) in _SIZE_METHODS and not source.args:
            owner = source.func.value
        if owner is None:
            return self.axes(source, scope, depth + 1, seen)
        return frozenset({ThresholdAxis(input=self.input_of(owner, scope, depth, seen), dim=value.index)})

    def _param_axes(self, fn: ast.AST, name: str, depth: int, seen: set[int]) -> Axes:
        """A parameter: what its call sites (``f(...)``, ``kernel[grid](...)``) pass for it."""
        if isinstance(fn, ast.Lambda) or not hasattr(fn, "name"):
            return self._kernel_param_axes(name, depth, seen) if isinstance(fn, ast.Lambda) else frozenset({UNKNOWN})
        params = [a.arg for a in _params(fn)]
        position = params.index(name) if name in params else -1
        if params and params[0] == "self":
            position -= 1
        found: set[ThresholdAxis] = set()
        sites = self.calls.get(fn.name, [])
        for call, where in sites:
            arg = next((k.value for k in call.keywords if k.arg == name), None)
            if arg is None and 0 <= position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
                arg = call.args[position]
            found |= self.axes(arg, where, depth + 1, seen) if arg is not None else {UNKNOWN}
        return frozenset(found) if sites else frozenset({UNKNOWN})

    def _kernel_param_axes(self, name: str, depth: int, seen: set[int]) -> Axes:
        """A string key naming a kernel parameter (``args["n_cols"]``): every function with that parameter."""
        found: set[ThresholdAxis] = set()
        for fn_list in self.functions.values():
            for fn in fn_list:
                if name in {a.arg for a in _params(fn)}:
                    found |= self._param_axes(fn, name, depth + 1, seen)
        return frozenset(found) or frozenset({UNKNOWN})

    def input_of(self, expr: ast.AST, scope: ast.AST, depth: int, seen: set[int]) -> int | None:
        """Which ``forward`` argument a tensor expression is (through views, locals and helpers)."""
        for _ in range(MAX_DEPTH):
            if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and (
                expr.func.attr in _VIEW_METHODS or expr.func.attr in _RESHAPE_METHODS
            ):
                expr = expr.func.value
                continue
            if not isinstance(expr, ast.Name) or not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return None
            params = [a.arg for a in _params(scope)]
            if expr.id in params:
                shift = 1 if params and params[0] == "self" else 0
                if scope.name == "forward":
                    return params.index(expr.id) - shift
                sites = self.calls.get(scope.name, [])
                position = params.index(expr.id) - shift
                if len(sites) != 1 or position >= len(sites[0][0].args):
                    return None
                expr, scope = sites[0][0].args[position], sites[0][1]
                continue
            bound = _bindings(scope).get(expr.id)
            if not bound or len(bound) != 1 or bound[0] is None:
                return None
            expr = bound[0]
        return None


class _Unpacked:
    """One name of an unpacking assignment: ``index`` into ``source`` (negative: from the end)."""

    def __init__(self, source: ast.AST, index: int):
        self.source = source
        self.index = index


def _bindings(scope: ast.AST, with_unpacking: bool = False) -> dict[str, list]:
    """Names bound in ``scope`` (not nested functions) -> the values bound to them; None for a
    binding whose value is not an expression (a loop target over a non-literal, an import)."""
    bound: dict[str, list] = {}
    nodes = scope.body if isinstance(scope, ast.Module) else list(_walk_own(scope))
    for node in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in _targets(node):
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
                elif isinstance(target, (ast.Tuple, ast.List)):
                    _bind_unpacked(target, node.value, bound, with_unpacking)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(node.value)
            bound[node.target.id].append(None)  # an accumulated value: never a single constant
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, (ast.For, ast.comprehension)):
            for name in _names_in(node.target):
                bound.setdefault(name, []).append(_LoopOver(node.iter) if with_unpacking else None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
    if with_unpacking:
        for name, values in bound.items():
            bound[name] = [v.iterable if isinstance(v, _LoopOver) else v for v in values]
    return bound


class _LoopOver:
    def __init__(self, iterable: ast.AST):
        self.iterable = iterable


def _bind_unpacked(target: ast.Tuple | ast.List, value: ast.AST, bound: dict[str, list], with_unpacking: bool) -> None:
    starred = next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)), None)
    values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) else None
    for i, elt in enumerate(target.elts):
        if not isinstance(elt, ast.Name):
            continue
        if values is not None:
            bound.setdefault(elt.id, []).append(values[i])
        elif with_unpacking:
            index = i if starred is None or i < starred else i - len(target.elts)
            bound.setdefault(elt.id, []).append(_Unpacked(value, index))
        else:
            bound.setdefault(elt.id, []).append(None)


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    return [node.target]  # type: ignore[attr-defined]


def _names_in(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _callee_name(func: ast.AST) -> str:
    """The last name of a call's function: ``min``, ``cdiv`` of ``triton.cdiv``, ``kernel`` of ``kernel[grid]``."""
    if isinstance(func, ast.Subscript):
        func = func.value
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _fold(op: ast.operator, left: int, right: int) -> int | None:
    try:
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.FloorDiv):
            return left // right
        if isinstance(op, ast.LShift) and 0 <= right < 64:
            return left << right
        if isinstance(op, ast.RShift) and 0 <= right < 64:
            return left >> right
        if isinstance(op, ast.Pow) and 0 <= right < 64:
            return left**right
        if isinstance(op, ast.Mod):
            return left % right
    except ZeroDivisionError:
        return None
    return None


def _moved_across(value: int, other: ast.AST, int_of) -> tuple[int, ast.AST]:
    """``n * 4 > 65536`` is ``n > 16384``; ``n // 2 > 4096`` is ``n > 8193``; through
    ``next_power_of_2(n) > X`` the threshold on ``n`` is ``X`` itself."""
    for _ in range(MAX_DEPTH):
        if isinstance(other, ast.Call) and _callee_name(other.func) == "next_power_of_2" and len(other.args) == 1:
            other = other.args[0]
            continue
        if not isinstance(other, ast.BinOp):
            break
        left, right = int_of(other.left), int_of(other.right)
        if isinstance(other.op, ast.Mult) and (left or right):
            factor, other = (left, other.right) if left else (right, other.left)
            value = value // factor if factor > 0 else value
        elif isinstance(other.op, (ast.FloorDiv, ast.Div)) and right and right > 0:
            value, other = value * right + right - 1, other.left
        elif isinstance(other.op, ast.LShift) and right is not None and 0 <= right < 64:
            value, other = value >> right, other.left
        elif isinstance(other.op, ast.RShift) and right is not None and 0 <= right < 64:
            value, other = (value << right) + (1 << right) - 1, other.left
        elif isinstance(other.op, (ast.Add, ast.Sub)) and (left is not None or right is not None):
            offset = left if left is not None else right
            sign = -1 if isinstance(other.op, ast.Sub) and right is not None else 1
            if isinstance(other.op, ast.Sub) and left is not None:
                break  # ``K - n``: the direction flips; the value as it stands is still a threshold
            value, other = value - sign * offset, (other.right if left is not None else other.left)
        else:
            break
    return value, other


def _as_product(axes: Axes) -> set[ThresholdAxis]:
    return {a if a == UNKNOWN else ThresholdAxis(input=a.input, dim=a.dim, product=True) for a in axes}


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()

