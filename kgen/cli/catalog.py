"""`kgen problems list|show` and `kgen targets`: what kgen knows, the problem catalog and the
hardware targets."""

from __future__ import annotations

import textwrap
from typing import Annotated

import typer
from rich.markup import escape

from kgen.backends.device import Device
from kgen.backends.targets import all_targets
from kgen.cli.terminal import console, fail_usage, new_table, print_code, print_table
from kgen.errors import KgenUsageError
from kgen.evals.problem.catalog import catalog, resolve_problem
from kgen.evals.problem.format import sizes_text
from kgen.evals.problem.size_sets import cpu_small_set

problems_app = typer.Typer(help="The problem catalog (KernelBench format).", no_args_is_help=True)


@problems_app.command("list")
def problems_list() -> None:
    """List the catalog's problems, one line each; `kgen problems show NAME` has the details."""

    infos = catalog()
    table = new_table("kgen problem catalog", "name", "description", whole=("name",))
    room = _description_room(console.width, max(len(info.name) for info in infos))
    for info in infos:
        table.add_row(info.name, escape(textwrap.shorten(info.description or "-", room, placeholder=" …")))
    print_table(table)
    console.print(f"{len(infos)} problems. Details: kgen problems show NAME", highlight=False)


#: what a row of the list spends besides its two cells: the gap between the columns
_LIST_GAP = 2
#: the description keeps at least this many characters on a narrow terminal (the row then wraps)
_LEAST_DESCRIPTION = 20


def _description_room(width: int, name_width: int) -> int:
    """How much of a description fits beside the names on one line of ``width`` columns: a list
    is one line per problem (33 problems took 244 lines when each description wrapped beside
    its sizes); the rest of a description is `kgen problems show NAME`'s."""
    return max(_LEAST_DESCRIPTION, width - name_width - _LIST_GAP)


@problems_app.command("show")
def problems_show(
    name: Annotated[str, typer.Argument(help="Catalog name, alias, or path of a problem file.")],
    source: Annotated[bool, typer.Option("--source/--no-source", help="Print the problem's source.")] = True,
) -> None:
    """Show one problem: metadata, size sets, byte/FLOP model and source."""
    try:
        info = resolve_problem(name)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    rows = [
        ("name", info.name),
        ("path", str(info.path)),
        ("kind", info.kind),
        ("description", info.description or "-"),
        ("aliases", ", ".join(info.aliases) or "-"),
        ("default sizes", _sizes(info.sizes)),
        ("CPU sizes", _sizes(cpu_small_set(info)) + ("" if info.small_sizes else " (scaled down)")),
        ("extra sizes", "; ".join(_sizes(s) for s in info.extra_sizes) or "-"),
        ("input distributions", ", ".join(info.input_distributions) or "default"),
        ("kgen metadata", "yes" if info.has_kgen_metadata else "no (plain KernelBench file)"),
    ]
    table = new_table(None, "key", "value", whole=("key",), show_header=False, box=None)
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", escape(value))
    print_table(table)
    if info.sizes:
        from kgen.cli.size_table import size_table
        from kgen.evals.problem.size_sets import verification_size_plan

        try:
            plans = {device.value: verification_size_plan(info, device) for device in Device}
        except KgenUsageError as exc:
            fail_usage(exc.message)
        print_table(size_table(info, plans))
    if source:
        print_code(info.path.read_text())


def _sizes(sizes: dict[str, int]) -> str:
    return sizes_text(sizes) or "-"


def targets_command() -> None:
    """List the hardware targets kgen knows, with their ceilings and compiler targets."""
    columns = ("name", "GPU", "compiler", "SMs", "TB/s", "BF16", "FP8", "L2 MB")
    table = new_table("kgen hardware targets", *columns, whole=columns)
    for t in all_targets():
        table.add_row(
            t.name, t.display_name.removeprefix("NVIDIA ").removeprefix("AMD "), t.compiler_target,
            str(t.sm_count), f"{t.memory_bandwidth_tbs:.2f}", _num(t.bf16_tflops), _num(t.fp8_tflops),
            f"{t.l2_mb:g}",
        )
    print_table(table)
    console.print("TB/s: memory bandwidth; BF16, FP8: dense matrix TFLOP/s (vendor peaks, sources in backends/targets.py).\n"
        "Aliases work: h100, hopper, sm90, mi300, gfx942, ...")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
