"""The table of a problem's size constants that ``kgen problems show`` prints.

One row per constant, and for a tuple one row per element under it, so a
reader sees what the verifier will do with each: its default, its CPU value,
the values generated sets move it to, or why it stays put (axis index,
derived, fixed, a tuple's broadcast 1).
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from kgen.cli.terminal import new_table
from kgen.evals.problem.format import ProblemInfo
from kgen.evals.problem.size_constants import base_name
from kgen.evals.problem.size_sets import SizeSet, cpu_small_set, unmovable_reasons


def _moves(plan: list[SizeSet], key: str) -> str:
    """The values generated sets give ``key``, besides the base set's."""
    if not plan:
        return "-"
    first = plan[0].sizes.get(key)
    values = sorted({s.sizes[key] for s in plan[1:] if key in s.sizes} - {first})
    return ", ".join(map(str, values)) or "-"


def _tuple_text(sizes: Mapping[str, int], keys: list[str]) -> str:
    """``(3, 5)`` from a tuple's element keys; ``_`` for an element that is no size (a float, -1)."""
    by_index = {int(k[len(base_name(k)) + 1 : -1]): sizes[k] for k in keys}
    items = [str(by_index[i]) if i in by_index else "_" for i in range(max(by_index) + 1)]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def size_table(info: ProblemInfo, plans: Mapping[str, list[SizeSet]]) -> Table:
    """Every size key with default, CPU and moved values (one column per plan), and why a key stays."""
    cpu = cpu_small_set(info)
    reasons = unmovable_reasons(info)
    columns = ("constant", "default", "CPU", *(f"other values ({d} plan)" for d in plans), "note")
    table = new_table("size constants", *columns, whole=("constant", "default", "CPU"))
    groups: dict[str, list[str]] = {}
    for key in info.sizes:
        groups.setdefault(base_name(key), []).append(key)
    for name, keys in groups.items():
        if keys != [name]:
            moving = sum(k not in reasons for k in keys)
            table.add_row(f"[bold]{name}[/]", _tuple_text(info.sizes, keys), _tuple_text(cpu, keys),
                          *("" for _ in plans), "tuple: its elements move together" if moving > 1 else "")
        for key in keys:
            label = key if key == name else f"  {key[len(name):]}"
            moved = [_moves(plan, key) for plan in plans.values()]
            table.add_row(label, str(info.sizes[key]), str(cpu[key]), *moved, reasons.get(key, ""))
    return table
