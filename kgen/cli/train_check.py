"""`kgen train-check`: train a tiny Llama stock and with kgen's kernels; do the loss curves agree?

Exit 0: the kernel run agrees with stock (loss within the stock noise band, no module drifted);
1: it disagrees; 2: bad usage (a missing folder, an unknown size, no transformers); 3: inconclusive
(a stock run or the kernel run could not run here); 130: interrupted (it says so; nothing is
written). Progress lines go to stderr as `kgen run`'s do (``kgen.cli.run.LiveProgress``). The work
is in ``kgen/train_check/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kgen.cli.exit_codes import INTERRUPTED, NO_MODEL_CODE_OR_INCONCLUSIVE, NOT_VERIFIED, SUCCESS
from kgen.cli.terminal import err_console, fail_usage, print_text
from kgen.errors import KgenUsageError

if TYPE_CHECKING:
    from kgen.train_check.profile_check import ProfileCheck
    from kgen.train_check.report import TrainCheckResult


def train_check_command(
    kernels: Annotated[Path | None, typer.Option(
        "--kernels", metavar="DIR", help="A folder of kernel files named by problem (rmsnorm_forward.py, "
        "rmsnorm_backward.py, swiglu.py, cross_entropy_forward.py, cross_entropy_backward.py, embedding_backward.py); "
        "the library's seed kernels serve the problems it lacks. Default: the seed kernels.")] = None,
    export: Annotated[Path | None, typer.Option(
        "--export", metavar="PKG", help="A package `kgen export --out PKG` wrote (or its package folder): its ops "
        "serve the problems it holds, called as torch.ops.kgen_NAME.<problem> with the package's own checks; "
        "--kernels files and the seed kernels serve the rest.")] = None,
    fused: Annotated[bool, typer.Option("--fused", help="Swap in the fused seams too: each block's residual add + "
                                        "RMSNorm (fused_add_rmsnorm_forward.py, fused_add_rmsnorm_backward.py) and the "
                                        "LM head + loss (fused_linear_cross_entropy.py, which then serves the loss).")
                     ] = False,
    steps: Annotated[int, typer.Option("--steps", help="Training steps of each run.")] = 12,
    size: Annotated[str, typer.Option("--size", help="Model size: tiny (CPU), small, 100m or 1b (GPU).")] = "tiny",
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the initialisation and the token stream.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", metavar="FILE.svg", help="Also draw the loss curves and "
                                              "each run's gap to stock inside the allowed band, as an SVG picture."
                                              )] = None,
    profile: Annotated[Path | None, typer.Option("--profile", metavar="FILE.md", help="Also compile a training step "
                                                 "of stock and of the kernels (torch.compile), time them and write "
                                                 "where each step's time goes (torch.profiler: milliseconds and "
                                                 "launches per step by kind of kernel) as a markdown table.")] = None,
) -> None:
    """Train a Llama-architecture model (random init, built locally) stock and with kgen's kernels swapped in.

    Two stock runs measure the noise: the reference, and the same run with its parameters moved by one bf16 rounding step. The kernel run (RMSNorm forward/backward, SwiGLU, the embedding's backward and cross-entropy replaced by the kernels) agrees when its loss stays within that noise band widened x3 at every step, no module's parameters drifted further from the reference than x3 the noise run's, and each kernel's calls at the first and last step, on the run's own tensors, are within the verifier's tolerance of its problem's reference in fp64 (a small model's loss curve can hide a kernel's error; its outputs cannot). On the CPU the kernels run in Triton's interpreter.

    Examples:

      kgen train-check --steps 8

      kgen train-check --kernels my_kernels/ --size small --device cuda --json

      kgen export RUN --out rmsnorm_pkg --name rmsnorm_ops && kgen train-check --export rmsnorm_pkg

      kgen train-check --fused --size 100m --device cuda --profile step.md
    """
    from kgen.backends.device import resolve_device
    from kgen.train_check.check import check_arguments  # imports neither torch nor triton

    try:
        check_arguments(size, steps, kernels, export, fused)
    except KgenUsageError as exc:
        fail_usage(str(exc))
    for flag, path in (("--plot", plot), ("--profile", profile)):
        if path is not None and not path.parent.is_dir():
            fail_usage(f"{flag} {path}: no folder {path.parent} to write it in")
    try:
        where = resolve_device(device)  # type: ignore[arg-type]
    except KgenUsageError as exc:
        fail_usage(str(exc))
    if not where.is_gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    from kgen.cli.run import LiveProgress

    try:
        with LiveProgress() as progress:
            result, found = _check(kernels, export, fused, steps, size, "cuda" if where.is_gpu else "cpu", seed,
                                   profile is not None, progress)
    except KgenUsageError as exc:
        fail_usage(str(exc))
    except KeyboardInterrupt:
        err_console.print("interrupted: the check stopped before its verdict; nothing was written", highlight=False)
        raise typer.Exit(INTERRUPTED) from None
    from kgen.train_check.report import text_report

    print_text(result.model_dump_json(indent=2) if as_json else text_report(result))
    if plot is not None:
        from kgen.train_check.report import curves_picture

        plot.write_text(curves_picture(result))
        typer.echo(f"loss curves: {plot}", err=as_json)  # --json keeps standard output one JSON document
    if profile is not None and found is not None:
        profile.write_text(found.markdown())
        typer.echo(f"profile of the compiled step: {profile} (stock {found.step_seconds['stock compiled']:.4f} s, "
                   f"kernels {found.step_seconds['kernels compiled']:.4f} s a step)", err=as_json)
    codes = {"agree": SUCCESS, "disagree": NOT_VERIFIED, "inconclusive": NO_MODEL_CODE_OR_INCONCLUSIVE}
    raise typer.Exit(codes[result.verdict])


def _check(kernels: Path | None, export: Path | None, fused: bool, steps: int, size: str, device: str, seed: int,
           profiled: bool, progress: Callable[[str], None]) -> tuple[TrainCheckResult, ProfileCheck | None]:
    """The check, and the profile of both compiled steps when asked: all the work, before anything
    is printed or written (an interrupt leaves no file behind)."""
    from kgen.train_check.check import model_size, run_check

    result = run_check(kernels=kernels, steps=steps, size=size, device=device, seed=seed, export=export,
                       fused=fused, progress=progress)
    if not profiled:
        return result, None
    from kgen.train_check.profile_check import profile_check

    # Inductor on a GPU; on a CPU the kernels run in Triton's interpreter, which only aot_eager can call
    found = profile_check(model_size(size)[1], device, kernels, export, fused,
                          backend="inductor" if device == "cuda" else "aot_eager", seed=seed, progress=progress)
    return result, found
