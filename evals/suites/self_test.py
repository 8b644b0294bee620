"""The harness self-test: can kgen's own checks run every problem of a suite?

Each problem's reference is evaluated as the candidate (``ModelNew = Model``) with the
rules that demand a kernel switched off and every correctness check on. A problem that
does not pass this way is kgen's limit, not a candidate's: a verdict on a real candidate
for it would mean nothing. ``kgen bench --self-test SUITE`` runs it and writes
``self_test.md`` row by row, so an interrupted run keeps what it measured; the rows are also
kept in ``self_test.jsonl``, and the same command again skips the problems already judged
(a level folder at full size is hours of GPU time, done in several sittings).
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from kgen.backends.device import Device, resolve_device
from kgen.evals.executors.jobs import EvalJob
from kgen.evals.executors.session import executor_for
from kgen.evals.harness import EvalOptions
from kgen.evals.problem.format import ProblemInfo
from kgen.evals.result import EvalResult
from kgen.evals.timing.baseline_cache import file_digest

SELF_TEST_SUFFIX = "\n\n# kgen self-test: the problem's reference is the candidate\nModelNew = Model\n"


class SelfTestRow(BaseModel):
    problem: str
    outcome: str
    seconds: float
    #: the device's peak over the evaluation (None on a CPU run)
    peak_bytes: int | None = None
    peak_ratio: float | None = None
    reason: str = ""
    #: the problem file the row judged: a row is reused only for the same file, unchanged
    digest: str = ""
    #: where it ran (``host/lane``, ``Placement.label``); "" in rows written before
    lane: str = ""


#: The rows, one JSON object per line, appended as each problem finishes.
ROWS_FILE = "self_test.jsonl"


def self_test_candidate(info: ProblemInfo, folder: Path) -> Path:
    """The problem file itself, unchanged, with ``ModelNew = Model`` appended."""
    path = folder / f"{info.path.stem}_self_test.py"
    path.write_text(info.path.read_text() + SELF_TEST_SUFFIX)
    return path


def row_from(info: ProblemInfo, result: EvalResult) -> SelfTestRow:
    memory = result.memory
    return SelfTestRow(
        problem=info.name, outcome=result.outcome, seconds=round(result.seconds, 2),
        peak_bytes=memory.peak_bytes if memory else None, peak_ratio=memory.peak_ratio if memory else None,
        reason="" if result.passed else result.reason.splitlines()[0][:200] if result.reason else "",
        digest=file_digest(info.path), lane=result.placement.label if result.placement else "",
    )


def earlier_rows(out: Path, device: Device) -> dict[str, SelfTestRow]:
    """Rows an earlier run of the same self-test wrote (``ROWS_FILE``), by problem name: those of
    this device kind only (a CPU row says nothing about the GPU's memory), the last per problem.
    A line that cannot be read is skipped: that problem is judged again."""
    path = out / ROWS_FILE
    rows: dict[str, SelfTestRow] = {}
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
            row = SelfTestRow.model_validate(entry["row"])
        except (ValueError, KeyError, TypeError):
            continue
        if entry.get("device") == device:
            rows[row.problem] = row
    return rows


def render(rows: Sequence[SelfTestRow], command: str, device: Device) -> str:
    passed = sum(r.outcome == "passed" for r in rows)
    lines = [f"# Harness self-test ({device})", "", f"Command: `{command}`", "",
             f"{passed} of {len(rows)} problems passed with their own reference as the candidate.", "",
             "| problem | outcome | seconds | device peak GB | peak / (inputs + outputs) | reason |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        peak = f"{r.peak_bytes / 1e9:.2f}" if r.peak_bytes is not None else "not measured (CPU)"
        ratio = f"{r.peak_ratio:.2f}x" if r.peak_ratio is not None else ""
        lines.append(f"| {r.problem} | {r.outcome} | {r.seconds:.1f} | {peak} | {ratio} | {r.reason.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def run_self_test(
    infos: Sequence[ProblemInfo],
    options: EvalOptions,
    out: Path,
    command: str,
    progress: Callable[[str], None] | None = None,
) -> list[SelfTestRow]:
    """Self-test every problem in turn; ``out/self_test.md`` is rewritten after each one.

    A problem judged by an earlier run into the same ``out`` on the same kind of device, from
    the same file, keeps its row (marked in the progress line) and is not run again. A run
    kgen itself cut short (a signal, its exit) leaves no row: the next run judges it."""
    device = resolve_device(options.device)  # once for the suite; each row says where it ran
    options = options.model_copy(update={"reference_self_test": True, "device": device})
    out.mkdir(parents=True, exist_ok=True)
    kept = earlier_rows(out, device)
    rows: dict[str, SelfTestRow] = {}
    for info in infos:
        row = kept.get(info.name)
        if row is not None and row.digest == file_digest(info.path):
            rows[info.name] = row
    todo = [info for info in infos if info.name not in rows]
    lock = threading.Lock()
    heard = [0]

    def record(info: ProblemInfo, row: SelfTestRow, earlier: bool) -> None:
        with lock:
            rows[info.name] = row
            heard[0] += 1
            (out / "self_test.md").write_text(render([rows[i.name] for i in infos if i.name in rows], command, device))
            if progress is not None:
                progress(f"[{heard[0]}/{len(infos)}] {info.name:40s} {row.outcome:12s} {row.seconds:6.1f} s "
                         f"{'(kept from an earlier run) ' if earlier else _where(row)}{row.reason[:80]}")

    for info in infos:
        if info.name in rows:
            record(info, rows[info.name], earlier=True)

    def heard_result(index: int, result: EvalResult) -> None:
        if result.cut_short:
            return  # kgen is stopping: nothing to say about this problem
        row = row_from(todo[index], result)
        with lock, (out / ROWS_FILE).open("a") as rows_file:
            rows_file.write(json.dumps({"device": device.value, "row": row.model_dump()}) + "\n")
        record(todo[index], row, earlier=False)

    with tempfile.TemporaryDirectory(prefix="kgen-self-test-") as folder:
        jobs = [EvalJob.of(info.path, self_test_candidate(info, Path(folder)), options) for info in todo]
        # each problem alone on its lane (its peak memory is its own); problems over every lane
        executor = executor_for(device, options.targets)
        if progress is not None and len(executor.lanes()) > 1 and jobs:
            progress(f"{len(jobs)} problems over {executor.describe()}")
        executor.evaluate(jobs, on_result=heard_result, together=False)
    return [rows[info.name] for info in infos if info.name in rows]


def _where(row: SelfTestRow) -> str:
    return f"[{row.lane}] " if row.lane else ""
