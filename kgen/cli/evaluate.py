"""`kgen eval` (one candidate against a problem's fp64 reference) and `kgen bench` (a suite of
problems, verified and then timed): the verifier from the command line.

Their flags come from the option table (``kgen.core.evaluation_flags``: ``EVAL_FLAGS``,
``BENCH_FLAGS``); each command receives them in ``**options``, named as ``EvalOptions``
names its fields.

`kgen bench` exits as `kgen solve` does (``SuiteSummary.exit_code``): the selected problems
decide, 0 when every one has a verified kernel, 1 when any has not (a missing candidate or an
unreadable problem file included), 2 for bad usage. With ``--candidates DIR`` every problem of
the suite is selected; over the shipped kernels (the default) a problem with no shipped kernel
is a row of the table ("missing (no shipped kernel)"), not run and left out of the selection,
said in one line: a fresh install's `kgen bench` does not fail for kernels kgen never shipped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from pydantic import ValidationError
from rich.markup import escape

from kgen.backends.registry import backend_info
from kgen.cli.display import print_eval_result
from kgen.cli.option_flags import with_command_flags
from kgen.cli.run import LiveProgress
from kgen.cli.suite_display import print_suite_result
from kgen.cli.terminal import console, err_console, fail_usage
from kgen.core.evaluation_flags import BENCH_FLAGS, EVAL_FLAGS
from kgen.core.option_table import option
from kgen.core.text import counted
from kgen.errors import KgenUsageError
from kgen.evals.bundle import bundle_for_files, write_bundle
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.session import ExecutorChoice, choose, executor_for
from kgen.evals.harness import EvalOptions, draw_seeds, evaluate
from kgen.evals.problem.format import ProblemInfo
from kgen.evals.problem.policies import parse_precision, parse_torch_ops
from kgen.evals.result import EvalResult
from kgen.evals.suites.suite import (
    SuiteRow,
    find_candidate,
    in_suite_order,
    is_other_module,
    load_failure,
    row_from_result,
    scan_suite,
    summarize,
    unreadable_row,
    unreadable_rows,
    write_suite_outputs,
)
from kgen.knowledge_base import SEED_KERNELS_DIR

#: the reason of a problem `kgen bench` has no shipped kernel for (a row, not run, not selected)
NO_SHIPPED_KERNEL = "no shipped kernel"
#: where a candidate may run, as the option table declares it
DEVICES: tuple[str, ...] = get_args(option("device").annotation)


def check_device(device: str) -> None:
    """`--device` arrives as text: one of ``DEVICES``, or bad usage (one line, exit 2)."""
    if device not in DEVICES:
        fail_usage(f"--device must be {', '.join(DEVICES[:-1])} or {DEVICES[-1]}, not '{device}'")


@with_command_flags(EVAL_FLAGS)
def eval_command(
    problem: Annotated[str, typer.Argument(help="Catalog name or alias, or a KernelBench-format problem file.")],
    candidate: Annotated[Path, typer.Argument(help="Python file defining ModelNew (KernelBench solution format).")],
    **options: Any,
) -> None:
    """Verify one candidate kernel against a problem's fp64 reference, in a sandbox.

    Exit code 0: passed; 1: rejected (the reason says why); 2: bad usage; 3: inconclusive
    (kgen could not judge it here, e.g. the CPU interpreter cannot run what the kernel uses).
    """

    json_output, bundle = options.pop("json_output"), options.pop("bundle")
    check_device(options["device"])
    # a flag not given (None) leaves the field at its default, the table's
    evaluation = EvalOptions(**{name: value for name, value in options.items() if value is not None})
    if bundle is not None and evaluation.seeds is None:  # a bundle names every seed, even a rejection's
        evaluation = evaluation.model_copy(update={"seeds": draw_seeds(evaluation.n_seeds)})
    try:
        if json_output:
            result = evaluate(problem, candidate, evaluation)
        else:
            # on a terminal, a clock under the progress lines (stderr) while the child verifies
            with LiveProgress() as progress:
                result = evaluate(problem, candidate, evaluation, progress=progress)
    except KgenUsageError as exc:
        if json_output:
            print(_usage_json(exc.message))
        fail_usage(exc.message)
    if json_output:
        print(result.model_dump_json(indent=2))
    else:
        print_eval_result(result, console)
    if bundle is not None:
        written = write_bundle(bundle_for_files(result, evaluation, candidate, Path(result.problem_path)), bundle)
        err_console.print(f"wrote the evidence bundle {escape(str(written))}", highlight=False, soft_wrap=True)
    raise typer.Exit(result.exit_code)


@with_command_flags(BENCH_FLAGS)
def bench_command(
    suite: Annotated[
        Path | None,
        typer.Argument(help="A folder of problem files (a KernelBench level folder works). Default: the catalog."),
    ] = None,
    **options: Any,
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

    from kgen.backends.device import resolve_device

    out: Path = options["out"]
    precision, torch_ops, no_verify = options["precision"], options["torch_ops"], options["no_verify"]
    check_device(options["device"])
    if suite is not None and not suite.is_dir():
        fail_usage(f"suite folder not found: {suite}")
    try:
        info = backend_info(options["backend"])
    except KgenUsageError as exc:
        fail_usage(exc.message)
    shipped = options["candidates"] is None  # the shipped kernels: a problem without one is not selected
    candidates = options["candidates"] or SEED_KERNELS_DIR / info.name
    if not candidates.is_dir():
        fail_usage(f"candidates folder not found: {candidates}")
    try:
        resolved = resolve_device(options["device"])
        infos, skipped = scan_suite(suite)
    except KgenUsageError as exc:  # no GPU for --device cuda, a single problem file kgen cannot read
        fail_usage(exc.message)
    except FileNotFoundError as exc:
        fail_usage(str(exc))
    unreadable = unreadable_rows(skipped)
    if not infos:
        why = "; ".join(f"{row.problem}: {row.reason}" for row in unreadable)
        fail_usage(f"no problem files in {suite}" + (f" that kgen can read ({why})" if why else ""))
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
    evaluation = EvalOptions(
        device=resolved, bench=resolved.is_gpu and not options["self_test"],
        small_sizes=options["small_sizes"] or not resolved.is_gpu, timeout_s=options["timeout_s"],
        n_seeds=1 if no_verify else 3, distributions=not no_verify, precision=precision,
        torch_ops=torch_ops, prestart=True, backend=info.name,
        # the problems' baselines and the device's figures, measured once for this run's output
        baseline_cache_dir=str(out / "baselines"),
    )
    command = "kgen bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    try:
        executor_choice = ExecutorChoice.of(options)
    except ValidationError as exc:  # --executor bogus: said as every other option's bad value is
        name = str(exc.errors()[0]["loc"][0])
        fail_usage(f"{name}: expected {option(name).expected}, got {options[name]!r}")
    choose(executor_choice, say=lambda line: err_console.print(escape(line), highlight=False))
    if options["self_test"]:
        from kgen.evals.suites.self_test import run_self_test

        try:
            results = run_self_test(infos, evaluation, out, command.strip(),
                                    progress=lambda line: console.print(escape(line), highlight=False))
        except KgenUsageError as exc:  # the executor's: an unreachable cluster, no free GPU
            fail_usage(exc.message)
        passed = sum(r.outcome == "passed" for r in results)
        console.print(f"self-test: {passed} of {len(results)} passed; wrote {out / 'self_test.md'}", highlight=False)
        raise typer.Exit(0 if passed == len(results) else 1)
    for file, why in skipped:
        if is_other_module(file):
            err_console.print(f"skipped {escape(file.name)}: {escape(why)}", highlight=False, soft_wrap=True)
    for row in unreadable:
        err_console.print(f"{escape(row.reason)} (counted as not correct)", highlight=False, soft_wrap=True)
    rows = list(unreadable)
    unshipped: list[str] = []
    todo: list[tuple[ProblemInfo, Path]] = []
    for info in infos:
        failure = load_failure(info)
        if failure is not None:
            err_console.print(f"{escape(failure)} (counted as not correct)", highlight=False, soft_wrap=True)
            rows.append(unreadable_row(info.name, failure))
        elif (candidate := find_candidate(info, candidates)) is not None:
            todo.append((info, candidate))
        elif shipped:
            unshipped.append(info.name)
            rows.append(SuiteRow(problem=info.name, verdict="missing", reason=NO_SHIPPED_KERNEL))
        else:
            rows.append(_bench_row(None, info, None))

    def heard(index: int, result: EvalResult) -> None:
        info, candidate = todo[index]
        # the whole verdict beside the table: the evidence a kernel's row stands on
        (out / "results").mkdir(parents=True, exist_ok=True)
        (out / "results" / f"{info.name}.json").write_text(result.model_dump_json(indent=1) + "\n")
        rows.append(_bench_row(result, info, candidate))

    def started(index: int) -> None:
        info, candidate = todo[index]
        err_console.print(f"[dim]\\[{index + 1}/{len(todo)}] {escape(info.name)} ← {escape(candidate.name)} …[/]",
                          highlight=False)

    try:
        executor = executor_for(resolved, evaluation.targets)
        if len(executor.lanes()) > 1:
            err_console.print(f"{len(todo)} problems over {executor.describe()}", highlight=False)
        jobs = [EvalJob.of(info.path, candidate, evaluation) for info, candidate in todo]
        executor.evaluate(jobs, on_result=heard, on_start=started, together=False)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    rows = in_suite_order(rows)
    summary = summarize(rows, selected={row.problem for row in rows} - set(unshipped))
    paths = write_suite_outputs(rows, summary, out, command=command.strip(), date=datetime.date.today().isoformat())
    markdown = options["markdown"]
    print_suite_result(rows, summary, paths.get("md"), markdown=markdown)
    said = err_console if markdown else console  # with --markdown, stdout is the markdown table alone
    if unshipped:
        said.print(f"{counted(len(unshipped), 'problem')} without a shipped kernel: not run, left out of the exit "
                   "code (--candidates DIR benches your own)", highlight=False)
    said.print("wrote " + ", ".join(str(p) for p in paths.values()), highlight=False, soft_wrap=True)
    raise typer.Exit(summary.exit_code)


def _bench_row(result: EvalResult | None, info: ProblemInfo, candidate: Path | None) -> SuiteRow:
    """A problem's row, said on stderr as it is known (the progress; the table follows)."""
    row = row_from_result(result, info, candidate)
    err_console.print(escape(f"{info.name:34s} {row.verdict:9s} {row.reason if row.verdict != 'passed' else ''}"),
                      highlight=False, soft_wrap=True)
    return row


def _usage_json(message: str) -> str:
    import json

    return json.dumps({"verdict": "bad_usage", "reason": message})
