"""`kgen problems list|show` and `kgen targets`: what kgen knows, the problem catalog and the
hardware targets."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from kgen.backends.device import Device
from kgen.backends.targets import all_targets
from kgen.cli.terminal import console, fail_usage
from kgen.errors import KgenUsageError
from kgen.evals.problem.catalog import catalog, resolve_problem
from kgen.evals.problem.format import sizes_text

problems_app = typer.Typer(help="The problem catalog (KernelBench format).", no_args_is_help=True)


@problems_app.command("list")
def problems_list() -> None:
    """List the catalog's problems with their default sizes."""

    table = Table(title="kgen problem catalog", title_justify="left")
    for column in ("name", "kind", "description", "default sizes"):
        table.add_column(column, overflow="fold")
    infos = catalog()
    for info in infos:
        table.add_row(info.name, info.kind, info.description, sizes_text(info.sizes))
    console.print(table)
    console.print(f"{len(infos)} problems. Details: kgen problems show NAME")


@problems_app.command("show")
def problems_show(
    name: Annotated[str, typer.Argument(help="Catalog name, alias, or path of a problem file.")],
    source: Annotated[bool, typer.Option("--source/--no-source", help="Print the problem's source.")] = True,
) -> None:
    """Show one problem: metadata, size sets, byte/FLOP model and source."""
    from rich.syntax import Syntax

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
        ("CPU sizes", _sizes(info.cpu_sizes()) + ("" if info.small_sizes else " (scaled down)")),
        ("extra sizes", "; ".join(_sizes(s) for s in info.extra_sizes) or "-"),
        ("input distributions", ", ".join(info.input_distributions) or "default"),
        ("kgen metadata", "yes" if info.has_kgen_metadata else "no (plain KernelBench file)"),
    ]
    table = Table(show_header=False, box=None)
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", value)
    console.print(table)
    if info.sizes:
        from kgen.cli.size_table import size_table
        from kgen.evals.problem.size_sets import verification_size_plan

        try:
            plans = {device.value: verification_size_plan(info, device) for device in Device}
        except KgenUsageError as exc:
            fail_usage(exc.message)
        console.print(size_table(info, plans))
    if source:
        console.print(Syntax(info.path.read_text(), "python", line_numbers=False))


def _sizes(sizes: dict[str, int]) -> str:
    return sizes_text(sizes) or "-"


def targets_command() -> None:
    """List the hardware targets kgen knows, with their ceilings and compiler targets."""
    from rich import box

    table = Table(title="kgen hardware targets", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("name", "GPU", "compiler", "SMs", "TB/s", "BF16", "FP8", "L2 MB"):
        table.add_column(column, no_wrap=True)
    for t in all_targets():
        table.add_row(
            t.name, t.display_name.removeprefix("NVIDIA ").removeprefix("AMD "), t.compiler_target,
            str(t.sm_count), f"{t.memory_bandwidth_tbs:.2f}", _num(t.bf16_tflops), _num(t.fp8_tflops),
            f"{t.l2_mb:g}",
        )
    console.print(table)
    console.print("TB/s: memory bandwidth; BF16, FP8: dense matrix TFLOP/s (vendor peaks, sources in backends/targets.py).\n"
        "Aliases work: h100, hopper, sm90, mi300, gfx942, ...")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
