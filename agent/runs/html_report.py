"""One run as one self-contained HTML page: how the search went, and why to trust its winner.

The terminal table (``summary.py``) says what won; a person deciding whether to use the
kernel (or whether the search is worth its cost) also wants to see how it got there: how
the best speed moved as candidates were evaluated, which changes made the winner and what
each one gained, how close every candidate came to its tolerance, which operators paid
off, and what the models cost. The story runs data -> sections -> html: ``load_run``
(``records.py``) reads the run directory once, one function per section turns it into
HTML and PNG charts, :func:`render_html` puts them on one page, :func:`write_report` writes it.

The page must open anywhere (attached to a ticket, copied off a cluster) and must never run
what it shows: charts are embedded as data URIs (and written beside it as PNGs), there is no
external URL, every piece of run text (kernel sources, model names, reasons) is escaped, and
a Content-Security-Policy allows only the page's own inline script, which only checks that
the charts decoded. Every figure is the evaluation JSON's; an untimed run says so.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from kgen.agent.candidates import CandidateRecord
from kgen.agent.llm.usage import PRICES_AS_OF
from kgen.agent.runs.records import (
    NO_GPU,
    LineageNode,
    RunData,
    error_margin,
    gain,
    lineage,
    load_run,
    max_rel_l2_error,
    progress_series,
)
from kgen.agent.runs.run_end import read_stop, standing
from kgen.agent.runs.summary import (
    EvaluationTime,
    busy_line,
    evaluation_time,
    speedup_cell,
    top_level_phases,
)
from kgen.agent.search.operators import operator_stats
from kgen.core.text import counted

REPORT_FILE = "report.html"
SECTION_IDS = ("summary", "progress", "lineage", "margin", "operators", "kernels", "time", "cost")
#: a diff longer than this is cut (a model that rewrote everything needs no 2,000-line diff)
MAX_DIFF_LINES = 300
MAX_LINEAGE_NODES = 60
#: the charts a report may write beside its page (and nothing else is ever removed there)
CHART_FILES = ("report_progress.png", "report_margin.png")
esc = html.escape


@dataclass
class Section:
    id: str
    title: str
    body: str
    #: PNG file name -> bytes, written beside the page (and embedded in ``body``)
    images: dict[str, bytes] = field(default_factory=dict)


# -- small pieces ----------------------------------------------------------------------------

def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table of already-escaped cells."""
    head = "<thead><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr></thead>" if any(header) else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}">{head}<tbody>{body}</tbody></table>'


def _note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def _num(value: float | None, fmt: str = "{:.4g}") -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else fmt.format(value)


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _figure(name: str, png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}" data-file="{esc(name)}">'
            f"<figcaption>{esc(alt)} ({esc(name)})</figcaption></figure>")


def _verdict(record: CandidateRecord) -> str:
    if record.status == "no_code":
        return "no code"
    if record.status == "pending":
        return "pending"
    if record.passed:
        return "passed"
    return f"{record.verdict}: {record.rejection}" if record.rejection else str(record.verdict)


def _time(record: CandidateRecord) -> str:
    """The time as it counts for the candidate's target; one from another GPU says so."""
    if (time := record.time_on(record.target)) is not None:
        return f"{time:.4g} ms"
    if record.time_ms is not None:
        return f"{record.time_ms:.4g} ms on {record.device_name or 'another GPU'} (not {record.target})"
    return "not timed" if record.passed else "-"


def _speedup(record: CandidateRecord) -> str:
    if record.time_on(record.target) is None:
        return "-"
    return speedup_cell(record, "torch.compile", record.speedup_vs_compile)


def _who(record: CandidateRecord) -> str:
    return record.model or record.origin


# -- sections --------------------------------------------------------------------------------

def header_html(data: RunData) -> str:
    s, spec, opts = data.summary, data.spec, data.options
    rows = [
        ("request", s.request if s else opts.get("request", "")),
        ("problem", s.problem if s else spec.get("problem", "")),
        ("backend", s.backend if s else spec.get("backend", opts.get("backend") or "")),
        ("targets", ", ".join(data.targets)),
        ("device", data.device),
        ("mode", s.mode if s else ("models: " + ", ".join(opts.get("models", []))
                                   if opts.get("models") else "offline")),
        ("stop reason", (s.stop_reason or "-") if s else "unfinished"),
        ("candidates", f"{len(data.records)} ({sum(r.passed for r in data.records)} passed, "
                       f"{sum(r.verdict == 'rejected' for r in data.records)} rejected, "
                       f"{sum(r.status == 'no_code' for r in data.records)} without code, "
                       f"{sum(r.status == 'pending' for r in data.records)} pending)"),
        ("run directory", str(data.run.path)),
    ]
    parts = [f"<h1>kgen run {esc(data.run.run_id)}</h1>",
             _table(["", ""], [[esc(k), esc(str(v))] for k, v in rows], "meta")]
    if s is None:
        parts.append(unfinished_html(data))
    if not data.records:
        parts.append('<p class="warn" id="no-candidates">This run has no candidates yet.</p>')
    if s is not None:
        rejected = ", ".join(f"{k} {v}" for k, v in sorted(s.rejected.items()))
        if rejected:
            parts.append(_note(f"rejected: {rejected}"))
        parts += [_note(f"note: {n}") for n in s.notes]
    return "<header>" + "".join(parts) + "</header>"


def unfinished_html(data: RunData) -> str:
    """Why a run without a summary stopped and what to do, as `kgen runs` says it (one rule:
    ``run_end.standing``): a failed run that resuming cannot help is not told to resume."""
    stand = standing(data.run.path, resume=data.run.run_id)
    stop = read_stop(data.run.path)
    words = {"running": "is still running", "interrupted": "was interrupted", "failed": "failed"}
    text = (f"This run {words.get(stand.state, 'has not finished')} (no summary.json): what follows is what "
            f"it evaluated so far.")
    if stand.reason:
        text += f" Why: {esc(stand.reason)}."
    if stop is not None and stop.model:
        attempts = f", {counted(stop.attempts, 'request')} sent" if stop.attempts is not None else ""
        text += f" The model call: {esc(stop.model)} ({esc(stop.error_kind or stop.error_type)}{attempts})."
    if stand.hint:
        hint = stand.hint.replace("`", "")
        text += (f" Next: <code>{esc(hint)}</code>." if hint.startswith("kgen ") else f" Next: {esc(hint)}.")
    return f'<p class="warn" id="unfinished">{text}</p>'


def summary_section(data: RunData) -> Section:
    rows = []
    for r in data.records:
        margin = error_margin(data.evals[r.id]) if r.id in data.evals else None
        reason = f'<div class="reason">{esc(r.reason[:300])}</div>' if r.reason and not r.passed else ""
        rows.append([esc(r.id), str(r.generation), esc(r.target), esc(r.kind), esc(_who(r)),
                     f'<span class="v-{esc(r.verdict or r.status)}">{esc(_verdict(r))}</span>{reason}',
                     esc(_time(r)), esc(_speedup(r)), _num(margin, "{:.3g}")])
    body = (_table(["id", "gen", "target", "kind", "by", "verdict", "time", "vs torch.compile",
                    "error / tolerance"], rows) if rows else _note("no candidates"))
    return Section("summary", "All candidates", body)


def progress_section(data: RunData) -> Section:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    metric, series = progress_series(data.records, data.targets)
    if not any(series.values()):
        return Section("progress", "Progress", _note("no candidate was evaluated yet" if not any(
            r.status == "evaluated" for r in data.records) else "no candidate passed verification"))
    label = {"speedup": "best speedup over torch.compile (x)", "time": "best time (ms)",
             "verified": "verified kernels (count)"}[metric]
    fig = Figure(figsize=(8, 3.6))
    ax = fig.add_subplot()
    for target, points in series.items():
        if points:
            ax.step([p[0] for p in points], [p[1] for p in points], where="post", marker="o", label=target)
    if metric == "speedup":
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("candidates evaluated")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if metric == "verified":
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(label)
    ax.set_title(label if metric != "verified" else f"{data.untimed_reason}: verified kernels so far")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    png = _png(fig)
    parts = []
    if metric == "verified":
        parts.append(f'<p class="warn">{esc(data.untimed_reason)}: no speed to plot, so the chart '
                     "counts the kernels that passed verification as candidates were evaluated.</p>")
    elif metric == "time":
        parts.append(_note("no torch.compile baseline was measured: the chart shows the best time"))
    parts.append(_figure("report_progress.png", png, f"{label} vs candidates evaluated"))
    rows = [[esc(t), _num(p[-1][1]) if p else "-", str(p[-1][0]) if p else "-"] for t, p in series.items()]
    parts.append(_table(["target", f"final {label}", "reached after candidates"], rows))
    return Section("progress", "Progress", "".join(parts), {"report_progress.png": png})


def _diff(old: str, new: str, old_name: str, new_name: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, lineterm=""))
    if not lines:
        return '<pre class="diff">(same source)</pre>'
    more = len(lines) - MAX_DIFF_LINES
    out = []
    for line in lines[:MAX_DIFF_LINES]:
        cls = ("hunk" if line.startswith("@@") else "file" if line.startswith(("---", "+++"))
               else "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx")
        out.append(f'<span class="{cls}">{esc(line)}</span>')
    if more > 0:
        out.append(f'<span class="hunk">... {more} more diff line(s)</span>')
    return '<pre class="diff">' + "".join(out) + "</pre>"  # each line a block: no newlines between


def _node_label(node: LineageNode) -> str:
    r = node.record
    if node.is_kb:
        where = f", re-measured here as {r.id}" if r is not None else " (its source is not in this run)"
        return f"<b>{esc(node.ref)}</b> knowledge-base kernel{esc(where)}"
    if r is None:
        return f"<b>{esc(node.ref)}</b> (not in this run's candidates)"
    desc = f" — {esc(r.description)}" if r.description else ""
    return (f"<b>{esc(r.id)}</b> <span class=\"kind\">{esc(r.kind)}</span> by {esc(_who(r))}, "
            f"generation {r.generation}{desc}: {esc(_verdict(r))}, {esc(_time(r))}")


def _node_source(data: RunData, node: LineageNode) -> str | None:
    return data.sources.get(node.record.id) if node.record is not None else None


def _lineage_tree(data: RunData, node: LineageNode, target: str, budget: list[int]) -> str:
    """The node, then each parent with the diff parent -> node and the gain it brought."""
    budget[0] -= 1
    if node.repeated:
        return f"<li>{_node_label(node)} <i>(shown above)</i></li>"
    items = []
    for parent in node.parents:
        if budget[0] <= 0:
            items.append("<li><i>... lineage cut here</i></li>")
            break
        ratio = gain(parent.record, node.record, target)
        gained = f"gain {ratio:.3f}x (parent time / child time)" if ratio is not None else (
            f"gain {data.untimed_reason}" if data.device == "cpu" else "gain: not timed")
        old, new = _node_source(data, parent), _node_source(data, node)
        diff = (_diff(old, new, parent.ref, node.ref) if old is not None and new is not None
                else _note("no diff: a source is missing"))
        items.append(f'<li class="step"><details open><summary>{esc(parent.ref)} &rarr; {esc(node.ref)}: '
                     f'<span class="gain">{esc(gained)}</span></summary>{diff}</details>'
                     f"<ul>{_lineage_tree(data, parent, target, budget)}</ul></li>")
    made = (f"<div class=\"made\">made from {len(node.parents)} parent(s):</div><ul>{''.join(items)}</ul>"
            if items else "")
    return f"<li>{_node_label(node)}{made}</li>"


def lineage_section(data: RunData) -> Section:
    parts = []
    for target in data.targets:
        winner = data.winner(target)
        tree = lineage(data.records, winner) if winner else None
        parts.append(f"<h3>{esc(target)}</h3>")
        if tree is None:
            parts.append(_note("no verified kernel for this target"))
            continue
        if data.summary is None:
            parts.append(_note("the run has not finished: this is the best kernel so far"))
        parts.append(f'<ul class="tree">{_lineage_tree(data, tree, target, [MAX_LINEAGE_NODES])}</ul>')
    if data.focus is not None:
        focus = next((r for r in data.records if r.id == data.focus), None)
        tree = lineage(data.records, data.focus) if focus else None
        parts.append(f'<h3 id="focus">lineage of {esc(data.focus)}</h3>')
        parts.append(_note(f"no candidate {data.focus} in this run") if tree is None else
                     f'<ul class="tree">{_lineage_tree(data, tree, focus.target, [MAX_LINEAGE_NODES])}</ul>')
    return Section("lineage", "Winner's lineage", "".join(parts) or _note("no targets"))


def margin_section(data: RunData) -> Section:
    from matplotlib.figure import Figure

    points = [(r, m) for r in data.records if r.id in data.evals
              and (m := error_margin(data.evals[r.id])) is not None]
    if not points:
        return Section("margin", "Speed vs verification margin",
                       _note("no candidate reached a numerical comparison"))
    timed = [r for r, _ in points if r.time_on(r.target) is not None]
    y_kind = ("speedup" if any(r.speedup_vs_compile is not None for r in timed)
              else "time" if timed else "none")
    fig = Figure(figsize=(8, 3.8))
    ax = fig.add_subplot()
    finite = [m for _, m in points if math.isfinite(m) and m > 0]
    floor = min(finite) / 2 if finite else 1e-6
    colours = {"passed": "tab:green", "rejected": "tab:red"}
    for index, (r, m) in enumerate(points):
        if not math.isfinite(m):
            continue
        y = {"speedup": r.speedup_vs_compile if r.time_on(r.target) is not None else None,
             "time": r.time_on(r.target), "none": float(index)}[y_kind]
        if y is None:
            continue
        ax.scatter([max(m, floor)], [y], color=colours.get(r.verdict or "", "tab:grey"), s=30)
        if y_kind != "none":  # untimed: the candidates' ids are the y axis already
            ax.annotate(r.id, (max(m, floor), y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlim(right=max([1.0, *finite]) * 2)  # the tolerance line always in view
    ax.axvline(1.0, color="tab:red", linestyle="--", linewidth=1)
    ax.set_xlabel("max relative L2 error / tolerance (right of the dashed line fails; "
                  "exact results at the left edge)")
    if y_kind == "none":
        ax.set_yticks(range(len(points)), [r.id for r, _ in points], fontsize=7)
    ax.set_ylabel({"speedup": "speedup over torch.compile (x)", "time": "time (ms)",
                   "none": f"candidate ({NO_GPU if data.device == 'cpu' else 'not timed'})"}[y_kind])
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = _png(fig)
    parts = []
    if y_kind == "none":
        parts.append(f'<p class="warn">{esc(data.untimed_reason)}: the chart shows each candidate\'s '
                     "verification margin only.</p>")
    parts.append(_figure("report_margin.png", png, "speed vs verification margin"))
    rows = []
    for r, m in points:
        result = data.evals[r.id]
        rows.append([esc(r.id), esc(_verdict(r)), _num(max_rel_l2_error(result), "{:.3g}"),
                     _num(m, "{:.3g}") + (" (non-finite output)" if math.isinf(m) else ""),
                     str(len(result.trials)), esc(_time(r)), esc(_speedup(r))])
    parts.append(_table(["id", "verdict", "max rel. L2 error", "error / tolerance", "trials", "time",
                         "vs torch.compile"], rows))
    return Section("margin", "Speed vs verification margin", "".join(parts), {"report_margin.png": png})


def operators_section(data: RunData) -> Section:
    stats = operator_stats(data.records)
    if not stats:
        return Section("operators", "Operators", _note(
            "no operator was used: only known kernels were re-measured" if data.records else "no candidates"))
    rows = []
    for name, s in stats.items():
        rate = s.success_rate
        rows.append([esc(name), str(s.tried), str(s.passed), _num(s.passed / s.tried if s.tried else None, "{:.0%}"),
                     str(s.improved), _num(rate, "{:.0%}") if rate is not None else esc(
                         f"not judged ({data.untimed_reason})")])
    body = _table(["operator", "tried", "passed", "pass rate", "improved", "success rate (recent)"], rows)
    return Section("operators", "Operators", body + _note(
        "improved: passed and faster on its target than its best parent (or the best kernel "
        "before its generation) by more than the timing noise; re-measures of known kernels "
        "are the reference, not an operator's work"))


def _highlight(source: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return f'<pre class="code">{esc(source)}</pre>'
    # noclasses: inline styles, so the page needs no stylesheet of pygments' own
    return highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=False, style="default"))


def kernels_section(data: RunData) -> Section:
    parts = []
    for target in data.targets:
        parts.append(f"<h3>{esc(target)}</h3>")
        best = data.summary.best.get(target) if data.summary is not None else None
        source = None
        if best is not None:
            module = Path(best.module)
            try:
                source = module.read_text() if module.is_file() else None
            except OSError:
                source = None
            source = source or data.sources.get(best.candidate)
            timing = best.timing_note or (f"{best.time_ms:.4g} ms on {best.device_name}"
                                          if best.time_ms is not None else "not timed")
            ev = best.evidence
            parts.append(_table(["", ""], [[esc(k), esc(v)] for k, v in (
                ("candidate", f"{best.candidate} ({best.origin}) {best.description}"),
                ("module", best.module), ("time", timing),
                ("vs torch.compile", speedup_cell(best, "torch.compile", best.speedup_vs_compile)),
                ("verified", f"{ev.trials} trials, {len(ev.seeds)} seeds, {len(ev.shapes)} shapes, "
                             f"{len(ev.distributions)} distributions on {ev.device}"),
                ("compile report", "; ".join(best.compile_report) or "-"))], "meta"))
        elif (winner := data.winner(target)) is not None:
            parts.append(_note(f"the run has not finished: best kernel so far, {winner}"))
            source = data.sources.get(winner)
        else:
            parts.append(_note("no verified kernel for this target"))
            continue
        parts.append(_highlight(source) if source is not None else _note("its source is missing"))
    return Section("kernels", "Final kernels", "".join(parts) or _note("no targets"))


def cost_section(data: RunData) -> Section:
    ledger = data.usage
    if not ledger.models:
        text = ("offline: no model calls" if not data.options.get("models")
                else "no model call was made (or none was recorded)")
        return Section("cost", "Model cost", _note(text))
    rows = [[esc(label), str(u.calls), str(u.input_tokens), str(u.output_tokens), _num(u.seconds, "{:.1f}"),
             (_num(u.cost_usd, "${:.4f}") if u.cost_usd is not None else "unpriced")
             + (f" ({u.unpriced_calls} unpriced)" if u.unpriced_calls and u.cost_usd is not None else "")]
            for label, u in ledger.models.items()]
    rows.append(["<b>total</b>", str(ledger.total_calls),
                 str(sum(u.input_tokens for u in ledger.models.values())),
                 str(sum(u.output_tokens for u in ledger.models.values())),
                 _num(sum(u.seconds for u in ledger.models.values()), "{:.1f}"),
                 f"${ledger.total_cost_usd:.4f}"])
    body = _table(["model", "calls", "tokens in", "tokens out", "seconds", "cost (USD)"], rows)
    return Section("cost", "Model cost", body + _note(
        f"costs use list prices as of {PRICES_AS_OF}; a model without a known price (a local or "
        "proxied server) is counted, never given an invented cost"))


def time_section(data: RunData) -> Section:
    """Where the evaluations' seconds went, phase by phase (nested phases under their own),
    and how busy they kept the GPU: the summary's figures, or for an unfinished run the
    figures of the evaluations saved so far."""
    spent = (EvaluationTime.model_validate(data.summary.model_dump(include=set(EvaluationTime.model_fields)))
             if data.summary is not None and data.summary.phase_seconds
             else evaluation_time(list(data.evals.values())))
    if not spent.phase_seconds:
        return Section("time", "Evaluation time", _note("no evaluation recorded a timeline"))
    total = sum(top_level_phases(spent.phase_seconds).values()) or 1.0
    rows = [[("&nbsp;&nbsp;" * name.count(".")) + esc(name), _num(seconds, "{:.2f}"), f"{100 * seconds / total:.0f}%"]
            for name, seconds in spent.phase_seconds.items()]
    return Section("time", "Evaluation time", _table(["phase", "seconds", "share"], rows) + _note(busy_line(spent)))


SECTIONS = (summary_section, progress_section, lineage_section, margin_section, operators_section,
            kernels_section, time_section, cost_section)

# -- the page --------------------------------------------------------------------------------

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f4f4f4}table.meta td:first-child{font-weight:600}
.note{color:#555}.warn{background:#fff4d6;border-left:4px solid #e0a800;padding:.4em .8em}
.reason{color:#666;font-size:.85em;max-width:40em;white-space:pre-wrap}
.v-passed{color:#176c2a;font-weight:600}.v-rejected{color:#a61b1b}
pre,.highlight{font:12px/1.35 ui-monospace,monospace;overflow-x:auto;padding:.6em;background:#f8f8f8}
pre.diff span{display:block;white-space:pre}.add{background:#e6ffec}.del{background:#ffebe9}
.hunk{color:#6639ba}.file{color:#555;font-weight:600}ul.tree,ul.tree ul{list-style:none;padding-left:1.2em;
border-left:1px dotted #bbb}.gain{font-weight:600}.kind{background:#eef;padding:0 4px;border-radius:3px}
figure{margin:.5em 0}img{max-width:100%}nav a{margin-right:1em}
"""

#: the page's only script: it records whether every chart decoded (a headless browser test reads it)
CHECK_SCRIPT = """window.addEventListener('load', function () {
  var images = Array.prototype.slice.call(document.images);
  var ok = images.filter(function (img) { return img.complete && img.naturalWidth > 0; }).length;
  var mark = document.getElementById('render-check');
  mark.setAttribute('data-images-ok', String(ok));
  mark.setAttribute('data-images-total', String(images.length));
  mark.textContent = 'charts decoded: ' + ok + '/' + images.length;
  document.body.setAttribute('data-rendered', ok === images.length ? 'ok' : 'broken');
});"""


def _policy() -> str:
    digest = base64.b64encode(hashlib.sha256(CHECK_SCRIPT.encode()).digest()).decode()
    return ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
            f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'")


def render_html(data: RunData, sections: list[Section]) -> str:
    nav = "".join(f'<a href="#{s.id}">{esc(s.title)}</a>' for s in sections)
    body = "".join(f'<section id="{s.id}"><h2>{esc(s.title)}</h2>{s.body}</section>' for s in sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_policy()}">'
        f"<title>kgen run {esc(data.run.run_id)}</title><style>{STYLE}</style></head><body>"
        f"{header_html(data)}<nav>{nav}</nav>{body}"
        '<footer><p class="note" id="render-check">charts not checked (scripts off)</p></footer>'
        f"<script>{CHECK_SCRIPT}</script></body></html>\n"
    )


def write_report(run_path: Path, out: Path | None = None, candidate: str | None = None) -> Path:
    """Write ``report.html`` (and its charts as ``report_*.png`` beside it) into the run
    directory, or into ``out`` (a directory, or a file name ending in .html); returns the page.
    ``candidate``: also trace that candidate's lineage (how a kernel other than the winner
    came about: on a CPU, where nothing is timed, the winner is the first verified kernel)."""
    data = load_run(run_path)
    data.focus = candidate
    page = Path(out).expanduser() if out is not None else data.run.path
    if page.suffix.lower() != ".html":
        page = page / REPORT_FILE
    page.parent.mkdir(parents=True, exist_ok=True)
    sections = [build(data) for build in SECTIONS]
    images = {name: png for s in sections for name, png in s.images.items()}
    for name in CHART_FILES:
        if name not in images:  # a chart an earlier report had and this one has not
            (page.parent / name).unlink(missing_ok=True)
    for name, png in images.items():
        (page.parent / name).write_bytes(png)
    page.write_text(render_html(data, sections), encoding="utf-8")
    return page
