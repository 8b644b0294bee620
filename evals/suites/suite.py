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
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

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
    #: p ("0", "1", "1.5", "2") -> (correct and speedup > p) / problems; None where p > 0 and no
    #: problem has a speedup against that baseline (nothing timed: unmeasured, not slow)
    fast_p_vs_eager: dict[str, float | None]
    fast_p_vs_compile: dict[str, float | None]
    geomean_speedup_vs_eager: float | None = None
    geomean_speedup_vs_compile: float | None = None
    #: rows with a candidate time
    timed: int = 0
    #: problem files that could not be read or loaded (counted in ``problems``, never correct)
    unreadable: int = 0
    device_name: str = ""
    #: the problems that decide the exit code (``summarize``'s ``selected``), and how many of
    #: them are correct; every problem of the suite unless a selection was made
    selected: int = 0
    selected_correct: int = 0

    @property
    def exit_code(self) -> int:
        """The exit status of `kgen bench` and `kgen solve`, decided here once: the selected
        problems decide. 0 when every selected problem has a verified kernel, 1 when any has
        not (no candidate or no kernel, rejected, inconclusive, its run failed, its file
        unreadable) or when nothing was selected (nothing verified). `kgen solve --only NAME`
        selects NAME; `kgen bench` over the shipped kernels selects the problems that have one.
        Bad usage (2) and an interrupt (130) are decided before there is a summary."""
        return 0 if self.selected and self.selected_correct == self.selected else 1

    @property
    def has_selection(self) -> bool:
        """Some problems of the suite were left out of the exit code's selection."""
        return self.selected != self.problems


def _fast_p(rows: Sequence[SuiteRow], attr: str) -> dict[str, float | None]:
    total = len(rows)
    measured = any(getattr(row, attr) is not None for row in rows)
    out: dict[str, float | None] = {}
    for p in FAST_P:
        threshold = float(p)
        if threshold == 0:
            hits = sum(row.correct for row in rows)
        elif not measured:
            out[p] = None
            continue
        else:
            hits = sum(1 for row in rows if row.correct and (getattr(row, attr) or 0.0) > threshold)
        out[p] = hits / total if total else 0.0
    return out


def _geomean(values: Iterable[float | None]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def summarize(rows: Sequence[SuiteRow], selected: Collection[str] | None = None) -> SuiteSummary:
    """The suite's figures over every row (KernelBench's denominator is the whole suite), and
    the selection that decides the exit code: the rows named in ``selected``, every row when
    None (``SuiteSummary.exit_code``)."""
    correct = [row for row in rows if row.correct]
    devices = [row.device_name for row in rows if row.device_name]
    chosen = [row for row in rows if selected is None or row.problem in selected]
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
        selected=len(chosen),
        selected_correct=sum(row.correct for row in chosen),
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


#: a fast_p figure that was not measured (no problem timed against that baseline), wherever
#: one is printed: never 0.00, which reads as slow
UNMEASURED = "n/a"


def fast_figures(figures: Sequence[tuple[str, float | None]]) -> str:
    """``label value`` pairs of fast_p figures, the one way they are printed (the terminal
    table, suite.md, the run's last line, index.html): two decimals, or ``n/a`` with the reason
    said once at the end."""
    text = ", ".join(f"{label} {UNMEASURED if value is None else f'{value:.2f}'}" for label, value in figures)
    return text + (f" ({UNMEASURED}: nothing timed)" if any(value is None for _, value in figures) else "")


def fast_line(label: str, fast: dict[str, float | None]) -> str:
    """``fast_p vs eager: fast_0 0.50, fast_1 n/a, ...``: every p of ``FAST_P``."""
    return f"{label}: " + fast_figures([(f"fast_{p}", fast[p]) for p in FAST_P])


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
        fast_line("fast_p vs eager", summary.fast_p_vs_eager),
        "",
        fast_line("fast_p vs torch.compile", summary.fast_p_vs_compile),
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


def write_suite_outputs(rows: Sequence[SuiteRow], summary: SuiteSummary, out_dir: Path,
                        command: str, date: str) -> dict[str, Path]:
    """suite.json, suite.csv, suite.svg and suite.md in ``out_dir``; returns {kind: path}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {kind: out_dir / f"suite.{kind}" for kind in ("json", "csv", "svg", "md")}
    report = SuiteReport(command=command, date=date, summary=summary, rows=list(rows))
    paths["json"].write_text(report.model_dump_json(indent=2) + "\n")
    _write_csv(rows, summary, paths["csv"], date)
    # the chart reads this module's rows and figures: imported here, not at the top (no cycle)
    from kgen.evals.suites.suite_chart import render_svg

    paths["svg"].write_text(render_svg(rows, summary, command, date), encoding="utf-8")
    paths["md"].write_text(render_markdown(rows, summary, command, date), encoding="utf-8")
    return paths
