"""`kgen report RUN`: one run as a self-contained HTML page (``kgen.agent.runs.html_report``).

RUN is found the way `kgen resume` finds it (a run id or its unambiguous start under the
runs folder, or a run directory's path), so a person goes from `kgen runs` to a report
without typing a path. The command prints only the page's path on stdout, so scripts can
use it (`xdg-open $(kgen report RUN)`); an unknown run, or a ``--candidate`` the run does not
hold, is bad usage (exit 2, one line naming the run's nearest candidates).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kgen.agent.run_directory import RunDirectory
from kgen.agent.runs.backend_runs import is_backend_runs, started_runs
from kgen.cli.terminal import console, fail_usage
from kgen.core.settings import load_settings
from kgen.core.text import counted
from kgen.errors import KgenUsageError


def report_command(
    run: Annotated[str, typer.Argument(help="Run id (or its start), or a run directory.")],
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write report.html and its charts here instead of into the run directory.")] = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the report in a web browser.")] = False,
    candidate: Annotated[str | None, typer.Option(
        "--candidate", metavar="ID", help="Also trace this candidate's lineage (e.g. g2-c01), not only the winners'.")] = None,
) -> None:
    """Write an HTML report of a run: progress, lineage with diffs, margins, kernels and cost.

    The report shows the winner's lineage with a diff per step, the verification margins, the
    operators that helped, the final kernels and what the models cost.

    Example: kgen report 20261122-081500-3fa9c1 --open
    """
    from kgen.agent.runs.html_report import write_report

    try:
        found = RunDirectory.find(run, load_settings({}).runs_location)
    except KgenUsageError as exc:  # a broken configuration, or no such run
        fail_usage(exc.message)
    # a request over several backends holds one run per backend: a report for each
    runs = started_runs(found) if is_backend_runs(found) else [found.path]
    if not runs:
        fail_usage(f"run {found.run_id} holds no backend's run yet (`kgen resume {found.run_id}`)")
    if candidate is not None:
        check_candidate(found.run_id, candidate, runs)
    for path in runs:
        try:
            page = write_report(path, out / path.name if out is not None and path != found.path else out,
                                candidate)
        except OSError as exc:
            fail_usage(f"cannot write the report for run {found.run_id}: {exc}")
        console.print(str(page), highlight=False, soft_wrap=True)
        if open_page:
            import webbrowser

            webbrowser.open(page.resolve().as_uri())


#: how many of a run's candidate ids an unknown ``--candidate`` error lists at most
_LISTED_IDS = 8


def check_candidate(run_id: str, candidate: str, runs: list[Path]) -> None:
    """Fail as bad usage unless one of ``runs`` holds ``candidate``: a page asked to trace a
    candidate that is not there would say so only inside the HTML, after exit 0 (a mistyped
    ``g9-c99`` looked like a report). The error names the nearest ids, else the run's ids."""
    import difflib

    from kgen.agent.runs.records import load_records

    ids = sorted({record.id for path in runs for record in load_records(RunDirectory(path))})
    if candidate in ids:
        return
    if not ids:
        fail_usage(f"run {run_id} has no candidates yet, so no candidate {candidate}")
    close = difflib.get_close_matches(candidate, ids, n=3, cutoff=0.6)
    if close:
        fail_usage(f"run {run_id} has no candidate {candidate}; close ones: {', '.join(close)}")
    listed = ", ".join(ids[:_LISTED_IDS]) + (", …" if len(ids) > _LISTED_IDS else "")
    fail_usage(f"run {run_id} has no candidate {candidate}; its {counted(len(ids), 'candidate')}: {listed}")
