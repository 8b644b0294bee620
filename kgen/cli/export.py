"""`kgen export SOURCE... --out DIR`: verified kernels leave kgen as a package of torch ops.

SOURCE is a run (id or folder: its verified winners; ``--target`` picks one) or a kernel file
with ``--problem`` (one ``--problem`` per kernel file, in order). `--list` shows what the
sources hold and why a kernel cannot leave. Everything refused is one line and exit 2
(``kgen.export.problem_signature.ExportError``); the work is in ``kgen/export/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kgen.cli.terminal import console, fail_usage, new_table, print_table
from kgen.core.text import counted
from kgen.errors import KgenUsageError

if TYPE_CHECKING:
    from kgen.export.sources import Exportable


def _is_kernel_file(source: str) -> bool:
    path = Path(source).expanduser()
    return path.suffix == ".py" or path.is_file()


def export_command(
    sources: Annotated[list[str], typer.Argument(
        help="A run id or run folder (its verified winners), or a kernel file (with --problem). Several "
             "sources make one package; a forward and its backward together get autograd.",
        metavar="SOURCE...")],
    out: Annotated[Path | None, typer.Option("--out", help="The folder to write the package into (new or empty).")
                   ] = None,
    name: Annotated[str, typer.Option("--name", metavar="PKG", help="The package's import name; its ops are "
                                      "torch.ops.kgen_PKG.<problem>.")] = "kgen_kernels",
    problems: Annotated[list[str] | None, typer.Option(
        "--problem", metavar="NAME", help="The problem of a kernel file: a catalog name or a problem file; one "
                                          "per kernel file, in order.")] = None,
    target: Annotated[str | None, typer.Option("--target", help="Export only a run's winner for this target.")
                      ] = None,
    backend: Annotated[str, typer.Option("--backend", help="The backend a kernel file is written in.")] = "triton",
    list_only: Annotated[bool, typer.Option("--list", help="Show what the sources can export (problem, target, "
                                            "backend, verdict, speed) and why not; write nothing.")] = False,
    in_model: Annotated[str | None, typer.Option(
        "--in-model", metavar="SIZE", help="After exporting, decide which of the package's ops to use in a compiled "
        "Llama of this size (tiny, small, 100m, 1b): each group of ops alone timed in the compiled training step "
        "against stock on this machine's GPU; the decision is written beside the manifest (in_model.json, "
        "in_model.md). Needs a GPU and transformers.")] = None,
) -> None:
    """Export verified kernels as an installable Python package of PyTorch custom ops.

    Each kernel becomes torch.ops.kgen_PKG.<problem>, a plain function and an nn.Module. A Triton kernel is registered with torch.library.triton_op: torch.compile(fullgraph=True) traces its launches into the graph, so Inductor sees the Triton kernels themselves (no opaque-op boundary), and the traced outputs must have the reference's shapes; a kernel whose Python wrapper does not trace (kgen tries at export) and a CuTe DSL kernel are opaque custom ops whose fake implementation runs the problem's reference on fake tensors (the manifest says which and why). A forward exported with its catalog-paired backward (rmsnorm_forward + rmsnorm_backward, cross_entropy_*, layernorm_*) gets autograd through the backward kernel. Calls are held to what the verifier checked (dtypes and ranks refused when they differ; plain-layout inputs made contiguous). The package carries the kernel source verbatim with its hash (a file changed after export is refused at import), the problem file, the verdict and kgen's version, and a pytest file that re-checks every kernel against its reference on fresh inputs without kgen.

    Only a "passed" verdict exports: a run's winner (its final_eval.json or eval.json), a kernel file beside its run's eval.json, a seed whose evidence.json holds its code hash, or else a kernel file kgen verifies now, as `kgen eval` does.

    Examples:

      kgen export 20261122-081500-3fa9c1 --list

      kgen export 20261122-081500-3fa9c1 --target h100 --out rmsnorm_pkg --name rmsnorm_ops

      kgen export fwd.py bwd.py --problem rmsnorm_forward --problem rmsnorm_backward --out pkg

      kgen export RUN --out pkg --name my_ops --in-model 100m
    """
    from kgen.export.package import check_package_name, write_package
    from kgen.export.sources import find_exportables

    files = [s for s in sources if _is_kernel_file(s)]
    given = list(problems or [])
    if len(given) != len(files):
        fail_usage(f"{counted(len(files), 'kernel file')} and {counted(len(given), '--problem', '--problem')}: give one "
                   "--problem per kernel file, in order (a run names its own problem)")
    found: list[Exportable] = []
    pending = iter(given)
    try:
        if not list_only:
            if out is None:
                fail_usage("--out DIR is needed: the folder to write the package into (or --list to only look)")
            check_package_name(name)
        if in_model is not None:
            _check_in_model(in_model)
        for source in sources:
            problem = next(pending) if _is_kernel_file(source) else None
            found += find_exportables(source, problem=problem, target=target, backend=backend)
        if list_only:
            _print_list(found)
            return
        assert out is not None
        manifest = write_package(found, out, name)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    names = ", ".join(f"{e.name}{' (+ autograd)' if e.backward else ''}" for e in manifest.kernels)
    console.print(f"exported {names} to {out} as package {name} (torch.ops.{manifest.namespace}); "
                  f"check it: cd {out} && python -m pytest tests", highlight=False, soft_wrap=True)
    opaque = [f"{e.name} ({e.registration_note})" for e in manifest.kernels if e.registration != "triton_op"]
    if opaque:
        console.print(f"opaque to torch.compile: {'; '.join(opaque)}", highlight=False, soft_wrap=True)
    if in_model is not None:
        _decide_in_model(out / name, in_model)


def _check_in_model(size: str) -> None:
    """--in-model's size and machine, judged before anything is written."""
    from kgen.backends.device import resolve_device
    from kgen.train_check.check import model_size
    from kgen.train_check.model import require_transformers

    model_size(size, "--in-model")
    require_transformers()
    if not resolve_device("auto").is_gpu:
        raise KgenUsageError("--in-model needs a GPU: which ops win inside a compiled model is a GPU timing "
                             "(on a CPU the kernels run in Triton's interpreter)")


def _decide_in_model(folder: Path, size: str) -> None:
    """Time each group of the package's ops in the compiled model; write and print the decision."""
    from kgen.train_check.check import model_size
    from kgen.train_check.in_model import decide
    from kgen.train_check.kernels import import_package

    module = import_package(folder)
    decision = decide(module, model_size(size)[1], "cuda",
                      progress=lambda line: console.print(f"  in the model: {line}", highlight=False))
    (folder / "in_model.json").write_text(decision.model_dump_json(indent=1))
    (folder / "in_model.md").write_text(decision.markdown())
    console.print(decision.text(), highlight=False, soft_wrap=True)
    console.print(f"kept in the compiled model: {', '.join(decision.kept) or 'none (the compiler serves every op)'}; "
                  f"written to {folder / 'in_model.json'}", highlight=False, soft_wrap=True)


def _print_list(found: list[Exportable]) -> None:
    """One row per kernel, a run's winner named by its candidate id (the run is the one given);
    names and verdicts whole, the speed and the reason wrapped at spaces (the width rule)."""
    table = new_table(None, "source", "problem", "target", "backend", "verdict", "speed", "export",
                      whole=("source", "problem", "target", "backend", "verdict"))
    for row in found:
        table.add_row(row.candidate or row.source, row.problem, row.target or "-", row.backend, row.verdict,
                      row.speed, "yes" if row.exportable else f"no: {row.reason}")
    print_table(table)
