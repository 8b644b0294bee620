"""`kgen kb ...`: look into, share and maintain the knowledge base.

Every command takes ``--kb`` (a directory, or the URL of a Chroma server for a
team); without it the store is the configured one, else ``$KGEN_HOME/kb``. A
store is seeded with the shipped kernels and guidance on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kgen.backends.registry import known_backends
from kgen.cli.terminal import console, err_console, fail_usage, new_table, print_code, print_table
from kgen.core.settings import load_settings
from kgen.core.text import counted
from kgen.core.units import error_figure
from kgen.errors import KgenUsageError

if TYPE_CHECKING:
    from kgen.knowledge_base.schema import KernelEntry

kb_app = typer.Typer(
    help=(
        "The knowledge base of verified kernels and optimisation guidance (Chroma).\n\n"
        "Local by default ($KGEN_HOME/kb); --kb http://host:8000 shares a Chroma server."
    ),
    no_args_is_help=True,
)

KbOption = Annotated[
    str | None,
    typer.Option(
        "--kb", envvar="KGEN_KB", metavar="DIR|URL",
        help="Store directory, or a Chroma server URL (http://host:8000). Default: the configured "
        "store, else $KGEN_HOME/kb.",
    ),
]


def _open(kb: str | None, *, seed: bool = True):
    """The store at the flag's location, else the configured one, with the configured embedding."""
    from kgen.knowledge_base.seeding import open_knowledge_base
    from kgen.knowledge_base.store import KnowledgeBase, KnowledgeBaseError

    try:
        settings = load_settings({"kb": kb})
        location, embedding = settings.kb_location, settings.kb_embedding
        if seed:
            return open_knowledge_base(location, embedding=embedding)
        return KnowledgeBase.open(location, embedding=embedding)
    except (KnowledgeBaseError, KgenUsageError) as exc:
        fail_usage(exc.message)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


#: `kgen kb list`'s columns, all whole: ids, names and numbers are never split
_LIST_COLUMNS = ("id", "problem", "backend", "target", "dtype", "role", "ms")

_SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


@kb_app.command("init")
def kb_init(kb: KbOption = None) -> None:
    """Create the store and load the shipped kernels and guidance (safe to run again)."""
    from kgen.knowledge_base.seeding import seed_knowledge_base
    from kgen.knowledge_base.store import KnowledgeBaseError

    store = _open(kb, seed=False)
    try:
        report = seed_knowledge_base(store)
    except KnowledgeBaseError as exc:  # a seed that does not match its evidence included
        fail_usage(exc.message)
    console.print(
        f"knowledge base at {store.location} ({store.mode}): "
        f"{counted(len(report.added), 'seed kernel')} added, {len(report.unchanged)} already present, "
        f"{counted(report.guidance, 'guidance note')}; {counted(store.kernel_count(), 'kernel')} in all",
        highlight=False, soft_wrap=True,
    )


@kb_app.command("list")
def kb_list(
    kb: KbOption = None,
    problem: Annotated[str | None, typer.Option(help="Only this problem.")] = None,
    backend: Annotated[str | None, typer.Option(help=f"Only this backend ({', '.join(known_backends())}).")] = None,
    target: Annotated[str | None, typer.Option(help="Only this target (h100, mi300x, ...).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many rows.")] = 50,
) -> None:
    """List stored kernels, fastest first within each problem (and backend)."""
    from kgen.knowledge_base.store import where_equal

    store = _open(kb)
    entries = store.kernels(where_equal(problem=problem, backend=backend, target=target))
    # a slot is (problem, backend, target, dtype): each backend has its own best kernel
    entries.sort(key=lambda e: (e.problem, e.backend, e.timing.time_ms is None, e.timing.time_ms or 0.0))
    from kgen.knowledge_base.schema import short_id

    table = new_table(f"knowledge base: {store.location}", *_LIST_COLUMNS, whole=_LIST_COLUMNS)
    for e in entries[:limit]:
        table.add_row(short_id(e.id), e.problem, e.backend, e.target, _SHORT_DTYPES.get(e.dtype, e.dtype),
                      "best" if e.role == "best" else "stone", _ms(e.timing.time_ms))
    print_table(table)
    shown = min(limit, len(entries))
    console.print(f"{shown} of {counted(len(entries), 'kernel')}. Details: kgen kb show ID (its start is enough)",
                  highlight=False, soft_wrap=True)


def _one(store, kernel_id: str):
    matches = store.find_kernel_by_prefix(kernel_id)
    if not matches:
        fail_usage(f"no kernel with id {kernel_id!r} in {store.location}; see `kgen kb list`")
    if len(matches) > 1:
        fail_usage(f"id {kernel_id!r} is ambiguous: {', '.join(m.id for m in matches[:5])}")
    return matches[0]


@kb_app.command("show")
def kb_show(
    kernel_id: Annotated[str, typer.Argument(metavar="ID", help="A kernel id (or its unambiguous start).")],
    kb: KbOption = None,
    source: Annotated[bool, typer.Option("--source/--no-source", help="Print the kernel's source.")] = True,
    json_output: Annotated[bool, typer.Option("--json", help="Print the whole entry as JSON.")] = False,
    bundle_output: Annotated[bool, typer.Option(
        "--bundle", help="Print the kernel's evidence bundle (bundle.json) for `kgen verify`.")] = False,
) -> None:
    """One kernel: its slot, verification evidence, timings, provenance, evidence bundle and source."""
    entry = _one(_open(kb), kernel_id)
    if bundle_output:
        if entry.bundle is None:
            why = ("; a seed stored before seeds shipped their bundles: `kgen kb init` adds them"
                   if entry.provenance.model == "seed" else "")
            fail_usage(f"kernel {entry.id} has no evidence bundle stored with it{why}")
        print(entry.bundle.model_dump_json(indent=1))
        return
    if json_output:
        print(entry.model_dump_json(indent=1))
        return
    ev, t, p = entry.evidence, entry.timing, entry.provenance
    lines = [
        f"[bold]{entry.id}[/]  {entry.summary_line()}",
        f"role: {entry.role}   code hash: {entry.code_hash[:16]}",
        f"spec: {entry.spec_text}",
        f"verified on {ev.device}: {ev.trials} trials, seeds {ev.seeds}, "
        f"{counted(len(ev.shapes), 'shape set')}, distributions {', '.join(ev.distributions) or '-'}",
        f"checks passed: {', '.join(ev.checks_passed)}; training check: {ev.train_check}; "
        f"worst rel-L2 error {error_figure(ev.max_rel_l2_error)}",
        f"timing: {_ms(t.time_ms)} ms (eager {_ms(t.eager_ms)}, torch.compile {_ms(t.compile_ms)}), "
        f"{_ratio(t.speedup_vs_eager)} vs eager, {_ratio(t.speedup_vs_compile)} vs compile, "
        f"%SOL {'-' if t.pct_of_sol is None else f'{t.pct_of_sol:.0f}'} on {t.device_name or '-'}",
        f"by {p.model}; run {p.run_id or '-'}; generation {p.generation if p.generation is not None else '-'}; "
        f"parents {', '.join(p.parent_ids) or '-'}; created {p.created}",
    ]
    lines.append(_bundle_line(entry))
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    if source:
        print_code(entry.source)


def _bundle_line(entry: KernelEntry) -> str:
    """Whether the entry keeps its evidence bundle, and how a reader re-checks it."""
    bundle = entry.bundle
    if bundle is None:
        return "evidence bundle: none stored with this kernel"
    return (f"evidence bundle: {bundle.result.outcome} on {bundle.device_name}, kgen {bundle.kgen_version}, "
            f"seeds {bundle.settings.seeds}, sha256 {bundle.sha256[:16]}; re-check it: "
            f"kgen kb show {entry.id} --bundle > bundle.json && kgen verify bundle.json")


@kb_app.command("search")
def kb_search(
    text: Annotated[str, typer.Argument(help="What you are looking for, e.g. 'rms norm backward h100'.")],
    kb: KbOption = None,
    backend: Annotated[str | None, typer.Option(help="Only this backend.")] = None,
    target: Annotated[str | None, typer.Option(help="Rank kernels for this target (and its family) first.")] = None,
    n: Annotated[int, typer.Option("-n", min=1, help="How many results.")] = 5,
    verbose: Annotated[bool, typer.Option("--why", help="Say why each result ranks where it does.")] = False,
) -> None:
    """Find kernels by meaning: names, operations, targets and dtypes all count."""
    from kgen.knowledge_base.retrieval import search_kernels

    if not text.strip():
        fail_usage("search text is empty")
    if target:
        from kgen.backends.targets import resolve_target

        try:
            target = resolve_target(target).name
        except KgenUsageError as exc:
            fail_usage(exc.message)
    store = _open(kb)
    from kgen.knowledge_base.schema import short_id

    results = search_kernels(store, text, backend=backend, target=target, n=n)
    table = new_table(f"'{text}'", "#", "id", "problem", "backend", "target", "ms", "vs compile",
                      whole=("#", "id", "problem", "backend", "target", "ms"))
    for rank, r in enumerate(results, start=1):
        e = r.entry
        table.add_row(str(rank), short_id(e.id), e.problem, e.backend, e.target, _ms(e.timing.time_ms),
                      _ratio(e.timing.speedup_vs_compile))
    print_table(table)
    if results and verbose:
        for rank, r in enumerate(results, start=1):
            console.print(f"{rank}. {r.entry.id}: {r.why}", highlight=False, soft_wrap=True)
    if not results:
        console.print("no kernels stored yet: run `kgen kb init`", highlight=False, soft_wrap=True)


@kb_app.command("stats")
def kb_stats(
    kb: KbOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """How much the store holds, by backend, target and role."""
    stats = _open(kb).stats()
    if json_output:
        print(stats.model_dump_json(indent=1))
        return
    console.print(f"knowledge base: {stats.location} ({stats.mode}, embedding {stats.embedding})",
                  highlight=False, soft_wrap=True)
    console.print(f"kernels: {stats.kernels} over {counted(stats.problems, 'problem')}, {stats.timed} timed on a GPU; "
                  f"guidance notes: {stats.guidance}", highlight=False, soft_wrap=True)
    for label, counts in (("by backend", stats.by_backend), ("by target", stats.by_target),
                          ("by role", stats.by_role)):
        if counts:
            console.print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                          highlight=False, soft_wrap=True)


@kb_app.command("export")
def kb_export(
    file: Annotated[Path, typer.Argument(help="Where to write the JSON lines (.jsonl).")],
    kb: KbOption = None,
) -> None:
    """Write every kernel and guidance note, with all their fields, as JSON lines."""
    from kgen.knowledge_base.transfer import export_knowledge_base

    try:
        report = export_knowledge_base(_open(kb), file)
    except OSError as exc:
        fail_usage(f"cannot write {file}: {exc.strerror or exc}")
    console.print(f"exported {counted(report.kernels, 'kernel')} and {counted(report.guidance, 'guidance note')} to "
                  f"{report.path}", highlight=False, soft_wrap=True)


@kb_app.command("import")
def kb_import(
    file: Annotated[Path, typer.Argument(help="A file written by `kgen kb export`.")],
    kb: KbOption = None,
    verify: Annotated[bool, typer.Option(
        "--verify/--no-verify",
        help="Re-verify every kernel in the sandbox before storing it (default). --no-verify only "
        "for exports of a store you control.",
    )] = True,
    device: Annotated[str, typer.Option(help="Where to re-verify: auto, cpu or cuda.")] = "auto",
) -> None:
    """Add kernels and notes from an export; bad rows are reported and skipped.

    Exit code 0 when every row was imported, 1 when some were skipped, 2 when
    the file cannot be used at all.
    """
    from kgen.knowledge_base.store import KnowledgeBaseError
    from kgen.knowledge_base.transfer import import_knowledge_base

    if device not in ("auto", "cpu", "cuda"):
        fail_usage(f"--device must be auto, cpu or cuda, not '{device}'")
    if not file.expanduser().is_file():
        fail_usage(f"import file not found: {file}")
    store = _open(kb, seed=False)
    try:
        report = import_knowledge_base(
            store, file, verify=verify, device=device,  # type: ignore[arg-type]
            progress=lambda line: err_console.print(f"[dim]{line} …[/]", highlight=False, soft_wrap=True),
        )
    except (KnowledgeBaseError, UnicodeDecodeError) as exc:
        fail_usage(f"cannot import {file}: {exc}")
    for bad in report.bad_rows:
        err_console.print(f"skipped line {bad.line}: {bad.reason}", highlight=False, soft_wrap=True)
    verified = f" ({report.verified} re-verified)" if verify else " (not re-verified: --no-verify)"
    console.print(f"imported {counted(report.kernels, 'kernel')}{verified} and "
                  f"{counted(report.guidance, 'guidance note')}; {counted(len(report.bad_rows), 'bad row')} skipped",
                  highlight=False, soft_wrap=True)
    if report.bad_rows:
        raise typer.Exit(1)


@kb_app.command("prune")
def kb_prune(
    kb: KbOption = None,
    keep: Annotated[int, typer.Option(min=0, help="Stepping stones to keep per slot (newest first).")] = 5,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go, remove nothing.")] = False,
) -> None:
    """Keep each (problem, backend, target, dtype)'s best kernel and its newest stepping stones."""
    from kgen.knowledge_base.write_back import prune

    report = prune(_open(kb), keep_stepping_stones=keep, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    console.print(f"{counted(report.slots, 'slot')}: {verb} {counted(len(report.removed), 'kernel')}, kept "
                  f"{report.kept}", highlight=False, soft_wrap=True)
    for kernel_id in report.removed:
        console.print(f"  {kernel_id}", highlight=False, soft_wrap=True)
