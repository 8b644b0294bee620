"""Human-readable rendering of results for the terminal (the JSON is the machine form)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from kgen.cli.terminal import new_table, print_table
from kgen.core.units import byte_size
from kgen.evals.result import EvalResult
from kgen.evals.verdict import InconclusiveCause, StageStatus

if TYPE_CHECKING:
    from kgen.agent.llm.model_calls import ModelCall

#: Distribution names shortened in the trials table, so its columns fit an 80-column terminal.
_SHORT_DISTRIBUTION = {
    "normal": "own", "standard_normal": "N(0,1)",
    "accumulation_probe": "accum_probe", "sparse_spikes": "spikes", "far_negative": "far_neg", "near_negative": "near_neg", "far_positive": "far_pos",
}

#: the trials table's columns: all but the inputs (a distribution and its arguments) stay whole
_TRIAL_COLUMNS = ("seed", "inputs", "sizes", "kernels", "rel-L2", "tol", "eager", "ok")

_STATUS_STYLE = {
    StageStatus.PASSED: "[green]passed[/]",
    StageStatus.FAILED: "[bold red]FAILED[/]",
    StageStatus.SKIPPED: "[yellow]skipped[/]",
}


def verdict_line(result: EvalResult) -> str:
    """The verdict as Rich markup: only the verdict word is styled; the words around it are
    escaped, because a reason quoting ``out[i]`` would otherwise lose ``[i]`` to Rich."""
    where = result.device.upper()
    if result.device == "cpu":
        from kgen.backends.registry import backend_info

        info = backend_info(result.backend)
        where = f"CPU ({info.label} interpreter)" if info.runs_on_cpu else "CPU (compiled only)"
    what = escape(f"{result.problem} ← {result.candidate} on {where}: {result.reason}")
    if result.passed:
        return f"[bold green]PASSED[/] {what}"
    if result.inconclusive is InconclusiveCause.COMPILED_NOT_RUN:
        return f"[bold yellow]COMPILED, NOT RUN[/] {what}"
    if result.inconclusive is not None:
        return f"[bold yellow]INCONCLUSIVE[/] ({result.inconclusive.value}) {what}"
    return f"[bold red]REJECTED[/] ({result.rejection.value if result.rejection else 'unknown'}) {what}"


def print_eval_result(result: EvalResult, console: Console) -> None:
    stages = new_table("stages", "stage", "status", "seconds", "detail", whole=("stage", "status", "seconds"))
    for stage in result.stages:
        stages.add_row(stage.name, _STATUS_STYLE[stage.status], f"{stage.seconds:.1f}", escape(stage.message))
    print_table(stages, console)
    if result.trials:
        trials = new_table("correctness trials: rel-L2 error vs the fp64 reference (worst output); inputs own = the "
                           "problem's own get_inputs(); eager = the reference in the problem's own dtypes",
                           *_TRIAL_COLUMNS, whole=_TRIAL_COLUMNS[:1] + _TRIAL_COLUMNS[3:])
        for trial in result.trials:
            sizes = "x".join(str(v) for v in trial.sizes.values())
            varied = "".join(f" {k}={v!r}" for k, v in trial.arguments.items())
            if not trial.outputs:
                trials.add_row(str(trial.seed), _SHORT_DISTRIBUTION.get(trial.distribution, trial.distribution) + varied, sizes, str(trial.launches), "-", "-", "-", "[red]no[/]")
                continue
            worst = max(trial.outputs, key=lambda o: o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300))
            native = worst.reference_dtype_rel_l2_error
            trials.add_row(
                str(trial.seed), _SHORT_DISTRIBUTION.get(trial.distribution, trial.distribution) + varied, sizes,
                str(trial.launches), _rel_l2_cell(worst.rel_l2_error),
                f"{worst.tolerance_rel_l2:.0e}", "-" if native is None else f"{native:.1e}",
                "[green]yes[/]" if trial.passed else "[red]no[/]",
            )
        print_table(trials, console)
    for note in result.skipped:
        console.print(f"[yellow]skipped:[/] {escape(note)}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if result.kernels:
        columns = ("target", "kernel", "regs", "spills", "smem", "warps", "stages", "ok")
        kernels = new_table("cross-compiled kernels", *columns, whole=columns[:-1])
        for k in result.kernels:
            kernels.add_row(
                k.target, k.kernel, _opt(k.registers), _opt(k.spills),
                "-" if k.shared_bytes is None else byte_size(k.shared_bytes), _opt(k.num_warps),
                _opt(k.num_stages), "[green]yes[/]" if k.ok else f"[red]no[/] {escape(k.error or '')}",
            )
        print_table(kernels, console)
    if result.bench is None:
        console.print("timing: not measured (`--bench` on a GPU measures it; kgen reports only measured figures)")
    else:
        for line in result.bench.lines():
            console.print(f"timing: {escape(line)}", highlight=False, soft_wrap=True)
    console.print(verdict_line(result), highlight=False, soft_wrap=True)


def _rel_l2_cell(error: float) -> str:
    """A rel-L2 error for the table: an infinite one means the reference is zero there (no
    relative error exists), and says so instead of "inf"."""
    return "ref=0" if error == float("inf") else f"{error:.1e}"


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


class RunStatusLine:
    """The live line under a run's event lines: the run's clock, its latest step, and the model
    calls it is waiting on (which model, for which candidates, how long of how long).

    A Rich renderable computed afresh at every refresh (``__rich__``), so under a spinner that
    refreshes by itself the clock moves and the waits grow while no event comes; the event
    lines alone once froze for the 25 s the models took. ``clock`` and ``calls`` are
    injectable: by default ``time.monotonic`` and the process's calls in flight
    (``kgen.agent.llm.model_calls.calls_in_flight``).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 calls: Callable[[], Sequence[ModelCall]] | None = None,
                 started: float | None = None) -> None:
        if calls is None:
            from kgen.agent.llm.model_calls import calls_in_flight

            calls = calls_in_flight
        self._clock = clock
        self._calls = calls
        self.started = clock() if started is None else started
        self.latest = "starting …"

    def event(self, line: str) -> None:
        """The run's latest step (an event line)."""
        self.latest = line

    def elapsed(self) -> float:
        return self._clock() - self.started

    def text(self) -> str:
        now = self._clock()
        parts = [clock_text(now - self.started), _shorten(self.latest, 70)]
        parts.extend(waiting_text(self._calls(), now))
        return " · ".join(parts)

    def __rich__(self) -> Text:
        return Text(self.text(), no_wrap=True, overflow="ellipsis")


def waiting_text(calls: Sequence[ModelCall], now: float) -> list[str]:
    """One phrase per model being waited on: ``waiting on openai:gpt-5 for g0-c01, g0-c02:
    12 s of 300 s`` (the longest wait, of its call's deadline), oldest first."""
    by_model: dict[str, list[ModelCall]] = {}
    for call in calls:
        by_model.setdefault(call.label, []).append(call)
    phrases = []
    for label, group in by_model.items():
        oldest = min(group, key=lambda call: call.started)
        purposes = ", ".join(call.purpose for call in group if call.purpose) or "a call"
        bound = "run ends" if oldest.bound == "run_time" else "deadline"
        attempts = max(call.attempts for call in group)
        retry = f", attempt {attempts}" if attempts > 1 else ""
        phrases.append(f"waiting on {short_label(label)} for {purposes}: "
                       f"{clock_text(now - oldest.started)} of {clock_text(oldest.deadline - oldest.started)}"
                       f" ({bound}{retry})")
    return phrases


def short_label(label: str) -> str:
    """A model label for a one-line status: no key variable, the server as host:port."""
    label = label.split("#", 1)[0]
    name, at, url = label.partition("@")
    if not at:
        return name
    return f"{name}@{urlsplit(url).netloc or url}"


def clock_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} m {seconds % 60:02d} s"


def _shorten(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"
