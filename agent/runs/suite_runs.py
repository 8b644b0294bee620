"""Suite mode: kgen's agent over every problem of a folder, then one fast_p table.

``kgen solve SUITE_DIR`` runs the main job (``runs.start.start_run``) once per problem file of a
folder (a KernelBench level folder works: ``evals/suites/suite.py`` finds the problems), each with
the same run options and its own budget, and ends with ``kgen bench``'s table: fast_p
against eager and ``torch.compile`` over *every* problem of the suite (a problem without a
verified kernel is a failed row that stays in the denominator) and a report index.

The output folder's files are ``suite_state.py``'s; its table rows and index page are
``suite_index.py``'s.

Resume rules (run ``solve`` again with the same ``--out``):

* a **finished** problem (its run ended and wrote ``summary.json``) is skipped and its run
  directory left untouched, whatever its outcome; delete ``runs/<problem>`` to redo it;
* an **interrupted** one (or one still marked **running**: the suite process was killed)
  is resumed with ``runs.start.resume_run`` when its run directory holds a LangGraph checkpoint
  (paid model replies and finished evaluations are reused), else started afresh;
* offline, a problem to start that the library cannot serve (``suite_library.py``: no
  knowledge-base kernel of its own or of an operation with the same reference) is said up
  front, marked **unserved** with its reason and not started (no run folder); the next
  ``solve`` screens it again;
* a **failed** one (the run raised ``RunError``: a missing key, an unreachable server, ...)
  is tried again: resumed if it failed mid-search with candidates to keep, else started afresh, since resuming would only meet the same error
  (``runs.run_end.standing`` decides both, as `kgen runs` lists them; a kept directory is moved
  aside to ``runs/<problem>.attempt-<n>`` first, never deleted);
* a **pending** one, including a problem added to the folder since, is started;
* a problem whose file left the folder stays in ``suite.json`` but not in the table;
* a problem file kgen cannot read (a syntax error, a missing ``Model``) gets no run: it is an
  "unreadable" row of the table with the reason, in the denominator, so the suite cannot
  end "all verified" with it (``evals.suites.suite.unreadable_rows``).

One problem's failure never stops the suite: a ``RunError`` (or any other error of one
run) marks that problem failed with the message, and the suite goes on. ``KeyboardInterrupt``
(and ``SystemExit`` from SIGTERM / SIGHUP) marks the problem(s) in progress interrupted,
writes ``suite.json`` and goes on up.

Parallelism. The executor (``evals/executors/``, ``--executor``) says how many GPUs there are.

* With one GPU (the run's device resolves to ``cuda``) problems run **one at a time**: a
  timing taken while another problem's kernels run on the same GPU would be wrong (a run
  itself times its candidates one at a time for the same reason). ``--jobs`` is ignored
  and the log says so.
* With several (every GPU of the host, or a Ray cluster's), one problem per GPU runs at
  once: their candidates share one queue over the lanes, and each lane times one
  candidate at a time alone on its GPU.
* On the CPU (verification only, no timings) up to ``jobs`` problems run at once, as
  **threads** of this process: a run's heavy work (verifying candidates in Triton's
  interpreter) happens in its sandboxed verifier child processes, so the threads mostly
  wait and the GIL costs nothing; threads share the knowledge base client (its writes take
  an OS file lock), hand progress lines straight to ``progress`` and need no pickling of
  options or keys. Each run has its own directory, checkpoint database and lock. On an
  interrupt, SIGINT's handler (``evals/sandbox/lifecycle.py``, installed here from the main
  thread) has already ended every verifier; the other runs stop at their next event line,
  and any run not stopped within ``STOP_GRACE_S`` is marked interrupted all the same.

How the CLI calls it (``kgen solve SUITE_DIR [--out DIR] [--jobs N] [--only NAME]...`` plus
``kgen run``'s flags: models, ``--budget`` per problem, targets, device, ...)::

    from kgen.agent.runs.suite_runs import solve_suite
    from kgen.api import api_keys, run_options

    # request and problem_file are set per problem: the template's are placeholders
    template, settings = run_options("", {...the run flags...}, seed=seed, persist=persist)
    with LiveProgress() as progress:               # kgen/cli/run.py's live event lines
        outcome = solve_suite(suite_dir, template, out=out or Path("kgen-solve"), jobs=jobs,
                              progress=progress, api_keys=api_keys(settings), only=only or None,
                              command=shlex.join(["kgen", "solve", *sys.argv[2:]]))
    # catch RunError (SuiteError is one: bad folder, bad --only, an --out of another suite),
    # RunInUseError (another kgen solve on that --out) -> exit 2; KeyboardInterrupt -> 130
    # (the progress said that `kgen solve` with the same --out resumes).
    # Then print the selected rows (outcome.selected; every row when None) or outcome.table["md"],
    # and the paths of outcome.table["md"] and outcome.index. Exit outcome.summary.exit_code:
    # 0 when every selected problem has a verified kernel, else 1.
"""

from __future__ import annotations

import datetime as _dt
import shutil
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kgen.agent.run_directory import (
    LOCK_FILE,
    RUN_FILE,
    RunDirectory,
    write_atomic,
)
from kgen.agent.run_options import RunOptions
from kgen.agent.runs.run_end import standing
from kgen.agent.runs.single_run import validate_options
from kgen.agent.runs.suite_index import outcome_line, render_index, row_from_run, state_row
from kgen.agent.runs.suite_library import LibraryScreenError, screen_lines, screen_suite
from kgen.agent.runs.suite_state import (
    INDEX_FILE,
    LOG_FILE,
    REPORT_FILE,
    RUNS_DIR,
    STATE_FILE,
    SUMMARY_FILE,
    TABLE_DIR,
    SuiteProblem,
    SuiteRun,
    now_utc,
    relative_path,
)
from kgen.agent.search.graph import Progress, RunError
from kgen.backends.device import resolve_device
from kgen.core.text import counted
from kgen.errors import KgenUsageError
from kgen.evals.executors.session import ExecutorChoice, choose, executor_for
from kgen.evals.problem.catalog import close_names
from kgen.evals.problem.format import ProblemInfo
from kgen.evals.sandbox.lifecycle import install_signal_handlers, kill_registered
from kgen.evals.suites.suite import (
    SuiteRow,
    SuiteSummary,
    fast_figures,
    in_suite_order,
    is_other_module,
    scan_suite,
    summarize,
    unreadable_rows,
    write_suite_outputs,
)

#: after an interrupt, how long the other problems' threads get to stop at their next event
STOP_GRACE_S = 15.0


class SuiteError(RunError):
    """A suite that cannot start for a reason the user can fix (no problems, an unknown
    ``only`` name, an output folder that holds another suite's runs)."""


class SuiteOutcome(BaseModel):
    """What ``solve_suite`` returns: the fast_p summary, one row per problem of the suite,
    each problem's state, and where the table, the index and the state are."""

    out: Path
    summary: SuiteSummary
    rows: list[SuiteRow]
    #: the problems ``only`` selected (they decide the exit code); None: every problem
    selected: list[str] | None = None
    problems: list[SuiteProblem]
    #: {"md", "csv", "svg", "json"} -> path, from ``evals.suites.write_suite_outputs``
    table: dict[str, Path]
    index: Path
    state: Path

    @property
    def markdown(self) -> Path:
        return self.table["md"]


# --------------------------------------------------------------------------- helpers


def _dir_name(name: str) -> str:
    """A problem name as a folder name (KernelBench names already are)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).strip(".")
    return safe or "problem"


# --------------------------------------------------------------------------- solving


class _Suite:
    """One ``solve``: the state, the lock that guards it, and the runs."""

    def __init__(self, out: Path, state: SuiteRun, template: RunOptions, progress: Progress | None,
                 api_keys: dict[str, str] | None) -> None:
        self.out = out
        # the suite folder, not runs/: a run's own "interrupted: `kgen resume ...`" hint then
        # names the run by its path, which works from anywhere (an id would be looked up in
        # $KGEN_HOME/runs)
        self.runs_dir = out
        self.state = state
        self.template = template
        self.progress = progress
        self.api_keys = api_keys
        self.lock = threading.RLock()
        self.progress_lock = threading.Lock()
        self.stop = threading.Event()
        self.worker_error: BaseException | None = None
        self.reported: set[str] = set()
        self.report_unavailable: str | None = None

    # -- lines -----------------------------------------------------------------------

    def say(self, line: str) -> None:
        """A suite line: suite.log and the progress."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%H:%M:%S")
        with self.progress_lock:
            with open(self.out / LOG_FILE, "a") as handle:
                handle.write(f"{stamp} {line}\n")
            if self.progress is not None:
                self.progress(line)

    def run_progress(self, name: str) -> Callable[[str], None]:
        """A run's event lines, named for the problem (they are in the run's events.log too).
        Once the suite is stopping, a run's next line stops it (threads cannot be signalled)."""
        def emit(line: str) -> None:
            if self.stop.is_set():
                raise KeyboardInterrupt
            if self.progress is not None:
                with self.progress_lock:
                    self.progress(f"{name}: {line}")
        return emit

    def save(self) -> Path:
        with self.lock:
            return self.state.save(self.out)

    # -- one problem -----------------------------------------------------------------

    def next_step(self, entry: SuiteProblem) -> Literal["skip", "resume", "start"]:
        path = self.out / entry.run_dir
        if not (path / RUN_FILE).is_file():
            return "start"
        finished_run = (path / SUMMARY_FILE).is_file()
        if finished_run:
            if entry.status == "finished":
                return "skip"
            # a run that ended after the suite last wrote its state: resuming only reads it back;
            # one that ended failing (no model returned code) is retried from the start
            return "start" if entry.status == "failed" else "resume"
        # the one rule of what resuming can take further (``run_end.standing``), as `kgen runs` lists it
        return "resume" if standing(path).resumable else "start"

    def clear(self, entry: SuiteProblem) -> None:
        """Room for a fresh run: a directory holding nothing to inspect is removed, one that
        holds model replies or candidates is moved aside (``runs/<name>.attempt-<n>``)."""
        path = self.out / entry.run_dir
        if not path.exists():
            return
        if RunDirectory(path).holds_results() or (path / SUMMARY_FILE).is_file():
            n = 1
            while (aside := path.with_name(f"{path.name}.attempt-{n}")).exists():
                n += 1
            path.rename(aside)
            self.say(f"{entry.name}: previous run moved to {relative_path(aside, self.out)}")
        else:
            shutil.rmtree(path, ignore_errors=True)

    def solve_one(self, entry: SuiteProblem, step: str, position: int, total: int,
                  infos: dict[str, ProblemInfo]) -> None:
        """Start or resume one problem's run and record how it ended. KeyboardInterrupt and
        SystemExit mark it interrupted and go on up; every other error marks it failed."""
        from kgen.agent.runs.start import resume_run, start_run

        path = self.out / entry.run_dir
        with self.lock:
            entry.status, entry.started, entry.finished = "running", now_utc(), None
            entry.exit_reason, entry.attempts = "", entry.attempts + 1
            self.save()
        self.say(f"[{position}/{total}] {entry.name}: {'resuming' if step == 'resume' else 'starting'} "
                 f"({entry.run_dir})")
        progress = self.run_progress(entry.name)
        try:
            if step == "resume":
                summary = resume_run(str(path), runs_dir=self.runs_dir, progress=progress, api_keys=self.api_keys)
            else:
                self.clear(entry)
                options = self.template.model_copy(update={"request": entry.name,
                                                           "problem_file": entry.problem_file})
                summary = start_run(options, runs_dir=self.runs_dir, out=path, progress=progress,
                                    api_keys=self.api_keys)
        except (KeyboardInterrupt, SystemExit) as exc:
            with self.lock:
                entry.status, entry.finished = "interrupted", now_utc()
                entry.exit_reason = ("interrupted" if isinstance(exc, KeyboardInterrupt)
                                     else f"stopped (exit {exc.code})")
                self.save()
            self.say(f"[{position}/{total}] {entry.name}: interrupted; `kgen solve` with the same --out resumes it")
            raise
        except (KgenUsageError, FileExistsError) as exc:  # a bad problem, a run in use or not found
            self._failed(entry, str(exc))
        except Exception as exc:  # one problem's bug or broken file never stops the suite
            with open(self.out / LOG_FILE, "a") as handle:
                handle.write(f"{entry.name}: unexpected error\n{traceback.format_exc()}\n")
            self._failed(entry, f"{type(exc).__name__}: {exc} (traceback in {LOG_FILE})")
        else:
            with self.lock:
                entry.status, entry.finished = "finished", now_utc()
                entry.exit_reason = summary.stop_reason or "finished"
                self.save()
        self.write_report(entry)
        row = self.row(infos[entry.name], entry) if entry.name in infos else None
        self.say(f"[{position}/{total}] {entry.name}: {outcome_line(entry, row)}")

    def _failed(self, entry: SuiteProblem, message: str) -> None:
        with self.lock:
            entry.status, entry.finished, entry.exit_reason = "failed", now_utc(), message
            self.save()

    def row(self, info: ProblemInfo, entry: SuiteProblem) -> SuiteRow:
        path = self.out / entry.run_dir
        if entry.status == "finished" and (path / SUMMARY_FILE).is_file():
            try:
                return row_from_run(info, path, self.out)
            except (OSError, ValueError) as exc:
                return SuiteRow(problem=info.name, verdict="missing", reason=f"unreadable run result: {exc}")
        return state_row(info, entry)

    def screen(self, work: list[tuple[SuiteProblem, str, int]],
               infos: dict[str, ProblemInfo]) -> list[tuple[SuiteProblem, str, int]]:
        """Offline: say which problems to start the library can serve (``suite_library.py``)
        and keep only those; the others are marked unserved with their reason, no run started."""
        starts = [infos[entry.name] for entry, step, _ in work if step == "start"]
        if not starts:
            return work
        try:
            matches = screen_suite(starts, self.template)
        except LibraryScreenError as exc:
            raise SuiteError(str(exc)) from exc
        for line in screen_lines(matches):
            self.say(line)
        kept = []
        with self.lock:
            for item in work:
                match = matches.get(item[0].name)
                if match is None or match.served:
                    kept.append(item)
                    continue
                item[0].status, item[0].exit_reason, item[0].finished = "unserved", match.reason, now_utc()
            self.save()
        return kept

    # -- reports ---------------------------------------------------------------------

    def write_report(self, entry: SuiteProblem) -> None:
        """The run's report.html, if ``kgen.agent.runs.html_report`` is there; a report that fails
        is noted on the problem (and in the index), never a failure of the suite."""
        path = self.out / entry.run_dir
        if entry.name in self.reported or not (path / RUN_FILE).is_file():
            return
        self.reported.add(entry.name)
        try:
            from kgen.agent.runs.html_report import write_report
        except ImportError as exc:
            if self.report_unavailable is None:
                self.report_unavailable = str(exc)
                self.say(f"per-problem reports are not available ({exc}); the index links each run's summary")
            return
        try:
            write_report(path)
            error = ""
        except Exception as exc:  # a report is a view of the run: it never fails the suite
            error = f"{type(exc).__name__}: {exc}"
            self.say(f"{entry.name}: report.html not written ({error}); the suite goes on")
        with self.lock:
            entry.report_error = error
            self.save()

    # -- all problems ----------------------------------------------------------------

    def run_all(self, work: list[tuple[SuiteProblem, str, int]], total: int, workers: int,
                infos: dict[str, ProblemInfo]) -> None:
        if workers <= 1:
            for entry, step, position in work:
                self.solve_one(entry, step, position, total, infos)
            return

        install_signal_handlers()  # from the main thread: Ctrl-C ends every run's verifiers
        queue = list(work)

        def worker() -> None:
            while not self.stop.is_set():
                with self.lock:
                    if not queue:
                        return
                    entry, step, position = queue.pop(0)
                try:
                    self.solve_one(entry, step, position, total, infos)
                except BaseException as exc:  # an interrupt reached this thread: stop them all
                    if not self.stop.is_set():
                        self.worker_error = exc
                        self.stop.set()
                    return

        # daemon threads: a run stuck in a model call must not keep an interrupted kgen alive
        threads = [threading.Thread(target=worker, name=f"kgen-suite-{i}", daemon=True) for i in range(workers)]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads) and not self.stop.is_set():
                for thread in threads:
                    thread.join(0.2)
        except BaseException:
            self.stop_workers(threads, work)
            raise
        if self.stop.is_set():  # an interrupt reached one of the threads
            self.stop_workers(threads, work)
            if self.worker_error is not None:
                raise self.worker_error

    def stop_workers(self, threads: list[threading.Thread], work: list[tuple[SuiteProblem, str, int]]) -> None:
        """Stop every run: their verifiers now, the runs at their next event line; a run not
        stopped within ``STOP_GRACE_S`` (waiting on a model) is marked interrupted all the same."""

        self.stop.set()
        kill_registered("kgen solve interrupted")
        deadline = time.monotonic() + STOP_GRACE_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            for entry, _, _ in work:
                if entry.status == "running":
                    entry.status, entry.finished, entry.exit_reason = "interrupted", now_utc(), "interrupted"
            self.save()


def _select(infos: Sequence[ProblemInfo], only: list[str] | None) -> list[ProblemInfo]:
    """The problems ``--only`` names (a name or a file stem), in suite order; every problem when
    none is named. A name not in the suite is an error that suggests the close ones
    (``close_names``: ``36_RMSNorm`` -> ``36_RMSNorm_``), or none, never the suite's first few."""
    if not only:
        return list(infos)
    known = {info.name: info for info in infos}
    known.update({Path(info.path).stem: info for info in infos if Path(info.path).stem not in known})
    unknown = [name for name in only if name not in known]
    if unknown:
        near = close_names(unknown[0], [info.name for info in infos])
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else f" ({counted(len(infos), 'problem')})"
        raise SuiteError(f"no problem named {', '.join(map(repr, unknown))} in the suite{hint}")
    chosen = {known[name].name for name in only}
    return [info for info in infos if info.name in chosen]


def solve_suite(suite_dir: Path, template: RunOptions, *, out: Path, jobs: int = 1,
                progress: Progress | None = None, api_keys: dict[str, str] | None = None,
                only: list[str] | None = None, command: str | None = None) -> SuiteOutcome:
    """Run kgen's agent over every problem of ``suite_dir`` (resumable; see the module
    docstring), then write the fast_p table and the report index in ``out``.

    ``template`` carries the run options (models, per-problem ``budget``, targets, device,
    knowledge base, ...); each problem's run gets ``request=<problem name>`` and
    ``problem_file=<its file>``. ``jobs``: problems at once on the CPU (one at a time with a
    GPU). ``only``: problem names (or file stems) to run now; they decide the exit code
    (``SuiteOutcome.selected``), and the table on disk still counts every problem of the suite.
    ``command`` heads the table (default: a ``kgen solve`` line).
    """

    if jobs < 1:
        raise SuiteError(f"--jobs must be at least 1, got {jobs}")
    suite_dir = Path(suite_dir).expanduser().resolve()
    out = Path(out).expanduser().resolve()
    try:
        infos, skipped = scan_suite(suite_dir)
    except FileNotFoundError as exc:
        raise SuiteError(str(exc)) from exc
    unreadable = unreadable_rows(skipped)
    if not infos:
        why = "; ".join(f"{row.problem}: {row.reason}" for row in unreadable)
        raise SuiteError(f"no problem files in {suite_dir}" + (f" that kgen can read ({why})" if why else "")
                         + (f" ({len(skipped)} .py file(s) are not problems)" if skipped and not why else ""))
    names = [info.name for info in infos]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise SuiteError(f"two problem files share a name ({', '.join(twice)}): rename one (KGEN_NAME)")
    selected = _select(infos, only)
    # bad models, keys or targets fail once, before any run directory exists
    validate_options(template.model_copy(update={"request": infos[0].name,
                                                 "problem_file": str(infos[0].path)}), api_keys)
    device = resolve_device(template.device)  # once for the suite: how many problems run at once
    options = template.model_dump(mode="json", exclude={"request", "problem_file"})

    try:
        state = SuiteRun.load(out)
    except ValueError as exc:  # a kgen bench table's suite.json, or a torn hand edit
        raise SuiteError(f"{out / STATE_FILE} is not the state of a kgen solve ({type(exc).__name__}): "
                         "use another --out") from exc
    if state is not None and Path(state.suite_dir) != suite_dir:
        raise SuiteError(f"{out} holds the runs of the suite {state.suite_dir}, not {suite_dir}: "
                         "use another --out")
    if state is None and out.is_dir() and any(p.name not in (LOCK_FILE, LOG_FILE) for p in out.iterdir()):
        raise SuiteError(f"{out} is not empty and holds no suite ({STATE_FILE}): use another --out")
    out.mkdir(parents=True, exist_ok=True)
    command = command or f"kgen solve {suite_dir} --out {out}"

    with RunDirectory(out).claimed():  # one kgen solve per output folder
        earlier = state is not None
        if state is None:
            state = SuiteRun(suite_dir=str(suite_dir), created=now_utc())
        state.options = options
        suite = _Suite(out, state, template, progress, api_keys)
        added = []
        for info in infos:
            entry = state.problem(info.name)
            if entry is None:
                state.problems.append(SuiteProblem(name=info.name, problem_file=str(Path(info.path).resolve()),
                                                   run_dir=f"{RUNS_DIR}/{_dir_name(info.name)}"))
                added.append(info.name)
            elif entry.status != "finished":
                entry.problem_file = str(Path(info.path).resolve())
        for entry in state.problems:
            if entry.status == "running":  # the last solve was killed while it ran (we hold the lock)
                entry.status, entry.exit_reason = "interrupted", "the suite process stopped while it ran"
        order = {name: i for i, name in enumerate(names)}
        state.problems.sort(key=lambda p: order.get(p.name, len(order)))
        suite.save()
        for file, why in skipped:
            suite.say(f"skipped {file.name}: {why}" if is_other_module(file)
                      else f"{why} (counted as not correct)")
        gone = [p.name for p in state.problems if p.name not in order]
        if gone:
            suite.say(f"no longer in the folder (kept in {STATE_FILE}, left out of the table): {', '.join(gone)}")

        work: list[tuple[SuiteProblem, str, int]] = []
        total = len(selected)
        infos_by_name = {info.name: info for info in infos}
        skipped_lines: list[str] = []
        for position, info in enumerate(selected, start=1):
            entry = state.problem(info.name)
            assert entry is not None
            step = suite.next_step(entry)
            if step == "skip":
                skipped_lines.append(f"[{position}/{total}] {info.name}: done earlier, skipped "
                                     f"({outcome_line(entry, suite.row(info, entry))})")
                continue
            work.append((entry, step, position))
        if template.offline:  # before any run: which problems the library can serve
            work = suite.screen(work, infos_by_name)
        resumes = sum(step == "resume" for _, step, _ in work)
        suite.say(f"suite {suite_dir}: {counted(len(infos), 'problem')}"
                  + (f", {total} selected" if only else "") + f"; {len(skipped_lines)} done earlier, "
                  f"{resumes} to resume, {len(work) - resumes} to start"
                  + (f" ({len(added)} new in the folder: {', '.join(added)})" if added and earlier else ""))
        for line in skipped_lines:
            suite.say(line)
        choose(ExecutorChoice.of(template), say=suite.say)
        executor = executor_for(device, template.targets) if device.is_gpu and work else None
        lanes = len(executor.lanes()) if executor is not None else 1
        if executor is not None and lanes > 1:
            workers = min(lanes, len(work))
            suite.say(f"{executor.describe()}: up to {workers} problems at once, "
                      "each candidate timed alone on its GPU" + (f"; --jobs {jobs} ignored" if jobs > 1 else ""))
        elif device.is_gpu:
            workers = 1
            suite.say("one GPU: problems run one at a time (timings need the GPU to themselves)"
                      + (f"; --jobs {jobs} ignored" if jobs > 1 else ""))
        else:
            workers = max(1, min(jobs, len(work)))
            if workers > 1:
                suite.say(f"no GPU: up to {workers} problems at once (verification only; no timings)")
        suite.save()
        suite.run_all(work, total, workers, infos_by_name)

        # every problem of the suite in the table; a report for runs that have none yet
        for entry in state.problems:
            if entry.name in order and entry.status in ("finished", "failed") and \
                    not (out / entry.run_dir / REPORT_FILE).is_file() and not entry.report_error:
                suite.write_report(entry)
        rows = in_suite_order([*(suite.row(info, state.problem(info.name)) for info in infos),  # type: ignore[arg-type]
                               *unreadable])
        chosen = [info.name for info in selected] if only else None
        summary = summarize(rows, selected=chosen)
        date = _dt.date.today().isoformat()
        table = write_suite_outputs(rows, summary, out / TABLE_DIR, command=command, date=date)
        index = out / INDEX_FILE
        write_atomic(index, render_index(state, infos, rows, summary, out, table, command, date))
        state_path = suite.save()
        verified = f"{summary.correct} of {counted(summary.problems, 'problem')}"
        if summary.has_selection:
            verified = (f"{summary.selected_correct} of {counted(summary.selected, 'selected problem')} "
                        f"(the suite: {summary.correct} of {summary.problems})")
        fast = fast_figures([("fast_1 vs torch.compile", summary.fast_p_vs_compile["1"]),
                             ("vs eager", summary.fast_p_vs_eager["1"])])
        suite.say(f"suite done: {verified} with a verified kernel; {fast}; table {relative_path(table['md'], out)}, "
                  f"index {INDEX_FILE}")
    return SuiteOutcome(out=out, summary=summary, rows=rows, selected=chosen, problems=list(state.problems),
                        table=table, index=index, state=state_path)




__all__ = ["SuiteError", "SuiteOutcome", "solve_suite"]
