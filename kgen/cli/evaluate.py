"""`kgen eval` (one candidate against a problem's fp64 reference) and `kgen bench` (a suite of
problems, verified and then timed): the verifier from the command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from kgen.backends.registry import DEFAULT_BACKEND, backend_info, known_backends
from kgen.cli.terminal import console, err_console, fail_usage
from kgen.errors import KgenUsageError

#: the registered backends, for option help
BACKEND_NAMES = ", ".join(known_backends())

PRECISION_HELP = (
    "Precision policy: ieee (fp32 problems are IEEE fp32) or tf32 (TF32 matrix products admitted, "
    "with their own tolerance). Default: the problem's KGEN_PRECISION, else ieee."
)
TORCH_OPS_HELP = (
    "Torch ops policy: strict (every compute op in the candidate's kernels) or library (vendor "
    "matmul/conv/attention calls allowed, the rest in kernels). Default: the problem's KGEN_TORCH_OPS, "
    "else library for plain KernelBench files and strict for kgen's catalog."
)


def eval_command(
    problem: Annotated[str, typer.Argument(help="Catalog name or alias, or a KernelBench-format problem file.")],
    candidate: Annotated[Path, typer.Argument(help="Python file defining ModelNew (KernelBench solution format).")],
    device: Annotated[str, typer.Option(help="Where to run: auto (GPU if present), cpu (Triton interpreter), cuda.")] = "auto",
    target: Annotated[
        list[str] | None,
        typer.Option("--target", "-t", help="Also cross-compile for this hardware target (repeatable): h100, mi300x, ..."),
    ] = None,
    seed: Annotated[list[int] | None, typer.Option(help="Fixed seed (repeatable), to reproduce a failure. Default: fresh seeds.")] = None,
    seeds: Annotated[int, typer.Option(help="How many fresh seeds to try.", min=1)] = 3,
    timeout: Annotated[float, typer.Option(help="Hard time limit for the candidate's process, seconds.", min=1)] = 300.0,
    backend: Annotated[str, typer.Option(help=f"Kernel backend of the candidate ({BACKEND_NAMES}).")] = DEFAULT_BACKEND,
    train_check: Annotated[
        bool, typer.Option("--train-check", help="Backward problems: also train a small model with the candidate's gradient.")
    ] = False,
    distributions: Annotated[
        bool,
        typer.Option(help="Run the input distributions beyond 'normal' (magnitudes, precision probes, skewed ids)."),
    ] = True,
    bench: Annotated[
        bool, typer.Option("--bench", help="After verification, time it against eager and torch.compile (GPU).")
    ] = False,
    small: Annotated[
        bool, typer.Option("--small", help="Use the problem's small size set even on a GPU (a quick check).")
    ] = False,
    precision: Annotated[str | None, typer.Option(help=PRECISION_HELP)] = None,
    torch_ops: Annotated[str | None, typer.Option("--torch-ops", help=TORCH_OPS_HELP)] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the EvalResult as JSON instead of a table.")] = False,
) -> None:
    """Verify one candidate kernel against a problem's fp64 reference, in a sandbox.

    Exit code 0: passed; 1: rejected (the reason says why); 2: bad usage; 3: inconclusive
    (kgen could not judge it here, e.g. the CPU interpreter cannot run what the kernel uses).
    """
    from kgen.cli.display import print_eval_result
    from kgen.evals.harness import EvalOptions, evaluate

    if device not in ("auto", "cpu", "cuda"):
        fail_usage(f"--device must be auto, cpu or cuda, not '{device}'")
    options = EvalOptions(
        device=device, backend=backend, targets=target or [], seeds=seed or None,
        n_seeds=seeds, timeout_s=timeout, train_check=train_check, distributions=distributions,
        small_sizes=small, bench=bench, precision=precision, torch_ops=torch_ops,
    )
    try:
        progress = None if json_output else (
            lambda line: err_console.print(f"[dim]{escape(line)} …[/]", highlight=False, soft_wrap=True))
        result = evaluate(problem, candidate, options, progress=progress)
    except KgenUsageError as exc:
        if json_output:
            print(_usage_json(exc.message))
        fail_usage(exc.message)
    if json_output:
        print(result.model_dump_json(indent=2))
    else:
        print_eval_result(result, console)
    raise typer.Exit(result.exit_code)


def bench_command(
    suite: Annotated[
        Path | None,
        typer.Argument(help="A folder of problem files (a KernelBench level folder works). Default: the catalog."),
    ] = None,
    candidates: Annotated[
        Path | None,
        typer.Option(help="Folder of candidates named after their problems. Default: the shipped seed kernels."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Where suite.json, suite.csv, suite.md and suite.svg go.")] = Path("kgen-bench"),
    device: Annotated[str, typer.Option(help="auto (GPU if present), cpu (verification only), cuda.")] = "auto",
    no_verify: Annotated[
        bool,
        typer.Option("--no-verify", help="Quick check only (one seed, normal inputs) before timing; on a CPU: nothing to run."),
    ] = False,
    small: Annotated[bool, typer.Option("--small", help="Verify at the small size sets (timing stays at the default sizes).")] = False,
    timeout: Annotated[float, typer.Option(help="Time limit per candidate, seconds.", min=1)] = 600.0,
    precision: Annotated[str | None, typer.Option(help=PRECISION_HELP)] = None,
    torch_ops: Annotated[str | None, typer.Option("--torch-ops", help=TORCH_OPS_HELP)] = None,
    backend: Annotated[
        str, typer.Option(help=f"Kernel backend of the candidates ({BACKEND_NAMES}); the default candidates "
                          "are its shipped seed kernels.")
    ] = DEFAULT_BACKEND,
    self_test: Annotated[
        bool,
        typer.Option("--self-test", help="Evaluate each problem's own reference as the candidate (kernel rules off, "
                     "every correctness check on): proves kgen can judge every problem; writes self_test.md. "
                     "Run again into the same --out, it skips the problems already judged there."),
    ] = False,
) -> None:
    """Verify and time a suite of problems; report fast_p, geomean speedups and %SOL.

    Every candidate goes through the verifier first; only verified kernels are timed
    (on a GPU, against eager PyTorch and torch.compile, the same way, in the same process).

    Examples:

      kgen bench KernelBench/level1 --candidates my_solutions/level1

      kgen bench --self-test KernelBench/level2 --out selftest-l2
    """
    import datetime
    import shlex

    from kgen.evals.harness import EvalOptions, evaluate, resolve_device
    from kgen.evals.problem.policies import parse_precision, parse_torch_ops
    from kgen.evals.suites.suite import (
        discover_suite,
        find_candidate,
        row_from_result,
        summarize,
        write_suite_outputs,
    )
    from kgen.knowledge_base import SEED_KERNELS_DIR

    if device not in ("auto", "cpu", "cuda"):
        fail_usage(f"--device must be auto, cpu or cuda, not '{device}'")
    if suite is not None and not suite.is_dir():
        fail_usage(f"suite folder not found: {suite}")
    try:
        info = backend_info(backend)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    candidates = candidates or SEED_KERNELS_DIR / info.name
    if not candidates.is_dir():
        fail_usage(f"candidates folder not found: {candidates}")
    try:
        resolved = resolve_device(device)
        infos = discover_suite(suite)
    except KgenUsageError as exc:  # no GPU for --device cuda, a problem file kgen cannot read
        fail_usage(exc.message)
    except FileNotFoundError as exc:
        fail_usage(str(exc))
    if not infos:
        fail_usage(f"no problem files in {suite}")
    try:
        for value, parse in ((precision, parse_precision), (torch_ops, parse_torch_ops)):
            if value is not None:
                parse(value)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    if resolved != "cuda":
        how = f"{info.label} interpreter" if info.runs_on_cpu else f"{info.label} kernels compiled, not run"
        err_console.print(f"timings need a GPU: running verification only ({how})", highlight=False)
        if no_verify:
            fail_usage("--no-verify on a machine without a GPU leaves nothing to run")
    options = EvalOptions(
        device=resolved, bench=resolved == "cuda" and not self_test, small_sizes=small or resolved == "cpu",
        timeout_s=timeout, n_seeds=1 if no_verify else 3, distributions=not no_verify, precision=precision,
        torch_ops=torch_ops, prestart=True, backend=info.name,
        # the problems' baselines and the device's figures, measured once for this run's output
        baseline_cache_dir=str(out / "baselines"),
    )
    command = "kgen bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    if self_test:
        from kgen.evals.suites.self_test import run_self_test

        results = run_self_test(infos, options, out, command.strip(),
                                progress=lambda line: console.print(escape(line), highlight=False))
        passed = sum(r.outcome == "passed" for r in results)
        console.print(f"self-test: {passed} of {len(results)} passed; wrote {out / 'self_test.md'}", highlight=False)
        raise typer.Exit(0 if passed == len(results) else 1)
    rows = []
    for number, info in enumerate(infos, 1):
        candidate = find_candidate(info, candidates)
        result = None
        if candidate is not None:
            err_console.print(f"[dim]\\[{number}/{len(infos)}] {escape(info.name)} ← {escape(candidate.name)} …[/]",
                              highlight=False)
            result = evaluate(info.path, candidate, options)
        row = row_from_result(result, info, candidate)
        rows.append(row)
        console.print(escape(f"{info.name:34s} {row.verdict:9s} {row.reason[:90] if row.verdict != 'passed' else ''}"),
                      highlight=False)
    summary = summarize(rows)
    paths = write_suite_outputs(rows, summary, out, command=command.strip(), date=datetime.date.today().isoformat())
    console.print(escape((out / "suite.md").read_text()) if (out / "suite.md").exists() else "", highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in paths.values()), highlight=False)


def _usage_json(message: str) -> str:
    import json

    return json.dumps({"verdict": "bad_usage", "reason": message})
