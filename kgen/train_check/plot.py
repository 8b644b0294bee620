"""The loss curves of a train check as an SVG picture, written by hand (no plotting library).

Two panels: the losses themselves, and each run's gap to the stock reference inside the allowed
band. Losses of runs that agree lie on top of each other at any readable scale; the gap panel is
where agreement and disagreement show. Plain SVG so the picture opens in any browser and sits in
docs/benchmarks.md without a dependency on the GPU machine."""

from __future__ import annotations

import math
from html import escape

#: line colours, one per run after stock (stock itself is black)
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
WIDTH, PANEL_HEIGHT, MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, GAP = 760, 240, 70, 190, 34, 48


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _limits(series: list[list[float]]) -> tuple[float, float]:
    values = _finite([v for s in series for v in s])
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    pad = (high - low) * 0.05 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


def _panel(top: float, title: str, series: list[tuple[str, list[float], str]], steps: int,
           band: list[float] | None = None) -> list[str]:
    """One panel at ``top``: ``series`` as polylines (a non-finite value breaks its line), ``band``
    as a shaded +-band around zero, axes labelled at their ends."""
    width = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    low, high = _limits([s for _, s, _ in series] + ([band, [-b for b in band]] if band else []))

    def x(step: int) -> float:
        return MARGIN_LEFT + width * step / max(steps - 1, 1)

    def y(value: float) -> float:
        return top + PANEL_HEIGHT * (high - value) / (high - low)

    parts = [f'<text x="{MARGIN_LEFT}" y="{top - 8:.1f}" font-size="13" font-weight="bold">{escape(title)}</text>',
             f'<rect x="{MARGIN_LEFT}" y="{top}" width="{width}" height="{PANEL_HEIGHT}" fill="none" stroke="#999"/>']
    for value in (low, high):
        parts.append(f'<text x="{MARGIN_LEFT - 6}" y="{y(value) + 4:.1f}" font-size="11" text-anchor="end">'
                     f"{value:.4g}</text>")
    bottom = top + PANEL_HEIGHT
    parts.append(f'<text x="{MARGIN_LEFT}" y="{bottom + 14:.1f}" font-size="11">step 0</text>')
    parts.append(f'<text x="{MARGIN_LEFT + width}" y="{bottom + 14:.1f}" font-size="11" text-anchor="end">'
                 f"step {steps - 1}</text>")
    if band:
        upper = [f"{x(i):.1f},{y(b):.1f}" for i, b in enumerate(band)]
        lower = [f"{x(i):.1f},{y(-b):.1f}" for i, b in reversed(list(enumerate(band)))]
        parts.append(f'<polygon points="{" ".join(upper + lower)}" fill="#cccccc" fill-opacity="0.6" stroke="none"/>')
    for index, (label, values, colour) in enumerate(series):
        runs: list[list[str]] = [[]]
        for step, value in enumerate(values):
            if math.isfinite(value):
                runs[-1].append(f"{x(step):.1f},{y(value):.1f}")
            elif runs[-1]:
                runs.append([])
        for points in runs:
            if len(points) > 1:
                parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
            elif points:
                cx, cy = points[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
        legend_y = top + 14 + 16 * index
        parts.append(f'<line x1="{WIDTH - MARGIN_RIGHT + 12}" y1="{legend_y - 4}" x2="{WIDTH - MARGIN_RIGHT + 32}" '
                     f'y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{WIDTH - MARGIN_RIGHT + 38}" y="{legend_y}" font-size="11">{escape(label)}</text>')
    return parts


def loss_curves_svg(title: str, stock: list[float], runs: dict[str, list[float]], allowed: list[float] | None) -> str:
    """The picture of ``runs`` (label -> loss per step) against the ``stock`` reference, with the
    ``allowed`` gap per step shaded in the gap panel."""
    steps = max([len(stock)] + [len(v) for v in runs.values()])
    coloured = [(label, values, COLOURS[i % len(COLOURS)]) for i, (label, values) in enumerate(runs.items())]
    gaps = [(label, [v - s for v, s in zip(values, stock, strict=False)], colour) for label, values, colour in coloured]
    height = MARGIN_TOP + 2 * PANEL_HEIGHT + GAP + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{MARGIN_LEFT}" y="16" font-size="14">{escape(title)}</text>']
    parts += _panel(MARGIN_TOP + 8, "loss", [("stock", stock, "#000000"), *coloured], steps)
    parts += _panel(MARGIN_TOP + 8 + PANEL_HEIGHT + GAP, "loss - stock (shaded: allowed)", gaps, steps, allowed)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
