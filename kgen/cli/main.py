"""The `kgen` command line.

Exit codes: 0 success / candidate passed, 1 candidate rejected, 2 bad usage
(unknown problem or target, missing file, invalid option). Errors are one
line on stderr, never a traceback. Heavy modules are imported inside the
commands so `kgen --help` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from kgen.backends.registry import DEFAULT_BACKEND, backend_info, known_backends
from kgen.cli.kb import kb_app
from kgen.cli.report import report_command
from kgen.cli.run import resume_command, run_command, runs_command
from kgen.cli.solve import solve_command
from kgen.cli.terminal import console, err_console, fail_usage, print_error
from kgen.errors import KgenUsageError

#: the registered backends, for option help
BACKEND_NAMES = ", ".join(known_backends())

app = typer.Typer(
    name="kgen",
    help=(
        "Generate GPU kernels whose 'correct' is verified and whose 'fast' is measured.\n\n"
        "kgen \"Triton RMSNorm backward for H100\" turns the request into a spec, starts from the "
        "knowledge base's best kernel, asks the configured models for variants (or, offline, tunes "
        "the known kernel's parameters), verifies each against an fp64 reference in a sandbox, "
        "times it on the GPU, and remembers the winner. `kgen doctor` says what it will do here."
    ),
    epilog=(
        "Examples:\n\n"
        "  kgen \"Triton RMSNorm backward for H100\"\n\n"
        "  kgen \"softmax for H100 and MI300X\" -m openai:gpt-5 -m anthropic:claude-sonnet-4-5 --budget 20\n\n"
        "  kgen resume 20261122-081500-3fa9c1\n\n"
        "  kgen eval rmsnorm_backward my_kernel.py --target h100 --target mi300x\n\n"
        "  kgen kb search 'rms norm backward h100'\n\n"
        "Exit codes: 0 success (kernel verified / candidate passed), 1 no verified kernel / "
        "candidate rejected, 2 bad usage."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
problems_app = typer.Typer(help="The problem catalog (KernelBench format).", no_args_is_help=True)
app.add_typer(problems_app, name="problems")
app.add_typer(kb_app, name="kb")
app.command("run")(run_command)
app.command("resume")(resume_command)
app.command("runs")(runs_command)
app.command("report")(report_command)
app.command("solve")(solve_command)


@problems_app.command("list")
def problems_list() -> None:
    """List the catalog's problems with their default sizes."""
    from kgen.evals.problem.catalog import catalog
    from kgen.evals.problem.format import sizes_text

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

    from kgen.evals.problem.catalog import resolve_problem

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
            plans = {device: verification_size_plan(info, device) for device in ("cpu", "cuda")}
        except KgenUsageError as exc:
            fail_usage(exc.message)
        console.print(size_table(info, plans))
    if source:
        console.print(Syntax(info.path.read_text(), "python", line_numbers=False))


def _sizes(sizes: dict[str, int]) -> str:
    from kgen.evals.problem.format import sizes_text

    return sizes_text(sizes) or "-"


@app.command("targets")
def targets() -> None:
    """List the hardware targets kgen knows, with their ceilings and compiler targets."""
    from rich import box

    from kgen.backends.targets import all_targets

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


PRECISION_HELP = (
    "Precision policy: ieee (fp32 problems are IEEE fp32) or tf32 (TF32 matrix products admitted, "
    "with their own tolerance). Default: the problem's KGEN_PRECISION, else ieee."
)
TORCH_OPS_HELP = (
    "Torch ops policy: strict (every compute op in the candidate's kernels) or library (vendor "
    "matmul/conv/attention calls allowed, the rest in kernels). Default: the problem's KGEN_TORCH_OPS, "
    "else library for plain KernelBench files and strict for kgen's catalog."
)


@app.command("eval")
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


@app.command("bench")
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


@app.command("doctor")
def doctor_command(
    json_output: Annotated[bool, typer.Option("--json", help="Print the diagnosis as JSON.")] = False,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Contact no model endpoint: check keys and configuration only.")] = False,
) -> None:
    """Check this machine and configuration: GPU, packages, API keys, knowledge base, and what a run will do.

    Each configured model's endpoint is asked for its models list (or one token) within 5 s, all at once: reachable or not, key accepted or rejected, model served, latency. --offline skips that.

    Exit status: 0; 1 when a configured model cannot be used (malformed, no key, unreachable, key rejected, model not served); 2 for a broken configuration.
    """
    from kgen.cli.doctor import collect_diagnosis, exit_status, render_diagnosis
    from kgen.core.settings import load_settings

    try:
        settings = load_settings()
    except KgenUsageError as exc:
        fail_usage(exc.message)
    diagnosis = collect_diagnosis(settings, offline=offline)
    if json_output:
        print(diagnosis.model_dump_json(indent=2))
    else:
        render_diagnosis(diagnosis, console)
    raise typer.Exit(exit_status(diagnosis))


@app.command("config")
def config_command(
    default: Annotated[
        bool, typer.Option("--default", help="Print the default config file, every option documented.")
    ] = False,
    path: Annotated[bool, typer.Option("--path", help="Print the config file's path.")] = False,
) -> None:
    """Show the effective settings and where each value came from (default, config file, env, flag).

    Start a config file with: kgen config --default > "$(kgen config --path)"
    """
    from rich import box
    from rich.text import Text

    from kgen.core.settings import (
        config_file_path,
        default_config_text,
        describe_settings,
        load_settings,
    )

    if default and path:
        fail_usage("--default and --path are alternatives; give one")
    if default:
        sys.stdout.write(default_config_text())
        return
    if path:
        print(config_file_path())
        return
    try:
        settings = load_settings()
    except KgenUsageError as exc:
        fail_usage(exc.message)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("option", "value", "source"):
        table.add_column(column, overflow="fold")
    file = config_file_path()
    for name, value, source in describe_settings(settings):
        source = source.removesuffix(f" {file}")  # the path is printed once, below
        table.add_row(Text(name), Text(value), Text(source, style="dim" if source == "default" else ""))
    console.print(table)
    console.print(
        Text(f"config file: {file}" + ("" if file.is_file() else " (not present)") + "\n"
             "Set an option there, as KGEN_<OPTION> in the environment, or with a flag. "
             "Every option, documented: kgen config --default")
    )


def _usage_json(message: str) -> str:
    import json

    return json.dumps({"verdict": "bad_usage", "reason": message})


def _with_default_command(argv: list[str]) -> list[str]:
    """`kgen "Triton RMSNorm backward for H100"` means `kgen run "..."`: a first argument that
    is neither an option nor a command is a request."""
    import typer.main

    if not argv or argv[0].startswith("-"):
        return argv
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    return argv if argv[0] in commands else ["run", *argv]


def main() -> None:
    from kgen.evals.sandbox.lifecycle import install_signal_handlers
    from kgen.knowledge_base.errors import KnowledgeBaseError

    install_signal_handlers()  # SIGTERM, SIGINT, SIGHUP end the verifier children first

    try:
        app(args=_with_default_command(sys.argv[1:]), prog_name="kgen")
    except KnowledgeBaseError as exc:
        # a store that fails mid-command (server gone, lock held): one line, exit 2
        print_error(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted: `kgen runs` lists unfinished runs; `kgen resume RUN` continues one")
        sys.exit(130)


if __name__ == "__main__":
    main()
