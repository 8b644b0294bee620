"""Offline mutation: retune a known-good Triton kernel's launch and tiling knobs for a target.

Without an LLM, kgen still improves on the knowledge base's best kernel by
moving the numbers a person would tune by hand: ``num_warps``, ``num_stages``,
block sizes, group sizes, rows per program, programs per SM. Everything is
found on the syntax tree, never by pattern-matching text, and a change
replaces exactly the source span of one literal (or one launch argument), so
the variant keeps the parent's comments and layout and its diff reads as the
tuning step it is.

Only literals and knobs move. A block size computed from the problem's sizes
(``triton.next_power_of_2(n_cols)`` for a kernel that keeps a whole row in
registers) is part of the kernel's correctness, not its speed, so it is never
touched; the verifier would reject such a variant anyway, but each candidate
costs a verification run. ``num_warps`` and ``num_stages`` only change how a
kernel is scheduled, never what it computes, so they may replace whatever
expression the parent used.
"""

from __future__ import annotations

import ast
import hashlib
import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kgen.backends.targets import HardwareTarget

TunableKind = Literal["num_warps", "num_stages", "block", "group", "count", "programs_per_sm"]

#: share of moves that change two knobs at once; most moves change one, so a
#: measured gain can be credited to a single knob
TWO_KNOB_MOVE_RATE = 0.25
#: a thread's registers: an fp32 matmul accumulator larger than this per thread spills
MAX_ACCUMULATOR_REGS_PER_THREAD = 256
#: Triton's default software-pipelining depth when a launch names none
DEFAULT_NUM_STAGES = {"nvidia": 3, "amd": 2}
_SM_COUNT_NAMES = frozenset({"multi_processor_count", "sm_count", "num_sms", "n_sms", "sms"})
_PROGRAM_COUNT_WORDS = ("program", "grid", "cta")


class MutationError(RuntimeError):
    """A rewrite produced source that no longer parses: a bug here, never the parent's fault."""


class SourceSpan(BaseModel):
    """Where one rewritable expression sits: ast positions (1-based lines, UTF-8 byte columns)."""

    model_config = ConfigDict(frozen=True)

    lineno: int
    col_offset: int
    end_lineno: int
    end_col_offset: int

    @classmethod
    def of(cls, node: ast.expr) -> SourceSpan:
        assert node.end_lineno is not None and node.end_col_offset is not None
        return cls(
            lineno=node.lineno,
            col_offset=node.col_offset,
            end_lineno=node.end_lineno,
            end_col_offset=node.end_col_offset,
        )

    def overlaps(self, other: SourceSpan) -> bool:
        return (self.lineno, self.col_offset) < (other.end_lineno, other.end_col_offset) and (
            other.lineno,
            other.col_offset,
        ) < (self.end_lineno, self.end_col_offset)


class Tunable(BaseModel):
    """One knob of a kernel source: its current value and every span that must change with it.

    A knob usually has one span. A block size written as the same literal in
    a launch argument and in that launch's grid has two: both move together,
    or the grid would stop covering the data.
    """

    name: str
    kind: TunableKind
    #: the current value: an int, or the source text of the expression it replaces
    value: int | str
    choices: list[int] = Field(default_factory=list)
    spans: list[SourceSpan]
    #: "m", "n" or "k" for a matmul tile dimension; feeds the shared-memory estimate
    axis: Literal["m", "n", "k"] | None = None

    @property
    def line(self) -> int:
        return self.spans[0].lineno


class Variant(BaseModel):
    """A mutated kernel source and what changed, for logs, prompts and the archive."""

    source: str
    #: tunable name -> (old value, new value), as source text
    changes: dict[str, tuple[str, str]]
    description: str
    #: ``source_key(source)``: what callers put in ``exclude`` once a variant is evaluated
    key: str


def source_key(source: str) -> str:
    """A hash of the source's syntax tree: equal for sources that differ only in
    comments or layout, so a variant is never evaluated twice under two spellings."""
    try:
        text = ast.dump(ast.parse(source))
    except SyntaxError:
        text = source
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------
# Finding the knobs
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Choices per target
# --------------------------------------------------------------------------------------


def choices_for(tunable: Tunable, target: HardwareTarget | None = None) -> list[int]:
    """The values worth trying for ``tunable`` on ``target``, ascending.

    num_warps: powers of two up to 16 on NVIDIA, 8 on AMD (a warp there is a
    64-wide wavefront, so 8 already means 512 threads); num_stages 1..5 on
    NVIDIA, 1..2 on AMD (its pipeliner gains nothing deeper); block sizes:
    powers of two from a quarter to four times the current one, at least 16
    (tl.dot's smallest tile side), with one bf16 row of the block fitting the
    target's shared memory; programs per SM 1..8.
    """
    amd = target is not None and target.vendor == "amd"
    if tunable.kind == "num_warps":
        return [1, 2, 4, 8] if amd else [1, 2, 4, 8, 16]
    if tunable.kind == "num_stages":
        return [1, 2] if amd else [1, 2, 3, 4, 5]
    if tunable.kind == "programs_per_sm":
        return list(range(1, 9))
    current = tunable.value
    if not isinstance(current, int):
        return []
    low = max(1, current // 4)
    if tunable.kind == "block" and current >= 16:
        low = max(16, low)
    high = current * 4
    if tunable.kind == "block" and target is not None:
        high = min(high, target.shared_memory_per_sm_kb * 1024 // 2)
    return list(_powers_of_two(low, high))


def _powers_of_two(low: int, high: int) -> Iterator[int]:
    value = 1
    while value <= high:
        if value >= low:
            yield value
        value *= 2


def describe_tunables(source: str, target: HardwareTarget | None = None) -> str:
    """One line per knob: name, current value, line, choices; for logs and prompts."""
    tunables = find_tunables(source, target)
    if not tunables:
        return "no tunable launch or tiling parameters found"
    lines = []
    for t in tunables:
        choices = ", ".join(str(c) for c in t.choices)
        lines.append(f"{t.name} = {t.value} (line {t.line}; try {choices})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Rewriting and mutating
# --------------------------------------------------------------------------------------


def apply_values(source: str, values: dict[str, int], target: HardwareTarget | None = None) -> str:
    """``source`` with the named knobs set to ``values``; an unknown name raises KeyError."""
    by_name = {t.name: t for t in find_tunables(source, target)}
    edits = [(span, str(value)) for name, value in values.items() for span in by_name[name].spans]
    return _rewrite(source, edits)


def _rewrite(source: str, edits: Iterable[tuple[SourceSpan, str]]) -> str:
    """Replace exact spans (ast's UTF-8 byte columns), last first so earlier offsets hold."""
    data = source.encode()
    line_starts = [0]
    for line in data.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    ordered = sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True)
    for span, text in ordered:
        start = line_starts[span.lineno - 1] + span.col_offset
        end = line_starts[span.end_lineno - 1] + span.end_col_offset
        data = data[:start] + text.encode() + data[end:]
    result = data.decode()
    try:
        ast.parse(result)
    except SyntaxError as exc:
        raise MutationError(f"rewritten source no longer parses: {exc}") from exc
    return result


def mutate(
    source: str,
    target: HardwareTarget,
    *,
    n: int,
    rng: random.Random,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[Variant]:
    """Up to ``n`` distinct variants of ``source`` retuned for ``target``.

    Most variants move one knob, so a timing difference names its cause; about
    one in four moves two, to step across knobs that only pay together (bigger
    tiles with more warps). Variants are distinct by :func:`source_key`, never
    the parent, never a key in ``exclude``, and never a matmul tiling that
    overflows the target's shared memory or a thread's registers. The same
    ``rng`` seed gives the same variants.
    """
    tunables = find_tunables(source, target)
    if not tunables or n <= 0:
        return []
    seen = {source_key(source), *exclude}
    singles = [(t, v) for t in tunables for v in t.choices if v != t.value]
    rng.shuffle(singles)
    variants: list[Variant] = []
    budget = len(singles) + 8 * n + 16
    while len(variants) < n and budget > 0:
        budget -= 1
        move = _next_move(tunables, singles, rng)
        if move is None:
            break
        if _overlaps(move) or not _fits(tunables, move, target):
            continue
        variant = _variant(source, move)
        if variant.key in seen:
            continue
        seen.add(variant.key)
        variants.append(variant)
    return variants


def _next_move(
    tunables: list[Tunable], singles: list[tuple[Tunable, int]], rng: random.Random
) -> dict[str, tuple[Tunable, int]] | None:
    movable = [t for t in tunables if any(c != t.value for c in t.choices)]
    two_knob = len(movable) >= 2 and (rng.random() < TWO_KNOB_MOVE_RATE or not singles)
    if two_knob:
        pair = rng.sample(movable, 2)
        return {t.name: (t, rng.choice([c for c in t.choices if c != t.value])) for t in pair}
    if singles:
        tunable, value = singles.pop()
        return {tunable.name: (tunable, value)}
    return None


def _variant(source: str, move: dict[str, tuple[Tunable, int]]) -> Variant:
    edits = [(span, str(value)) for tunable, value in move.values() for span in tunable.spans]
    new_source = _rewrite(source, edits)
    changes = {name: (str(t.value), str(value)) for name, (t, value) in move.items()}
    description = "; ".join(f"{name} {old} -> {new}" for name, (old, new) in changes.items())
    return Variant(source=new_source, changes=changes, description=description, key=source_key(new_source))


def _overlaps(move: dict[str, tuple[Tunable, int]]) -> bool:
    """Two knobs whose spans nest (a literal inside a replaced expression) cannot move together."""
    spans = [span for tunable, _ in move.values() for span in tunable.spans]
    return any(a.overlaps(b) for i, a in enumerate(spans) for b in spans[i + 1 :])


def _fits(tunables: list[Tunable], move: dict[str, tuple[Tunable, int]], target: HardwareTarget) -> bool:
    """False for a matmul tiling that cannot run well on ``target``: its pipelined
    bf16 operand tiles overflow shared memory, or its fp32 accumulator overflows
    a thread's registers. Kernels without an M/N/K tiling always fit."""
    values = {t.name: t.value for t in tunables}
    values.update({name: value for name, (_, value) in move.items()})
    tiles: dict[str, int] = {}
    for t in tunables:
        value = values[t.name]
        if t.kind == "block" and t.axis and isinstance(value, int):
            if t.axis in tiles:
                return True  # two tilings in one source: no single estimate applies
            tiles[t.axis] = value
    if set(tiles) != {"m", "n", "k"}:
        return True
    stages = _first_int(values[t.name] for t in tunables if t.kind == "num_stages")
    warps = _first_int(values[t.name] for t in tunables if t.kind == "num_warps")
    stages = stages or DEFAULT_NUM_STAGES[target.vendor]
    warps = warps or 4
    shared_bytes = stages * (tiles["m"] * tiles["k"] + tiles["k"] * tiles["n"]) * 2
    if shared_bytes > target.shared_memory_per_sm_kb * 1024:
        return False
    accumulator_per_thread = tiles["m"] * tiles["n"] // (warps * target.warp_size)
    return accumulator_per_thread <= MAX_ACCUMULATOR_REGS_PER_THREAD


def _first_int(values: Iterable[int | str]) -> int | None:
    return next((v for v in values if isinstance(v, int)), None)


# --------------------------------------------------------------------------------------
# The whole parameter space (an exhaustive sweep's, to compare a search with)
# --------------------------------------------------------------------------------------


def parameter_space(source: str, target: HardwareTarget) -> list[dict[str, int]]:
    """Every combination of ``source``'s knob choices for ``target`` that :func:`mutate`
    could also produce: the product of each knob's choices, in source order and ascending
    values (the last knob moving fastest), without the matmul tilings that overflow the
    target's shared memory or a thread's registers (the rule ``mutate`` applies).

    Each point names every knob and goes straight to :func:`apply_values`. A knob whose
    source span nests inside an earlier knob's (so the two cannot both be rewritten) stays
    out of the space at its current value. Block-size choices are relative to the current
    value (a quarter to four times it), so the space is the one around ``source``: a search
    that moves on from a variant can reach values outside it. No knobs: an empty list.
    """
    from itertools import product

    tunables: list[Tunable] = []
    for tunable in find_tunables(source, target):
        spans = [span for kept in tunables for span in kept.spans]
        if not any(a.overlaps(b) for a in tunable.spans for b in spans):
            tunables.append(tunable)
    if not tunables:
        return []
    points = []
    for values in product(*(t.choices for t in tunables)):
        move = {t.name: (t, value) for t, value in zip(tunables, values, strict=True)}
        if _fits(tunables, move, target):
            points.append({t.name: value for t, value in zip(tunables, values, strict=True)})
    return points


def space_size(source: str, target: HardwareTarget) -> int:
    """How many configurations :func:`parameter_space` holds for ``source`` on ``target``."""
    return len(parameter_space(source, target))
