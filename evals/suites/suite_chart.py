"""A suite's chart (suite.svg): per problem, the speedups against eager and torch.compile on a
log axis with %SOL beside them; without timings, each problem's verification status.

The rows, figures and the way a figure is printed are ``suite.py``'s; this module only draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from xml.sax.saxutils import escape

from kgen.evals.suites.suite import SuiteRow, SuiteSummary, _fmt, _verdict_text, fast_figures

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
                      f"{fast_figures([('fast_1 vs eager', fast['1']), ('fast_2', fast['2'])])}; "
                      f"geomean vs eager {geo}", 12))
    return _svg(width, height, body)
