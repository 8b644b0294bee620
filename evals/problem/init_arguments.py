"""A problem's arguments other than sizes, found and varied, read and rebound without executing it.

A kernel can hard-code what a problem passes its ``Model`` besides sizes (an ``eps``, a
LeakyReLU's ``negative_slope``, the ``dim`` a reduction runs over, a clamp's bounds) and
pass every trial, since every trial builds the modules with ``get_init_inputs()`` as the
file gives it. So the verifier varies each such argument, one at a time, within the range
its role allows:

* ``scale``: a non-zero float (``eps``, a slope, a temperature, a scale factor) or a
  negative integer, moved by factors of ten both ways, its sign kept.
* ``bound``: a clamp's bound (``clamp_min``, ``hardtanh_max``, ``min_value``), moved the
  same way, but only where it stays on its side of its partner (``min < max``); a zero
  bound moves by one half (one, for an integer) either way.
* ``axis``: an integer named for an axis (``dim``, ``reduce_dim``; ``constant_names.py``)
  moved to every other axis of the inputs' rank, and written in its other form (``-1``
  for the last of three axes), which must give the default's answer.

An argument is found where ``get_init_inputs()`` (or ``get_inputs()``, for a scalar handed
to ``forward``) returns it: a module-level constant it names (``eps``), keyed by that name
and rebound after every statement that binds it, so every other use of it follows (a
``dim`` that also shapes the inputs); or a literal in the returned list (``return [1]``),
keyed ``get_init_inputs()[0]`` and replaced where it stands. Sizes (positive integers
with no axis or bound name) are ``size_sets.py``'s; bools and zeros (a switch, a feature
turned off: dropout, padding) are left as the file has them.

A scale moves along a ladder of values, of which the verifier child uses the first that
the reference can run and whose answer differs visibly (beyond the tolerance) from the
default's: an ``eps`` of ``1e-6`` does not show at ``1e-4`` under a bf16 tolerance, but does
at ``1e-2`` or ``1``. Whether the reference *uses* an argument is read from that too: a
ladder with no visible rung is skipped and recorded, never held against a candidate.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel

from kgen.evals.problem.constant_names import MAX_AXIS_INDEX, is_axis_name, is_value_bound
from kgen.evals.problem.size_constants import stored_names

Number = int | float
Role = Literal["scale", "axis", "bound"]
#: The functions whose returned list hands a value to the model: constructor, then forward.
SOURCES = ("get_init_inputs", "get_inputs")
#: A scale or a bound is multiplied and divided by these, in this order, until it shows.
SCALE_FACTORS = (10.0, 100.0, 1e4, 1e6)
#: An integer scale or bound moves by fewer steps: it stays an integer.
INT_FACTORS = (10, 100)
#: Digits a varied float keeps, so ``1e-5 * 10`` reads ``0.0001`` in a report.
_DIGITS = 12


class InitArgument(BaseModel):
    """One argument a problem hands its model that is not a size."""

    #: a module-level constant (``eps``), or a literal's place (``get_init_inputs()[0]``)
    key: str
    #: the name messages use: the constant's, else the parameter's it is passed to
    name: str
    default: Number
    role: Role
    #: what its name says it bounds: ``"min"`` or ``"max"`` (a bound's only)
    side: Literal["min", "max"] | None = None
    #: the constant or parameter name it is read under, for finding a bound's partner
    names: tuple[str, ...] = ()


class ArgumentVariation(BaseModel):
    """One varied argument: the values to try, in order, for one trial."""

    key: str
    name: str
    default: Number
    role: Role
    #: tried in order: the verifier uses the first the reference runs and visibly changes
    values: list[Number]
    #: the default axis written the other way (``-1`` for ``2`` of three): must give the same answer
    equivalent: bool = False

    @property
    def place(self) -> str:
        """Where a literal stands, for a message: `` (get_init_inputs()[0])``; empty for a constant."""
        return "" if self.key == self.name else f" ({self.key})"

    def describe(self, value: Number) -> str:
        """``eps=0.01 (default 1e-05)``: how a message names the variation."""
        return f"{self.name}={value!r}{self.place} (default {self.default!r})"


def _number(node: ast.expr | None) -> Number | None:
    """The int or float a literal expression holds (``1e-5``, ``-1``); None for anything else."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if type(value) in (int, float) else None


def _numeric_constants(tree: ast.Module) -> dict[str, Number]:
    """Module-level names holding a number literal once the module has run."""
    env: dict[str, Number] = {}
    for stmt in tree.body:
        value = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = _number(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            value = _number(stmt.value)
        for name in stored_names(stmt):
            env.pop(name, None)
        if value is not None:
            env[stmt.targets[0].id if isinstance(stmt, ast.Assign) else stmt.target.id] = value  # type: ignore[union-attr]
    return env


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _returned(function: ast.FunctionDef) -> list[ast.expr]:
    """The elements of the list or tuple literal the function's last top-level ``return`` gives."""
    returns = [s for s in function.body if isinstance(s, ast.Return)]
    if not returns or not isinstance(returns[-1].value, (ast.List, ast.Tuple)):
        return []
    return list(returns[-1].value.elts)


def _parameters(tree: ast.Module, method: str) -> list[str]:
    """``Model.<method>``'s positional parameter names after ``self``."""
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return []
    found = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == method), None)
    if found is None:
        return []
    return [a.arg for a in (found.args.posonlyargs + found.args.args)[1:]]


def _side(names: tuple[str, ...]) -> Literal["min", "max"] | None:
    for name in names:
        lowered = name.lower()
        if lowered.endswith("_min") or lowered.startswith("min_"):
            return "min"
        if lowered.endswith("_max") or lowered.startswith("max_"):
            return "max"
    return None


def _role(value: Number, names: tuple[str, ...]) -> Role | None:
    """What an argument is from its value and names; None for a size, a switch or a zero scale."""
    if isinstance(value, int) and any(is_axis_name(n) for n in names) and -MAX_AXIS_INDEX - 1 <= value <= MAX_AXIS_INDEX:
        return "axis"
    if any(is_value_bound(n) for n in names):
        return "bound"
    if value == 0:
        return None
    if isinstance(value, float) or value < 0:
        return "scale"
    return None  # a positive integer: a size


def find_arguments(tree: ast.Module) -> list[InitArgument]:
    """Every argument other than a size that the problem hands its model, in the order it hands them."""
    constants = _numeric_constants(tree)
    found: dict[str, InitArgument] = {}
    for source, method in zip(SOURCES, ("__init__", "forward"), strict=True):
        function = _function(tree, source)
        if function is None:
            continue
        parameters = _parameters(tree, method)
        for position, element in enumerate(_returned(function)):
            parameter = parameters[position] if position < len(parameters) else None
            if isinstance(element, ast.Name) and element.id in constants:
                key, value, name = element.id, constants[element.id], element.id
            else:
                key, value = f"{source}()[{position}]", _number(element)
                name = parameter or key
            names = tuple(n for n in (key if key in constants else None, parameter) if n)
            role = None if value is None else _role(value, names)
            if role is None or key in found:
                continue
            found[key] = InitArgument(key=key, name=name, default=value, role=role,
                                      side=_side(names) if role == "bound" else None, names=names)
    return list(found.values())


def _rounded(value: float) -> float:
    return float(f"{value:.{_DIGITS}g}")


def _ladders(default: Number) -> tuple[list[Number], list[Number]]:
    """Values further from zero, then closer to it, the sign kept; a zero moves by a half (or one)."""
    if default == 0:
        step: Number = 1 if isinstance(default, int) else 0.5
        return [step], [-step]
    if isinstance(default, int):
        up = [default * f for f in INT_FACTORS]
        down = [int(default / f) for f in INT_FACTORS]
        return up, [v for v in down if v != 0 and v != default]
    return [_rounded(default * f) for f in SCALE_FACTORS], [_rounded(default / f) for f in SCALE_FACTORS]


def _partner(argument: InitArgument, arguments: list[InitArgument]) -> InitArgument | None:
    """A bound's other side (``clamp_max`` for ``clamp_min``, ``max_value`` for ``min_value``)."""
    if argument.side is None:
        return None
    other = "max" if argument.side == "min" else "min"
    stems = {_stem(n) for n in argument.names}
    for candidate in arguments:
        if candidate.side == other and stems & {_stem(n) for n in candidate.names}:
            return candidate
    return None


def _stem(name: str) -> str:
    lowered = name.lower()
    for affix in ("_min", "_max"):
        if lowered.endswith(affix):
            return lowered[: -len(affix)]
    for affix in ("min_", "max_"):
        if lowered.startswith(affix):
            return lowered[len(affix):]
    return lowered


def variations(argument: InitArgument, arguments: list[InitArgument], rank: int | None) -> list[ArgumentVariation]:
    """The trials one argument gets: a ladder each way for a scale or a bound, every other
    axis (and the default's other form) for an axis; ``rank`` is the inputs' (None: unknown)."""

    def made(values: list[Number], equivalent: bool = False) -> ArgumentVariation:
        return ArgumentVariation(key=argument.key, name=argument.name, default=argument.default,
                                 role=argument.role, values=values, equivalent=equivalent)

    default = argument.default
    if argument.role == "axis":
        assert isinstance(default, int)
        if rank is None:
            return [made([a]) for a in range(MAX_AXIS_INDEX + 1) if a != default]
        if not -rank <= default < rank:
            return []
        others = [made([a]) for a in range(rank) if a != default % rank]
        other_form = default - rank if default >= 0 else default + rank
        return [*others, made([other_form], equivalent=True)]
    up, down = _ladders(default)
    partner = _partner(argument, arguments) if argument.role == "bound" else None
    if partner is not None:
        if argument.side == "min":
            up, down = [v for v in up if v < partner.default], [v for v in down if v < partner.default]
        else:
            up, down = [v for v in up if v > partner.default], [v for v in down if v > partner.default]
    return [made(ladder) for ladder in (up, down) if ladder]


def argument_variations(tree: ast.Module, rank: int | None) -> list[ArgumentVariation]:
    """Every argument's variations, in the order the problem hands the arguments."""
    arguments = find_arguments(tree)
    return [v for a in arguments for v in variations(a, arguments, rank)]


def _assignment(name: str, value: Number, where: ast.stmt) -> ast.stmt:
    return ast.copy_location(ast.Assign(targets=[ast.Name(name, ast.Store())], value=ast.Constant(value)), where)


class _LiteralSwap(ast.NodeTransformer):
    """Replaces the literals of a source function's returned list that ``values`` names."""

    def __init__(self, values: Mapping[str, Number]):
        self.values = values

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        if node.name not in SOURCES:
            return node
        returns = [s for s in node.body if isinstance(s, ast.Return)]
        if returns and isinstance(returns[-1].value, (ast.List, ast.Tuple)):
            elements = returns[-1].value.elts
            for position in range(len(elements)):
                key = f"{node.name}()[{position}]"
                if key in self.values:
                    elements[position] = ast.copy_location(ast.Constant(self.values[key]), elements[position])
        return node


def rebind_arguments(tree: ast.Module, values: Mapping[str, Number]) -> ast.Module:
    """A copy of ``tree`` with the arguments keyed in ``values`` set: a constant after every
    module-level statement that binds it, a literal where it stands in the returned list."""
    if not values:
        return tree
    body: list[ast.stmt] = []
    for stmt in tree.body:
        body.append(stmt)
        for name in sorted(stored_names(stmt) & set(values)):
            body.append(_assignment(name, values[name], stmt))
    rebound = copy.deepcopy(tree)
    rebound.body = [copy.deepcopy(s) for s in body]
    rebound = _LiteralSwap(values).visit(rebound)
    return ast.fix_missing_locations(rebound)
