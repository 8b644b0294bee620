"""A suite: many problems, one candidate each, one table and one chart.

``discover_suite`` finds the problems (the shipped catalog, or every problem file
in a folder: a KernelBench level folder works), ``find_candidate`` pairs each with
a candidate file, ``row_from_result`` flattens one :class:`EvalResult` (its
``bench`` timing block when present) into a :class:`SuiteRow`, ``summarize``
computes the KernelBench figures, and ``write_suite_outputs`` writes
suite.json / suite.csv / suite.svg / suite.md.

fast_p (KernelBench): (problems correct AND speedup > p) / (all problems in the
suite). Missing candidates, rejected ones and problem files kgen cannot read
(``unreadable_rows``) stay in the denominator; fast_0 is the correctness rate (a
correct row without timings counts for fast_0 only). The geometric-mean speedups
are over correct rows that have the speedup. ``SuiteSummary.exit_code`` is the one
exit status of `kgen bench` and `kgen solve`.
"""

from __future__ import annotations

import ast
import csv
import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal
from xml.sax.saxutils import escape

from pydantic import Field

from kgen.evals.baselines.messages import BASELINES
from kgen.evals.problem.catalog import catalog
from kgen.evals.problem.format import (
    ProblemError,
    ProblemInfo,
    load_problem,
    parse_problem,
    read_problem,
)
from kgen.evals.result import EvalResult
from kgen.evals.verdict import ResultModel

log = logging.getLogger(__name__)

FAST_P = ("0", "1", "1.5", "2")


# --------------------------------------------------------------------------- discovery


def scan_suite(path: str | Path | None) -> tuple[list[ProblemInfo], list[tuple[Path, str]]]:
    """(problems, skipped) where skipped lists ``(file, why)`` for *.py files that are not problems.

    None: the shipped catalog. A folder: each ``*.py`` in it (not recursive; names
    starting with ``_`` are ignored silently). A single file: that problem.
    Problems are sorted by name.
    """
    if path is None:
        return list(catalog()), []
    path = Path(path).expanduser()
    if path.is_file():
        return [read_problem(path)], []
    if not path.is_dir():
        raise FileNotFoundError(f"suite folder not found: {path}")
    infos: list[ProblemInfo] = []
    skipped: list[tuple[Path, str]] = []
    for file in sorted(path.glob("*.py")):
        if file.name.startswith("_"):
            continue
        try:
            infos.append(read_problem(file))
        except (ProblemError, SyntaxError, ValueError, OSError) as exc:
            skipped.append((file, str(exc)))
    infos.sort(key=lambda info: (_number_prefix(info.name), info.name, str(info.path)))
    return infos, skipped


def _number_prefix(name: str) -> int:
    """KernelBench's ``19_ReLU`` sorts by its problem number (1, 2, ..., 10, not 1, 10, 2)."""
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else -1


#: the names a KernelBench problem file declares; a file declaring none of them is no problem
PROBLEM_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs"})


def is_other_module(file: Path) -> bool:
    """A file of a suite folder that parses and declares none of ``PROBLEM_NAMES`` (a helper
    module): not an input of the suite. Every other file that fails to read as a problem (a
    syntax error, undecodable bytes, some of the names missing, bad ``KGEN_*`` metadata) is a
    problem kgen could not read: it must not leave the suite's denominator unseen."""
    try:
        tree = parse_problem(file)
    except ProblemError:
        return False
    declared = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return not declared & PROBLEM_NAMES


def unreadable_row(problem: str, why: str) -> SuiteRow:
    """The row of a problem kgen could not read or load: in the denominator, never correct."""
    return SuiteRow(problem=problem, verdict="unreadable", reason=why)


def unreadable_rows(skipped: Iterable[tuple[Path, str]]) -> list[SuiteRow]:
    """One "unreadable" row per file of ``scan_suite``'s ``skipped`` that is a problem kgen
    could not read (see ``is_other_module``), named for its file, with the reason."""
    return [unreadable_row(Path(file).stem, why) for file, why in skipped if not is_other_module(Path(file))]


def load_failure(info: ProblemInfo) -> str | None:
    """Why a problem file that reads cannot be executed (an import that fails, an error at module
    level), else None. Checked before its candidate is verified: a reference that cannot load is
    the problem's fault, never a rejection of the candidate."""
    try:
        load_problem(info.path)
    except ProblemError as exc:
        return exc.message
    return None


def in_suite_order(rows: Iterable[SuiteRow]) -> list[SuiteRow]:
    """Rows in the order ``scan_suite`` sorts problems (by KernelBench number, then name), so an
    unreadable file's row stands where its problem would have."""
    return sorted(rows, key=lambda row: (_number_prefix(row.problem), row.problem))


def discover_suite(path: str | Path | None) -> list[ProblemInfo]:
    """The problems of a suite (see :func:`scan_suite`); files that are not problems are logged."""
    infos, skipped = scan_suite(path)
    for file, why in skipped:
        log.info("skipped %s: %s", file, why)
    return infos


def find_candidate(info: ProblemInfo, candidates_dir: Path) -> Path | None:
    """``<name>.py``, ``<file stem>.py``, ``<stem>_solution.py`` or ``<name>_solution.py`` in the folder;
    for a KernelBench file ``levelN/19_ReLU.py`` also ``levelN_19_ReLU.py`` and the naming of
    public solution sets, ``level_N_problem_19_sample_<k>_kernel.py`` (the lowest sample)."""
    candidates_dir = Path(candidates_dir)
    stem = Path(info.path).stem
    level = Path(info.path).parent.name
    names = [info.name, stem, f"{stem}_solution", f"{info.name}_solution", f"{level}_{stem}"]
    for name in names:
        file = candidates_dir / f"{name}.py"
        if file.is_file():
            return file
    number = _number_prefix(stem)
    if level.startswith("level") and level[5:].isdigit() and number >= 0:
        samples = sorted(candidates_dir.glob(f"level_{level[5:]}_problem_{number}_sample_*_kernel.py"),
                         key=lambda p: _number_prefix(p.stem.rsplit("_sample_", 1)[1]))
        if samples:
            return samples[0]
    return None


# --------------------------------------------------------------------------- rows


class SuiteRow(ResultModel):
    """One problem of a suite: its verdict and (on a GPU) its times and speedups."""

    problem: str
    candidate: str | None = None
    #: "unreadable": the problem file itself could not be read or loaded (``unreadable_rows``)
    verdict: Literal["passed", "rejected", "inconclusive", "missing", "unreadable"]
    rejection: str | None = None
    reason: str = ""
    #: the policies that judged it ("precision ieee, torch ops library"); empty when not evaluated
    policies: str = ""
    candidate_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    liger_ms: float | None = None
    quack_ms: float | None = None
    #: baseline ms / candidate ms: > 1 means the candidate is faster
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speedup_vs_liger: float | None = None
    speedup_vs_quack: float | None = None
    #: what eager and torch.compile ran and computed in (``ProblemInfo.baseline_statement``)
    baseline: str = ""
    #: the versions the baselines were timed with (torch, liger_kernel, quack_kernels)
    baseline_versions: dict[str, str] = Field(default_factory=dict)
    #: baselines whose p10-p90 interval overlaps the candidate's: no speedup either way is
    #: claimed against them, whatever the ratio of the medians ("≈" in the tables)
    same_speed_as: list[str] = Field(default_factory=list)
    pct_of_sol: float | None = None
    achieved_tbs: float | None = None
    achieved_tflops: float | None = None
    sol_score: float | None = None
    #: the candidate's timing flags, and "<baseline>: <error>" for measurements that failed
    flags: list[str] = Field(default_factory=list)
    device_name: str = ""

    @property
    def correct(self) -> bool:
        return self.verdict == "passed"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _ratio(baseline_ms: float | None, candidate_ms: float | None) -> float | None:
    if baseline_ms is None or candidate_ms is None:
        return None
    return baseline_ms / candidate_ms


def row_from_result(result: EvalResult | None, info: ProblemInfo,
                    candidate: str | Path | None) -> SuiteRow:
    """Flatten one evaluation; no result (no candidate, or the run never finished) is "missing"."""
    cand = str(candidate) if candidate is not None else None
    if result is None:
        why = "no candidate file" if candidate is None else "no evaluation result"
        return SuiteRow(problem=info.name, candidate=cand, verdict="missing", reason=why)
    rejection = result.rejection.value if result.rejection is not None else None
    row: dict[str, Any] = {
        "problem": info.name,
        "candidate": cand if cand is not None else (result.candidate or None),
        "verdict": result.verdict.value,
        "rejection": rejection if rejection is not None else (result.inconclusive.value if result.inconclusive else None),
        "reason": result.reason,
        "policies": result.policies.describe(),
        "baseline": info.baseline_statement(),
    }
    bench = result.bench
    if bench is None:
        return SuiteRow(**row)

    flags: list[str] = []
    times: dict[str, float | None] = {}
    for key in ("candidate", *BASELINES):
        label = "compile" if key == "torch.compile" else key
        meas = bench.measurements.get(key)
        times[label] = bench.median(key)
        if meas is not None and meas.error:
            flags.append(f"{key}: {meas.error}")
    candidate_meas = bench.measurements.get("candidate")
    if candidate_meas is not None:
        flags = [str(f) for f in candidate_meas.flags] + flags
    for key, why in bench.errors.items():
        text = f"{key}: {why}"
        if text not in flags:
            flags.append(text)

    sol = bench.sol or {}
    row.update(
        candidate_ms=times["candidate"],
        eager_ms=times["eager"],
        compile_ms=times["compile"],
        liger_ms=times["liger"],
        quack_ms=times["quack"],
        speedup_vs_eager=_ratio(times["eager"], times["candidate"]),
        speedup_vs_compile=_ratio(times["compile"], times["candidate"]),
        speedup_vs_liger=_ratio(times["liger"], times["candidate"]),
        speedup_vs_quack=_ratio(times["quack"], times["candidate"]),
        pct_of_sol=_number(sol.get("pct_of_sol")),
        achieved_tbs=_number(sol.get("achieved_tbs")),
        achieved_tflops=_number(sol.get("achieved_tflops")),
        sol_score=_number(sol.get("score")),
        same_speed_as=[name for name in BASELINES
                       if (speedup := bench.speedup(name)) is not None and not speedup.claimed],
        flags=flags,
        device_name=bench.device_name,
        baseline_versions=dict(bench.baseline_versions),
    )
    return SuiteRow(**row)


# --------------------------------------------------------------------------- summary


class SuiteSummary(ResultModel):
    problems: int
    correct: int
    #: p ("0", "1", "1.5", "2") -> (correct and speedup > p) / problems
    fast_p_vs_eager: dict[str, float]
    fast_p_vs_compile: dict[str, float]
    geomean_speedup_vs_eager: float | None = None
    geomean_speedup_vs_compile: float | None = None
    #: rows with a candidate time
    timed: int = 0
    #: problem files that could not be read or loaded (counted in ``problems``, never correct)
    unreadable: int = 0
    device_name: str = ""

    @property
    def exit_code(self) -> int:
        """The exit status of `kgen bench` and `kgen solve`, decided here once: 0 when every
        problem of the suite has a verified kernel, 1 when any has not (no candidate or no
        kernel, rejected, inconclusive, its run failed, its file unreadable). Bad usage (2) and
        an interrupt (130) are decided before there is a summary."""
        return 0 if self.problems and self.correct == self.problems else 1


def _fast_p(rows: Sequence[SuiteRow], attr: str) -> dict[str, float]:
    total = len(rows)
    out: dict[str, float] = {}
    for p in FAST_P:
        threshold = float(p)
        if threshold == 0:
            hits = sum(row.correct for row in rows)
        else:
            hits = sum(1 for row in rows if row.correct and (getattr(row, attr) or 0.0) > threshold)
        out[p] = hits / total if total else 0.0
    return out


def _geomean(values: Iterable[float | None]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def summarize(rows: Sequence[SuiteRow]) -> SuiteSummary:
    correct = [row for row in rows if row.correct]
    devices = [row.device_name for row in rows if row.device_name]
    return SuiteSummary(
        problems=len(rows),
        correct=len(correct),
        fast_p_vs_eager=_fast_p(rows, "speedup_vs_eager"),
        fast_p_vs_compile=_fast_p(rows, "speedup_vs_compile"),
        geomean_speedup_vs_eager=_geomean(row.speedup_vs_eager for row in correct),
        geomean_speedup_vs_compile=_geomean(row.speedup_vs_compile for row in correct),
        timed=sum(row.candidate_ms is not None for row in rows),
        unreadable=sum(row.verdict == "unreadable" for row in rows),
        device_name=devices[0] if devices else "",
    )


# --------------------------------------------------------------------------- outputs


class SuiteReport(ResultModel):
    command: str
    date: str
    summary: SuiteSummary
    rows: list[SuiteRow]


CSV_COLUMNS = (
    "device", "date", "problem", "candidate", "verdict", "rejection", "reason", "policies",
    "candidate_ms", "eager_ms", "compile_ms", "liger_ms", "quack_ms",
    "speedup_vs_eager", "speedup_vs_compile", "speedup_vs_liger", "speedup_vs_quack", "baseline",
    "pct_of_sol", "achieved_tbs", "achieved_tflops", "sol_score", "flags",
)


def _write_csv(rows: Sequence[SuiteRow], summary: SuiteSummary, path: Path, date: str) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            data = row.model_dump(exclude={"device_name", "flags", "baseline_versions"})
            data.update(device=row.device_name or summary.device_name, date=date,
                        flags="; ".join(row.flags))
            writer.writerow({k: ("" if data.get(k) is None else data[k]) for k in CSV_COLUMNS})


def _fmt(value: float | None, digits: int = 3, suffix: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}{suffix}"
    if abs(value) >= 10:
        return f"{value:.1f}{suffix}"
    if abs(value) >= 1 or (suffix == "x" and abs(value) >= 0.01):
        return f"{value:.2f}{suffix}"
    if abs(value) >= 0.001 or value == 0:
        return f"{value:.3f}{suffix}"
    return f"{value:.{digits - 1}e}{suffix}"


def _speedup_cell(row: SuiteRow, baseline: str, ratio: float | None) -> str:
    """The ratio, marked "≈" when the intervals overlap: a figure, not a claim."""
    text = _fmt(ratio, 3, "x")
    return f"≈{text}" if ratio is not None and baseline in row.same_speed_as else text


def _verdict_text(row: SuiteRow) -> str:
    if row.verdict in ("rejected", "inconclusive") and row.rejection:
        return f"{row.verdict} ({row.rejection})"
    if row.verdict in ("missing", "unreadable"):
        return f"{row.verdict} ({row.reason})" if row.reason else row.verdict
    return row.verdict


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fast_line(label: str, fast: dict[str, float]) -> str:
    parts = ", ".join(f"fast_{p} {fast[p]:.2f}" for p in FAST_P)
    return f"{label}: {parts}"


def render_markdown(rows: Sequence[SuiteRow], summary: SuiteSummary, command: str, date: str) -> str:
    gpu = summary.device_name or "no GPU (verification only; timings need a GPU)"
    lines = [
        f"`{command}`, {gpu}, {date}",
        "",
        "| problem | verdict | policies | time ms | TB/s | TFLOP/s | %SOL | vs eager | vs compile | vs Liger | vs quack |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            row.problem, _verdict_text(row), row.policies or "-", _fmt(row.candidate_ms, 3), _fmt(row.achieved_tbs, 3),
            _fmt(row.achieved_tflops, 3), _fmt(row.pct_of_sol, 3, "%"),
            _speedup_cell(row, "eager", row.speedup_vs_eager), _speedup_cell(row, "torch.compile", row.speedup_vs_compile),
            _speedup_cell(row, "liger", row.speedup_vs_liger), _speedup_cell(row, "quack", row.speedup_vs_quack),
        ]
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    lines += [
        "",
        f"{summary.correct} of {summary.problems} correct, {summary.timed} timed"
        + (f", {summary.unreadable} problem file(s) unreadable." if summary.unreadable else "."),
        "",
        _fast_line("fast_p vs eager", summary.fast_p_vs_eager),
        "",
        _fast_line("fast_p vs torch.compile", summary.fast_p_vs_compile),
        "",
        f"geomean speedup over correct timed problems: "
        f"{_fmt(summary.geomean_speedup_vs_eager, 3, 'x')} vs eager, "
        f"{_fmt(summary.geomean_speedup_vs_compile, 3, 'x')} vs torch.compile",
        "",
        *_baseline_lines(rows),
    ]
    return "\n".join(lines)


def _baseline_lines(rows: Sequence[SuiteRow]) -> list[str]:
    """What each problem's eager and torch.compile ran, and the versions every baseline was
    timed with: a speedup means nothing without saying what it is over."""
    stated = [row for row in rows if row.baseline]
    if not stated:
        return []
    lines = ["What eager and torch.compile ran (≈: intervals overlap, no speedup claimed either way):", ""]
    lines += [f"- {row.problem}: {row.baseline}" for row in stated]
    versions = next((row.baseline_versions for row in rows if row.baseline_versions), None)
    if versions:
        lines += ["", "Baselines timed with " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + "."]
    return [*lines, ""]


# --- SVG chart

_COLORS = {"eager": "#3b6fb6", "compile": "#e08a1e", "sol": "#4a9a5b",
           "passed": "#2e8b57", "rejected": "#c0392b", "inconclusive": "#b7950b", "missing": "#999999", "unreadable": "#7d3c98"}
_FONT = 'font-family="Helvetica, Arial, sans-serif"'
_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "start",
          fill: str = "#222", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}" font-weight="{weight}" {_FONT}>{escape(text)}</text>')


def _rect(x: float, y: float, w: float, h: float, fill: str, extra: str = "") -> str:
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.0):.1f}" height="{h:.1f}" fill="{fill}"{extra}/>'


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1,
          extra: str = "") -> str:
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="{width}"{extra}/>')


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _svg(width: int, height: int, body: list[str]) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        _rect(0, 0, width, height, "#ffffff"),
        *body,
        "</svg>",
        "",
    ])


def _status_chart(rows: Sequence[SuiteRow], summary: SuiteSummary, title: str) -> str:
    """No timings: verification status per problem."""
    width, row_h, top = 820, 26, 84
    height = top + row_h * max(len(rows), 1) + 40
    body = [
        _text(20, 30, title, 16, weight="bold"),
        _text(20, 54, "No timings: timings need a GPU. Verification status per problem.", 13,
              fill="#8a4b00"),
    ]
    for i, row in enumerate(rows):
        y = top + i * row_h
        if i % 2:
            body.append(_rect(10, y - 4, width - 20, row_h, "#f4f6f8"))
        body.append(_text(240, y + 13, _short(row.problem, 34), 12, anchor="end"))
        color = _COLORS[row.verdict]
        body.append(_rect(252, y, 90, 18, color, ' rx="4"'))
        body.append(_text(297, y + 13, row.verdict, 11, anchor="middle", fill="#fff", weight="bold"))
        detail = row.rejection or ""
        if row.reason:
            detail = f"{detail}: {row.reason}" if detail else row.reason
        body.append(_text(352, y + 13, _short(detail, 70), 11, fill="#444"))
    body.append(_text(20, height - 14, f"{summary.correct} of {summary.problems} correct "
                      f"(fast_0 = {summary.fast_p_vs_eager['0']:.2f})", 12))
    return _svg(width, height, body)


def render_svg(rows: Sequence[SuiteRow], summary: SuiteSummary, command: str = "",
               date: str = "") -> str:
    """Per problem: speedup vs eager and vs torch.compile (log axis, line at 1x) and %SOL."""
    device = summary.device_name or "no GPU"
    title = f"kgen suite: {summary.problems} problems, {device}" + (f", {date}" if date else "")
    speedups = [s for row in rows for s in (row.speedup_vs_eager, row.speedup_vs_compile)
                if s is not None and s > 0]
    if not speedups:
        return _status_chart(rows, summary, title)

    lo_val, hi_val = min(min(speedups), 1.0), max(max(speedups), 1.0)
    lo = max([t for t in _TICKS if t <= lo_val / 1.2] or [_TICKS[0]])
    hi = min([t for t in _TICKS if t >= hi_val * 1.2] or [_TICKS[-1]])
    label_w, sp_x0, sp_x1, sol_x0, sol_x1 = 270, 290, 715, 765, 955
    width, row_h, top = 1000, 40, 110
    height = top + row_h * len(rows) + 70

    def sx(value: float) -> float:
        value = min(max(value, lo), hi)
        return sp_x0 + (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo)) * (sp_x1 - sp_x0)

    def solx(pct: float) -> float:
        return sol_x0 + min(max(pct, 0.0), 100.0) / 100.0 * (sol_x1 - sol_x0)

    bottom = top + row_h * len(rows)
    body = [_text(20, 28, title, 16, weight="bold")]
    if command:
        body.append(_text(20, 48, _short(command, 140), 11, fill="#555"))
    # legend
    lx = sp_x0
    for key, label in (("eager", "speedup vs eager"), ("compile", "speedup vs torch.compile"),
                       ("sol", "% of speed of light")):
        body.append(_rect(lx, 60, 14, 10, _COLORS[key]))
        body.append(_text(lx + 20, 69, label, 12))
        lx += 190
    body.append(_text((sp_x0 + sp_x1) / 2, 92, "speedup (log scale; right of the line = faster)",
                      12, anchor="middle", weight="bold"))
    body.append(_text((sol_x0 + sol_x1) / 2, 92, "%SOL", 12, anchor="middle", weight="bold"))
    for i in range(len(rows)):
        if i % 2:
            body.append(_rect(10, top + i * row_h, width - 20, row_h, "#f4f6f8"))
    for tick in (t for t in _TICKS if lo <= t <= hi):
        x = sx(tick)
        body.append(_line(x, top, x, bottom, "#dddddd"))
        body.append(_text(x, bottom + 16, f"{tick:g}x", 11, anchor="middle", fill="#555"))
    for pct in (0, 25, 50, 75, 100):
        x = solx(pct)
        body.append(_line(x, top, x, bottom, "#dddddd"))
        body.append(_text(x, bottom + 16, f"{pct}%", 11, anchor="middle", fill="#555"))

    one = sx(1.0)
    for i, row in enumerate(rows):
        y = top + i * row_h
        body.append(_text(label_w - 12, y + 18, _short(row.problem, 32), 12, anchor="end"))
        marker = row.verdict
        body.append(f'<circle cx="{label_w - 2:.1f}" cy="{y + 14:.1f}" r="4" '
                    f'fill="{_COLORS[row.verdict]}"><title>{escape(marker)}</title></circle>')
        if row.verdict != "passed" or row.candidate_ms is None:
            why = _verdict_text(row) if row.verdict != "passed" else "passed, no timing"
            body.append(_text(sp_x0 + 8, y + 24, _short(why, 60), 11, fill=_COLORS[row.verdict]))
            continue
        for j, (key, value) in enumerate((("eager", row.speedup_vs_eager),
                                          ("compile", row.speedup_vs_compile))):
            by = y + 6 + j * 14
            if value is None or value <= 0:
                body.append(_text(one + 4, by + 10, "no baseline", 10, fill="#777"))
                continue
            x = sx(value)
            body.append(_rect(min(one, x), by, abs(x - one) or 1.5, 12, _COLORS[key]))
            tx, anchor = (x + 4, "start") if value >= 1 else (x - 4, "end")
            body.append(_text(tx, by + 10, _fmt(value, 3, "x"), 10, anchor=anchor))
        if row.pct_of_sol is not None:
            body.append(_rect(sol_x0, y + 10, solx(row.pct_of_sol) - sol_x0, 18, _COLORS["sol"]))
            body.append(_text(min(solx(row.pct_of_sol), sol_x1 - 30) + 4, y + 23,
                              f"{row.pct_of_sol:.0f}%", 10))
        else:
            body.append(_text(sol_x0 + 4, y + 23, "no SOL model", 10, fill="#777"))
    body.append(_line(one, top - 4, one, bottom, "#222222", 1.5))
    body.append(_text(one, top - 6, "1x", 11, anchor="middle", weight="bold"))
    fast = summary.fast_p_vs_eager
    geo = _fmt(summary.geomean_speedup_vs_eager, 3, "x")
    body.append(_text(20, height - 14,
                      f"{summary.correct} of {summary.problems} correct, {summary.timed} timed; "
                      f"fast_1 vs eager {fast['1']:.2f}, fast_2 {fast['2']:.2f}; "
                      f"geomean vs eager {geo}", 12))
    return _svg(width, height, body)


def write_suite_outputs(rows: Sequence[SuiteRow], summary: SuiteSummary, out_dir: Path,
                        command: str, date: str) -> dict[str, Path]:
    """suite.json, suite.csv, suite.svg and suite.md in ``out_dir``; returns {kind: path}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {kind: out_dir / f"suite.{kind}" for kind in ("json", "csv", "svg", "md")}
    report = SuiteReport(command=command, date=date, summary=summary, rows=list(rows))
    paths["json"].write_text(report.model_dump_json(indent=2) + "\n")
    _write_csv(rows, summary, paths["csv"], date)
    paths["svg"].write_text(render_svg(rows, summary, command, date), encoding="utf-8")
    paths["md"].write_text(render_markdown(rows, summary, command, date), encoding="utf-8")
    return paths
