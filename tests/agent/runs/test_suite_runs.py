"""Suite mode (`kgen solve SUITE_DIR`): the agent over every problem of a folder, resumable,
ending in kgen bench's fast_p table and a report index.

The real runs are on the CPU over unmodified KernelBench level-1 files
(``tests/fixtures/suite_level1``), each with budget 1: the model (a loopback server speaking the
OpenAI protocol, driving the real SDK) answers each problem's prompt with kgen's solution for it
from ``tests/fixtures/kernelbench_solutions`` and the run verifies it; for 20_LeakyReLU it answers
with prose only, so that run fails and it is the failed row that stays in the denominator. The
scheduling tests (a GPU runs one problem at a time, interrupts of threads) replace the run with
a stand-in, since they are about the suite, not the agent.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
import types
from collections import Counter
from pathlib import Path

import pytest
from llm_server import RecordedRequest, Reply, ScriptedLLMServer
from scripted_run import fenced

from kgen.agent.run_options import RunOptions
from kgen.agent.runs.suite_runs import SuiteError, solve_suite
from kgen.agent.runs.suite_state import SuiteRun
from kgen.backends.device import Device

# one test process runs the module: one seeded knowledge base for the module
pytestmark = pytest.mark.xdist_group("suite_runs")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SUITE = FIXTURES / "suite_level1"
SOLUTIONS = FIXTURES / "kernelbench_solutions"
SOLVED = ["19_ReLU", "21_Sigmoid", "25_Swish", "26_GELU_"]
UNSOLVED = "20_LeakyReLU"
ALL = ["19_ReLU", "20_LeakyReLU", "21_Sigmoid", "25_Swish", "26_GELU_"]


@pytest.fixture(scope="module")
def knowledge_base(tmp_path_factory) -> str:
    """One store for the module (seeded with the shipped library on first open); the runs
    do not write to it (persist off), so every test sees the same one."""
    from kgen.knowledge_base.seeding import open_knowledge_base

    location = str(tmp_path_factory.mktemp("suite") / "kb")
    open_knowledge_base(location)
    return location


def _asked_for(request: RecordedRequest) -> str | None:
    text = json.dumps(request.messages)
    return next((name for name in ALL if f"`{name}`" in text), None)


@pytest.fixture
def model(llm_server: ScriptedLLMServer) -> ScriptedLLMServer:
    """The model: kgen's solution for each problem it is asked about, prose for 20_LeakyReLU."""
    def answer(request: RecordedRequest) -> Reply:
        name = _asked_for(request)
        if name in SOLVED:
            return Reply.text(fenced((SOLUTIONS / f"level1_{name}.py").read_text()),
                              input_tokens=800, output_tokens=300)
        return Reply.text("A tl.where over the input would do it.", input_tokens=800, output_tokens=12)

    llm_server.respond_with("openai", answer)
    return llm_server


@pytest.fixture
def reports(monkeypatch):
    """A stand-in for ``kgen.agent.runs.html_report`` (another module's job): writes a small
    report.html per run, and fails for 21_Sigmoid, which must not fail the suite."""
    written: list[str] = []

    def write_report(run_path: Path, out: Path | None = None) -> Path:
        run_path = Path(run_path)
        if run_path.name == "21_Sigmoid":
            raise RuntimeError("charts could not be drawn")
        written.append(run_path.name)
        page = run_path / "report.html"
        page.write_text(f"<html><body>{run_path.name}</body></html>")
        return page

    module = types.ModuleType("kgen.agent.runs.html_report")
    module.write_report = write_report
    monkeypatch.setitem(sys.modules, "kgen.agent.runs.html_report", module)
    return written


def _template(kb: str, server: ScriptedLLMServer | None = None) -> RunOptions:
    # persist off: the module's knowledge base stays as it was seeded
    models = [f"openai:gpt-test@{server.openai_base_url}"] if server is not None else []
    return RunOptions(request="", models=models, device="cpu", targets=["h100"], budget=1, generations=1,
                      kb=kb, persist=False, llm_retries=0)


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file of a run directory with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _table_rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith(("| problem", "|---")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


def test_a_suite_ends_in_a_fast_p_table_over_every_problem(tmp_path, knowledge_base, model, reports):
    out = tmp_path / "solve"
    lines: list[str] = []
    started = time.monotonic()
    outcome = solve_suite(SUITE, _template(knowledge_base, model), out=out, jobs=2, progress=lines.append)
    first_solve_s = time.monotonic() - started

    # the table: every problem of the folder, the one without a kernel a failed row in the denominator
    markdown = (out / "table" / "suite.md").read_text()
    assert outcome.table["md"] == out / "table" / "suite.md"
    rows = _table_rows(markdown)
    assert sorted(rows) == ALL
    assert all(rows[name][1] == "passed" for name in SOLVED)
    assert rows[UNSOLVED][1].startswith("missing (run failed: no model returned code")
    assert "4 of 5 correct" in markdown
    assert outcome.summary.problems == 5 and outcome.summary.correct == 4
    assert outcome.summary.fast_p_vs_compile["0"] == pytest.approx(4 / 5)
    assert outcome.summary.timed == 0  # a CPU times nothing, and says so
    assert "no GPU" in markdown

    # the state: per problem its file, run directory, status and times
    state = SuiteRun.load(out)
    assert state is not None and Path(state.suite_dir) == SUITE.resolve()
    status = {p.name: p for p in state.problems}
    assert [p.name for p in state.problems] == ALL
    for name in SOLVED:
        entry = status[name]
        assert entry.status == "finished" and entry.started and entry.finished, entry
        assert entry.run_dir == f"runs/{name}" and entry.problem_file == str(SUITE / f"{name}.py")
        assert json.loads((out / entry.run_dir / "summary.json").read_text())["best"]["h100"]
    assert status[UNSOLVED].status == "failed"
    assert status[UNSOLVED].exit_reason.startswith("no model returned code in 1 request:")
    assert Counter(_asked_for(r) for r in model.requests) == Counter(ALL)  # one prompt per problem

    # progress: one outcome line per problem; CPU problems ran two at a time
    assert any("up to 2 problems at once" in line for line in lines)
    assert "[1/5] 19_ReLU: finished, verified (not timed: no GPU)" in lines
    assert any(line.startswith("[2/5] 20_LeakyReLU: failed: no model returned code") for line in lines)
    assert any(line.startswith("25_Swish: ") for line in lines), "the runs' own lines, named"

    # the index links every problem's report, or its summary where the report failed
    # (which is noted, and failed nothing)
    index = (out / "index.html").read_text()
    assert sorted(reports) == sorted(set(ALL) - {"21_Sigmoid"})
    for name in set(ALL) - {"21_Sigmoid"}:
        assert f'href="runs/{name}/report.html"' in index
    assert 'href="runs/21_Sigmoid/summary.json"' in index
    assert "report failed: RuntimeError: charts could not be drawn" in index
    assert "charts could not be drawn" in status["21_Sigmoid"].report_error
    assert 'src="table/suite.svg"' in index

    # solving again skips every finished problem and leaves its run directory as it was; the
    # failed one is tried afresh, its first run moved aside
    before = {name: _snapshot(out / "runs" / name) for name in SOLVED}
    lines.clear()
    started = time.monotonic()
    again = solve_suite(SUITE, _template(knowledge_base, model), out=out, jobs=2, progress=lines.append)
    assert time.monotonic() - started < first_solve_s / 2
    assert {name: _snapshot(out / "runs" / name) for name in SOLVED} == before
    for position, name in enumerate(ALL, start=1):
        if name in SOLVED:
            assert (f"[{position}/5] {name}: done earlier, skipped "
                    "(finished, verified (not timed: no GPU))") in lines
            assert not any(line.startswith(f"{name}: ") for line in lines), f"{name} ran again"
    assert "20_LeakyReLU: previous run moved to runs/20_LeakyReLU.attempt-1" in lines
    assert (out / "runs" / "20_LeakyReLU.attempt-1" / "summary.json").is_file()
    assert Counter(_asked_for(r) for r in model.requests)[UNSOLVED] == 2
    assert again.summary.correct == 4 and again.summary.problems == 5
    assert {p.name: p.attempts for p in again.problems} == {**dict.fromkeys(SOLVED, 1), UNSOLVED: 2}


def test_an_interrupted_suite_resumes_and_never_reruns_finished_problems(tmp_path, knowledge_base, model,
                                                                         monkeypatch):
    monkeypatch.setitem(sys.modules, "kgen.agent.runs.html_report", None)  # no reports: not this test's concern
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("19_ReLU", "21_Sigmoid"):
        shutil.copy(SUITE / f"{name}.py", suite)
    out = tmp_path / "solve"
    template = _template(knowledge_base, model)

    first = solve_suite(suite, template, out=out, only=["19_ReLU"])
    assert [(p.name, p.status) for p in first.problems] == [("19_ReLU", "finished"), ("21_Sigmoid", "pending")]
    rows = _table_rows(first.table["md"].read_text())
    assert rows["21_Sigmoid"][1] == "missing (not run yet)"  # still in the denominator
    assert first.summary.problems == 2 and first.summary.correct == 1
    relu = _snapshot(out / "runs" / "19_ReLU")

    # a problem joins the folder; its run is interrupted while it evaluates the model's kernel
    shutil.copy(SUITE / "25_Swish.py", suite)
    lines: list[str] = []

    def interrupt_swish(line: str) -> None:
        lines.append(line)
        if line.startswith("25_Swish: evaluating"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        solve_suite(suite, template, out=out, progress=interrupt_swish)
    assert any("(1 new in the folder: 25_Swish)" in line for line in lines)
    # the run's own hint names it by its path: `kgen resume` finds it from anywhere
    assert f"25_Swish: interrupted: `kgen resume {out.resolve() / 'runs' / '25_Swish'}` continues this run" in lines
    state = {p.name: p for p in SuiteRun.load(out).problems}
    assert {name: p.status for name, p in state.items()} == {
        "19_ReLU": "finished", "21_Sigmoid": "finished", "25_Swish": "interrupted"}
    assert (out / "runs" / "25_Swish" / "checkpoints.sqlite").is_file()
    assert not (out / "runs" / "25_Swish" / "summary.json").exists()
    assert not (out / "lock.json").exists()  # the suite's lock went with the interrupt
    sigmoid = _snapshot(out / "runs" / "21_Sigmoid")

    lines.clear()
    final = solve_suite(suite, template, out=out, progress=lines.append)
    assert "[3/3] 25_Swish: resuming (runs/25_Swish)" in lines
    assert "25_Swish: resuming run 25_Swish" in lines
    assert _snapshot(out / "runs" / "19_ReLU") == relu
    assert _snapshot(out / "runs" / "21_Sigmoid") == sigmoid
    assert not any(line.startswith(("19_ReLU: ", "21_Sigmoid: ")) for line in lines)
    # the reply paid for before the interrupt was reused, not asked for again
    assert Counter(_asked_for(r) for r in model.requests) == Counter(["19_ReLU", "21_Sigmoid", "25_Swish"])
    state = {p.name: p for p in final.problems}
    assert state["25_Swish"].status == "finished" and state["25_Swish"].attempts == 2
    assert state["19_ReLU"].attempts == 1 and state["21_Sigmoid"].attempts == 1
    rows = _table_rows(final.table["md"].read_text())
    assert sorted(rows) == ["19_ReLU", "21_Sigmoid", "25_Swish"]
    assert final.summary.correct == 3 and final.summary.problems == 3
    index = final.index.read_text()
    assert all(f'href="runs/{name}/summary.json"' in index for name in rows)


def test_offline_problems_the_library_cannot_serve_are_said_up_front_and_not_run(tmp_path, knowledge_base,
                                                                                   monkeypatch):
    monkeypatch.setitem(sys.modules, "kgen.agent.runs.html_report", None)
    # 26_GELU_ is served by the library's exact GELU (gelu_exact): the other four are not
    unserved = [name for name in ALL if name != "26_GELU_"]
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in unserved:
        shutil.copy(SUITE / f"{name}.py", suite)
    lines: list[str] = []
    outcome = solve_suite(suite, _template(knowledge_base), out=tmp_path / "solve", progress=lines.append)
    assert [p.status for p in outcome.problems] == ["unserved"] * 4
    assert lines[0] == "offline (no model): the library can serve 0 of 4 problems; only those are run"
    for entry in outcome.problems:
        # its own reason, one line; the advice is said once for all of them, not per problem
        assert entry.exit_reason.startswith("no triton kernel in the library ")
        assert "configure" not in entry.exit_reason and "\n" not in entry.exit_reason
        assert f"  - {entry.name}: {entry.exit_reason}" in lines
        assert not (tmp_path / "solve" / entry.run_dir).exists()  # not attempted: no run folder
    assert sum("KGEN_MODELS" in line for line in lines) == 1
    assert not any("starting" in line for line in lines)
    assert outcome.summary.problems == 4 and outcome.summary.correct == 0
    rows = _table_rows(outcome.markdown.read_text())
    assert all(rows[name][1].startswith("missing (not attempted offline: no triton kernel") for name in unserved)
    assert len({rows[name][1] for name in unserved}) > 1  # not one message pasted into every row
    index = outcome.index.read_text()
    assert all(name in index for name in unserved)


# --------------------------------------------------------------------------- scheduling


class _FakeRuns:
    """``start_run`` replaced: each "run" writes a run directory and a summary after a pause,
    recording how many ran at once."""

    def __init__(self, pause_s: float = 0.3, interrupt: str | None = None) -> None:
        self.pause_s = pause_s
        self.interrupt = interrupt
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.started: list[str] = []

    def start_run(self, options, *, runs_dir, out=None, progress=None, api_keys=None):
        from kgen.agent.run_directory import RunDirectory
        from kgen.agent.runs.single_run import save_options
        from kgen.agent.runs.summary import RunSummary

        run = RunDirectory.create(runs_dir, out)
        save_options(run, options)
        with self.lock:
            self.started.append(options.request)
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if options.request == self.interrupt:
                raise KeyboardInterrupt
            time.sleep(self.pause_s)
            progress("spec: done")  # where a stopping suite stops the other runs
            summary = RunSummary(run_id=run.run_id, run_dir=str(run.path), request=options.request,
                                 problem=options.request, backend="triton", targets=["h100"],
                                 mode="offline", device="cpu", stop_reason="budget spent")
            run.write("summary.json", summary.model_dump_json())
            return summary
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def library_serves_all(monkeypatch):
    """The offline screen (``suite_library.py``, tested with real runs in
    ``test_suite_library.py``) replaced: every problem is served, so the stand-in runs start."""
    import kgen.agent.runs.suite_runs
    from kgen.agent.spec.library_match import LibraryKernel, LibraryMatch

    def screen_suite(infos, template):
        kernel = LibraryKernel(kb_id="k-stand-in", problem="stand-in", target="h100", dtype="float32", source="")
        return {info.name: LibraryMatch(problem=info.name, how="twin", kernels=[kernel], twins=["stand-in"])
                for info in infos}

    monkeypatch.setattr(kgen.agent.runs.suite_runs, "screen_suite", screen_suite)


@pytest.mark.parametrize("device, most", [("cpu", 3), ("cuda", 1)])
def test_problems_run_at_once_only_where_no_gpu_is_timing(tmp_path, monkeypatch, device, most, library_serves_all):
    import kgen.agent.runs.start
    import kgen.agent.runs.suite_runs

    fake = _FakeRuns()
    monkeypatch.setattr(kgen.agent.runs.start, "start_run", fake.start_run)
    monkeypatch.setattr(kgen.agent.runs.suite_runs, "resolve_device", lambda requested: Device(device))
    monkeypatch.setitem(sys.modules, "kgen.agent.runs.html_report", None)
    lines: list[str] = []
    outcome = solve_suite(SUITE, RunOptions(request=""), out=tmp_path / "out", jobs=3, progress=lines.append)
    assert fake.most == most
    assert sorted(fake.started) == ALL
    assert all(p.status == "finished" for p in outcome.problems)
    if device == "cuda":
        assert any("problems run one at a time (timings need the GPU to themselves); --jobs 3 ignored" in line
                   for line in lines)
    # a run that ended without a verified kernel is a failed row of the table
    assert outcome.summary.correct == 0 and outcome.summary.problems == 5


def test_an_interrupt_in_one_thread_stops_the_suite_and_marks_what_ran(tmp_path, monkeypatch, library_serves_all):
    import kgen.agent.runs.start

    fake = _FakeRuns(pause_s=0.5, interrupt="21_Sigmoid")
    monkeypatch.setattr(kgen.agent.runs.start, "start_run", fake.start_run)
    monkeypatch.setitem(sys.modules, "kgen.agent.runs.html_report", None)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        solve_suite(SUITE, RunOptions(request="", device="cpu"), out=out, jobs=3)
    state = {p.name: p.status for p in SuiteRun.load(out).problems}
    assert state["21_Sigmoid"] == "interrupted"
    assert "running" not in state.values()
    # the two beside it stopped at their next line; the rest never started
    assert state["19_ReLU"] == state["20_LeakyReLU"] == "interrupted"
    assert {state[name] for name in ("25_Swish", "26_GELU_")} == {"pending"}


def test_mistakes_are_told_before_any_run(tmp_path):
    with pytest.raises(SuiteError, match="no problem named '99_Nothing'"):
        solve_suite(SUITE, RunOptions(request=""), out=tmp_path / "a", only=["99_Nothing"])
    with pytest.raises(SuiteError, match="no problem files"):
        solve_suite(tmp_path, RunOptions(request=""), out=tmp_path / "b")
    with pytest.raises(SuiteError, match="--jobs"):
        solve_suite(SUITE, RunOptions(request=""), out=tmp_path / "c", jobs=0)
    other = tmp_path / "other"
    other.mkdir()
    (out := tmp_path / "d").mkdir()
    SuiteRun(suite_dir=str(other), created="2026-01-01").save(out)
    with pytest.raises(SuiteError, match="holds the runs of the suite"):
        solve_suite(SUITE, RunOptions(request=""), out=out)
    (bench := tmp_path / "bench").mkdir()
    (bench / "suite.json").write_text('{"command": "kgen bench", "rows": []}')  # kgen bench's table
    with pytest.raises(SuiteError, match="is not the state of a kgen solve"):
        solve_suite(SUITE, RunOptions(request=""), out=bench)
    assert not (tmp_path / "a").exists()


def _timed_result(candidate_ms: float, eager_ms: float, compile_ms: float):
    from kgen.evals.result import EvalResult
    from kgen.evals.timing.bench_result import BenchResult, Measurement
    from kgen.evals.verdict import Verdict

    def timing(ms: float) -> Measurement:
        return Measurement(median_ms=ms, p10_ms=ms * 0.99, p90_ms=ms * 1.01, trials=50)

    return EvalResult(problem="19_ReLU", problem_path=str(SUITE / "19_ReLU.py"), candidate="g0-c01.py",
                      backend="triton", device="cuda", targets=["h100"], verdict=Verdict.PASSED,
                      bench=BenchResult(device_name="NVIDIA H100 80GB HBM3", measurements={
                          "candidate": timing(candidate_ms), "eager": timing(eager_ms),
                          "torch.compile": timing(compile_ms)}))


def test_a_timed_row_is_the_winners_full_size_evaluation(tmp_path):
    """On a GPU the row (and the progress line) carry the winner's final_eval.json timings
    (full-size verification), else its eval.json's (screening)."""
    from kgen.agent.runs.suite_index import outcome_line, row_from_run
    from kgen.agent.runs.suite_state import SuiteProblem
    from kgen.agent.runs.summary import BestKernel, Evidence, RunSummary
    from kgen.evals.problem.format import read_problem

    run = tmp_path / "runs" / "19_ReLU"
    folder = run / "candidates" / "g0-c01"
    folder.mkdir(parents=True)
    best = BestKernel(target="h100", candidate="g0-c01", module=str(run / "best_h100.py"), origin="model",
                      time_ms=0.12, device_name="NVIDIA H100 80GB HBM3",
                      evidence=Evidence(device="cuda", trials=10, seeds=[1], shapes=[], distributions=[],
                                        checks_passed=[]))
    summary = RunSummary(run_id="19_ReLU", run_dir=str(run), request="19_ReLU", problem="19_ReLU",
                         backend="triton", targets=["h100"], mode="models", device="cuda",
                         stop_reason="budget spent", best={"h100": best})
    (run / "summary.json").write_text(summary.model_dump_json())
    (folder / "eval.json").write_text(_timed_result(0.13, 0.30, 0.20).model_dump_json())
    info = read_problem(SUITE / "19_ReLU.py")
    entry = SuiteProblem(name="19_ReLU", problem_file=str(info.path), run_dir="runs/19_ReLU", status="finished")

    screened = row_from_run(info, run, tmp_path)
    assert screened.candidate_ms == pytest.approx(0.13)
    (folder / "final_eval.json").write_text(_timed_result(0.12, 0.30, 0.216).model_dump_json())
    row = row_from_run(info, run, tmp_path)
    assert row.correct and row.candidate_ms == pytest.approx(0.12) and row.candidate == "runs/19_ReLU/best_h100.py"
    assert outcome_line(entry, row) == "finished, best 0.12 ms, 1.80x vs torch.compile, 2.50x vs eager"
    assert row.device_name == "NVIDIA H100 80GB HBM3"


def test_a_problem_file_that_cannot_be_read_is_a_row_of_the_table_and_the_index(tmp_path, monkeypatch, library_serves_all):
    """kgen solve over a folder with broken problem files (a syntax error, a missing Model): no
    run for them, but each is an "unreadable" row with its reason, counted in the table's
    denominator, its JSON summary and index.html, and said in the log."""
    import kgen.agent.runs.start

    suite = tmp_path / "level1"
    suite.mkdir()
    for name in ("19_ReLU", "21_Sigmoid"):
        shutil.copy(SUITE / f"{name}.py", suite / f"{name}.py")
    source = (SUITE / "19_ReLU.py").read_text()
    (suite / "20_Broken.py").write_text(source + "\nreturn (\n")
    (suite / "22_NoModel.py").write_text(source.replace("class Model", "class Reference"))
    (suite / "helpers.py").write_text("def shape():\n    return 4\n")  # not a problem: no row
    fake = _FakeRuns(pause_s=0.0)
    monkeypatch.setattr(kgen.agent.runs.start, "start_run", fake.start_run)
    monkeypatch.setitem(sys.modules, "kgen.agent.runs.html_report", None)
    lines: list[str] = []
    out = tmp_path / "out"
    outcome = solve_suite(suite, RunOptions(request="", device="cpu"), out=out, progress=lines.append)
    assert sorted(fake.started) == ["19_ReLU", "21_Sigmoid"]
    assert [row.problem for row in outcome.rows] == ["19_ReLU", "20_Broken", "21_Sigmoid", "22_NoModel"]
    verdicts = {row.problem: row.verdict for row in outcome.rows}
    assert verdicts["20_Broken"] == verdicts["22_NoModel"] == "unreadable"
    assert outcome.summary.problems == 4 and outcome.summary.unreadable == 2
    assert any("syntax error on line" in line and "counted as not correct" in line for line in lines)
    assert any("missing Model" in line and "counted as not correct" in line for line in lines)
    assert any(line.startswith("skipped helpers.py") for line in lines)
    table = json.loads((out / "table" / "suite.json").read_text())
    assert table["summary"]["problems"] == 4 and table["summary"]["unreadable"] == 2
    assert "0 of 4 problems with a verified kernel" in outcome.index.read_text()
    index = outcome.index.read_text()
    assert "20_Broken" in index and "syntax error on line" in index and "missing Model" in index
