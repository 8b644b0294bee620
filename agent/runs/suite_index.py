"""A ``kgen solve`` folder's table rows and its ``index.html``, read from its runs' folders.

A finished problem's row is its run's winner as ``kgen bench`` would have judged it (its
full-size ``final_eval.json`` on a GPU, else its ``eval.json``); a problem without a verified
kernel is a failed row that stays in fast_p's denominator, with the reason in its note. The
index links every problem's report; nothing in it is fetched from elsewhere.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from kgen.agent.run_directory import RUN_FILE
from kgen.agent.runs.suite_state import (
    REPORT_FILE,
    SUMMARY_FILE,
    SuiteProblem,
    SuiteRun,
    relative_path,
)
from kgen.agent.runs.summary import RunSummary
from kgen.core.text import counted
from kgen.evals.problem.format import ProblemInfo
from kgen.evals.result import EvalResult
from kgen.evals.suites.suite import SuiteRow, SuiteSummary, fast_line, row_from_result


def _read_summary(path: Path) -> RunSummary | None:
    file = path / SUMMARY_FILE
    if not file.is_file():
        return None
    try:
        return RunSummary.model_validate_json(file.read_text())
    except (OSError, ValueError):
        return None


def _table_target(summary: RunSummary) -> str | None:
    """The target whose winner is the problem's row: the first timed one, else the first."""
    with_kernel = [t for t in summary.targets if t in summary.best] or list(summary.best)
    timed = [t for t in with_kernel if summary.best[t].time_ms is not None and not summary.best[t].timing_note]
    return (timed or with_kernel or [None])[0]


def row_from_run(info: ProblemInfo, run_path: Path, out: Path) -> SuiteRow:
    """The suite row of a finished run: its winner's final_eval.json (full-size verification
    on a GPU) if it exists, else its eval.json; no verified kernel is a failed row."""

    summary = _read_summary(run_path)
    if summary is None:
        return SuiteRow(problem=info.name, verdict="missing", reason="the run wrote no summary")
    target = _table_target(summary)
    if target is None:
        tried = counted(summary.candidates, "candidate")
        if summary.rejected:
            worst = max(summary.rejected, key=lambda k: summary.rejected[k])
            counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.rejected.items()))
            return SuiteRow(problem=info.name, verdict="rejected", rejection=worst,
                            reason=f"no verified kernel: {tried}, rejected: {counts}")
        why = summary.stop_reason or "; ".join(summary.notes[-1:])
        return SuiteRow(problem=info.name, verdict="missing",
                        reason=f"no verified kernel ({tried}{', ' + why if why else ''})")
    best = summary.best[target]
    folder = run_path / "candidates" / best.candidate
    result_file = next((f for f in (folder / "final_eval.json", folder / "eval.json") if f.is_file()), None)
    if result_file is None:
        return SuiteRow(problem=info.name, verdict="missing",
                        reason=f"the winner {best.candidate} has no evaluation JSON")
    result = EvalResult.model_validate_json(result_file.read_text())
    return row_from_result(result, info, relative_path(best.module, out))


def state_row(info: ProblemInfo, entry: SuiteProblem) -> SuiteRow:
    reasons = {
        "pending": "not run yet",
        "running": "still running",
        "interrupted": "interrupted: `kgen solve` with the same --out resumes it",
        "failed": f"run failed: {entry.exit_reason}",
        "finished": "finished, but its run directory is gone",
        "unserved": f"not attempted offline: {entry.exit_reason}",
    }
    return SuiteRow(problem=info.name, verdict="missing", reason=reasons[entry.status])


def _ms(value: float) -> str:
    return f"{value:.3g} ms"


def outcome_line(entry: SuiteProblem, row: SuiteRow | None) -> str:
    """One problem's outcome in a few words: "finished, best 0.12 ms, 1.80x vs torch.compile"."""
    if entry.status == "failed":
        return f"failed: {entry.exit_reason}"
    if entry.status != "finished":
        return entry.status + (f" ({entry.exit_reason})" if entry.exit_reason else "")
    if row is None or not row.correct:
        return "finished, " + (row.reason if row is not None and row.reason else "no verified kernel")
    if row.candidate_ms is None:
        return "finished, verified (not timed: no GPU)"
    parts = [f"finished, best {_ms(row.candidate_ms)}"]
    for label, ratio, key in (("torch.compile", row.speedup_vs_compile, "torch.compile"),
                              ("eager", row.speedup_vs_eager, "eager")):
        if ratio is not None:
            parts.append(("≈" if key in row.same_speed_as else "") + f"{ratio:.2f}x vs {label}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- index


def _fmt(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{suffix}"


def render_index(state: SuiteRun, infos: Sequence[ProblemInfo], rows: Sequence[SuiteRow],
                 summary: SuiteSummary, out: Path, table: dict[str, Path], command: str, date: str) -> str:
    """``index.html``: the fast_p figures, the chart, and one line per row of the table, linking
    its run's report (``runs/<problem>/report.html``; the run's summary.json where no report was
    written); a problem file that could not be read has a line with its reason and no run.
    Every piece of text is escaped; nothing is fetched from elsewhere."""
    esc = html.escape
    gpu = summary.device_name or "no GPU (verification only; timings need a GPU)"

    def fast(label: str, values: dict[str, float | None]) -> str:
        return f"<li>{esc(fast_line(label, values))}</li>"

    lines = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>kgen suite: {esc(Path(state.suite_dir).name)}</title>",
        "<style>body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
        "tr:nth-child(even){background:#f4f6f8}.passed{color:#2e8b57}.failed{color:#c0392b}"
        "code{background:#f4f4f4;padding:1px 3px}</style>",
        "</head><body>",
        f"<h1>kgen suite: {esc(state.suite_dir)}</h1>",
        f"<p><code>{esc(command)}</code>, {esc(gpu)}, {esc(date)}</p>",
        f"<p>{summary.correct} of {counted(summary.problems, 'problem')} with a verified kernel, {summary.timed} timed.</p>",
        "<ul>", fast("fast_p vs eager", summary.fast_p_vs_eager),
        fast("fast_p vs torch.compile", summary.fast_p_vs_compile), "</ul>",
        "<p>Table: " + " · ".join(f'<a href="{esc(relative_path(p, out))}">{esc(p.name)}</a>'
                                  for k, p in sorted(table.items())) + "</p>",
        f'<p><img src="{esc(relative_path(table["svg"], out))}" alt="speedups per problem"></p>' if "svg" in table else "",
        "<table><thead><tr><th>#</th><th>problem</th><th>status</th><th>verdict</th><th>time ms</th>"
        "<th>vs eager</th><th>vs compile</th><th>run</th><th>note</th></tr></thead><tbody>",
    ]
    for number, row in enumerate(rows, start=1):
        if row.verdict == "unreadable":  # a problem file kgen could not read: no run, the reason
            lines.append(f'<tr><td>{number}</td><td>{esc(row.problem)}</td><td>-</td>'
                         f'<td class="failed">{esc(row.verdict)}</td><td>-</td><td>-</td><td>-</td><td>-</td>'
                         f"<td>{esc(row.reason)}</td></tr>")
            continue
        entry = state.problem(row.problem)
        if entry is None:
            continue
        run_path = out / entry.run_dir
        if (run_path / REPORT_FILE).is_file():
            link = f'<a href="{esc(entry.run_dir)}/{REPORT_FILE}">{esc(row.problem)}</a>'
        elif (run_path / SUMMARY_FILE).is_file():
            link = f'<a href="{esc(entry.run_dir)}/{SUMMARY_FILE}">{esc(row.problem)}</a>'
        else:
            link = esc(row.problem)
        run_cell = (f'<a href="{esc(entry.run_dir)}/">{esc(entry.run_dir)}</a>'
                    if (run_path / RUN_FILE).is_file() else "-")
        verdict = row.verdict + (f" ({row.rejection})" if row.rejection else "")
        note = row.reason if not row.correct else ""
        if entry.report_error:
            note = (note + "; " if note else "") + f"report failed: {entry.report_error}"
        cls = "passed" if row.correct else "failed" if entry.status in ("finished", "failed") else ""
        lines.append(
            f'<tr><td>{number}</td><td>{link}</td><td>{esc(entry.status)}</td>'
            f'<td class="{cls}">{esc(verdict)}</td><td>{_fmt(row.candidate_ms)}</td>'
            f"<td>{_fmt(row.speedup_vs_eager, 'x')}</td><td>{_fmt(row.speedup_vs_compile, 'x')}</td>"
            f"<td>{run_cell}</td><td>{esc(note)}</td></tr>")
    lines += ["</tbody></table>", "</body></html>", ""]
    return "\n".join(line for line in lines if line)

