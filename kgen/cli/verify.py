"""`kgen verify BUNDLE`: re-run a recorded verification here and say whether it agrees.

The bundle (``evals/bundle.py``) is checked against its digests first: an edited one is
refused in one line (exit 2) naming what does not match. Otherwise its kernel and problem
are written to a scratch folder and verified with the bundle's seeds, policies and checks on
this machine's device; the verdict is compared by ``evals/bundle.py``'s ``agreement``. Exit
0 agrees, 1 disagrees, 2 bad input, 3 inconclusive (the re-run reached no verdict). Timing
is not re-judged: only correctness, on whatever device the re-run has.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from kgen.backends.device import Device, resolve_device
from kgen.cli.evaluate import check_device
from kgen.cli.terminal import console, err_console, fail_usage
from kgen.core.text import counted
from kgen.errors import KgenUsageError
from kgen.evals.bundle import EvidenceBundle, agreement, read_bundle, seeds_of
from kgen.evals.harness import evaluate
from kgen.evals.problem.catalog import resolve_problem


def verify_command(
    bundle_path: Annotated[Path, typer.Argument(metavar="BUNDLE", help="A bundle.json, or a folder holding one.")],
    device: Annotated[str | None, typer.Option(
        "--device", help="Where to re-run: auto, cpu or cuda. Default: the bundle's device where this machine "
                         "has it, else the CPU.")] = None,
) -> None:
    """Re-run the verification an evidence bundle records and say whether it agrees.

    Exit code 0: agrees (same verdict; a rejection of the same class; errors within the
    recorded tolerance); 1: disagrees; 2: bad input (a bundle changed after it was written is
    refused); 3: inconclusive (the re-run could not judge here). Timing is not re-judged.
    """
    try:
        bundle = read_bundle(bundle_path)
    except KgenUsageError as exc:
        fail_usage(exc.message)
    where, note = _device(bundle, device)
    if note:
        err_console.print(escape(note), highlight=False, soft_wrap=True)
    local = _catalog_difference(bundle)
    with tempfile.TemporaryDirectory(prefix="kgen-verify-") as scratch:
        folder = Path(scratch)
        problem, kernel = folder / bundle.problem_file, folder / "kernel" / bundle.kernel_file
        kernel.parent.mkdir()
        problem.write_text(bundle.problem_source, encoding="utf-8")
        kernel.write_text(bundle.kernel_source, encoding="utf-8")
        try:
            again = evaluate(problem, kernel, bundle.settings.eval_options(where))
        except KgenUsageError as exc:  # a backend not installed here, a target unknown to this kgen
            fail_usage(exc.message)
    verdict = agreement(bundle, again)
    seeds = ", ".join(str(s) for s in seeds_of(again)) or "none reached"
    console.print(f"re-ran {escape(bundle.kernel_file)} on {escape(bundle.problem)} ({where}, seeds {seeds}, "
                  f"{counted(len(again.trials), 'trial')}): {again.outcome}", highlight=False, soft_wrap=True)
    console.print(f"{verdict.word.upper()}: {'; '.join(verdict.reasons)}", highlight=False, soft_wrap=True)
    for line in ([local] if local else []) + verdict.notes:
        console.print(f"  note: {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(verdict.exit_code)


def _device(bundle: EvidenceBundle, requested: str | None) -> tuple[Device, str]:
    """The device of the re-run and a note when it is not the bundle's."""
    if requested is not None:
        check_device(requested)
        try:
            return resolve_device(requested), ""  # type: ignore[arg-type]
        except KgenUsageError as exc:
            fail_usage(exc.message)
    if bundle.settings.device.is_gpu:
        try:
            return resolve_device("cuda"), ""
        except KgenUsageError:
            return Device.CPU, (f"the bundle was verified on {bundle.device_name}; no GPU here: "
                                "correctness is re-checked on the CPU, timing is not re-judged")
    return Device.CPU, ""


def _catalog_difference(bundle: EvidenceBundle) -> str:
    """A note when this kgen's catalog holds the bundle's problem with other text: the re-run
    uses the bundle's problem, which is what the recorded verdict was reached on."""
    try:
        local = resolve_problem(bundle.problem)
    except KgenUsageError:
        return ""
    if local.path.read_text(encoding="utf-8") == bundle.problem_source:
        return ""
    return (f"this kgen's catalog problem {bundle.problem} differs from the bundle's problem file; "
            "verified against the bundle's")
