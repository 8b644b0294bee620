"""`kgen report`: one run as a self-contained HTML page a person can trust and share.

Two runs feed the tests: a real offline CPU run (GELU, the known kernel and one tuned
variant, made once for the module) and a synthetic run whose evaluations carry H100
timings, built from real ``EvalResult`` objects so every figure goes through the same path
as a GPU run's (``apply_result`` -> ``timing_from_result``). Its winner is a crossover of
two lineages: knowledge-base kernel -> baseline re-measure, mutate -> improve, and a fresh
model kernel; every step must show its diff and its gain. Run text is untrusted: a kernel
source, a model name and a rejection reason carry a script-injection payload that must
never reach the page unescaped. A headless Chromium opens both pages offline and must
find every section and every chart decoded.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kgen
from kgen.agent.candidates import CandidateTask
from kgen.agent.llm.usage import ModelUsage, UsageLedger
from kgen.agent.run_directory import RunDirectory
from kgen.agent.runs.html_report import SECTION_IDS, write_report
from kgen.agent.runs.records import lineage, load_records
from kgen.agent.runs.summary import BestKernel, Evidence, RunSummary
from kgen.evals.result import EvalResult
from kgen.evals.timeline import Span, Timeline
from kgen.evals.timing.bench_result import BenchResult, Measurement
from kgen.evals.verdict import OutputComparison, RejectionClass, Trial, Verdict

# one test process runs the module: one real offline run for the module
pytestmark = pytest.mark.xdist_group("run_report")

PAYLOAD = "</script><img src=x onerror=alert(1)>"
H100 = "NVIDIA H100 80GB HBM3"
KB_ID = "k-0123456789abcdef"
EVIL_MODEL = f"openai:evil{PAYLOAD}"


# -- the runs --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def offline_run(tmp_path_factory) -> Path:
    """A real offline run on the CPU: the knowledge base's GELU kernel and one tuned variant."""
    root = tmp_path_factory.mktemp("offline")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KGEN_HOME", str(root / "home"))
        for name in ("KGEN_MODELS", "KGEN_KB", "KGEN_BUDGET", "KGEN_TARGETS", "KGEN_DEVICE"):
            mp.delenv(name, raising=False)
        summary = kgen.generate("Triton GELU for H100", models=[], budget=2, device="cpu",
                                out=root / "run", kb=str(root / "kb"), persist=False)
    return Path(summary.run_dir)


def _source(block: int, note: str = "") -> str:
    return (f'"""GELU kernel{note}."""\nimport torch\nimport triton\n\nBLOCK = {block}\n'
            f"NUM_WARPS = 4\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
            f"        return x  # launch with BLOCK={block}\n")


def _timeline(start: float) -> Timeline:
    """One evaluation's spans: 1 s static, then 3 s of correctness, 2 s of it a trial on the GPU."""
    return Timeline(spans=[Span(name="static", start=start, seconds=1.0),
                           Span(name="correctness.trial", start=start + 1.0, seconds=2.0, gpu=True),
                           Span(name="correctness", start=start + 1.0, seconds=3.0)])


def _result(cid: str, ms: float | None, error: float, verdict: Verdict = Verdict.PASSED,
            rejection: RejectionClass | None = None, reason: str = "") -> EvalResult:
    bench = None
    if ms is not None:
        bench = BenchResult(device_name=H100, sizes={"N": 1 << 20}, measurements={
            "candidate": Measurement(median_ms=ms, p10_ms=ms * 0.99, p90_ms=ms * 1.01, trials=100),
            "eager": Measurement(median_ms=1.2, p10_ms=1.19, p90_ms=1.21, trials=100),
            "torch.compile": Measurement(median_ms=0.6, p10_ms=0.595, p90_ms=0.605, trials=100)})
    output = OutputComparison(index=0, shape=[1024], dtype="float32", rel_l2_error=error, max_abs_error=error,
                              mismatched_fraction=0.0, tolerance_rel_l2=1e-4, passed=error < 1e-4)
    return EvalResult(problem="gelu", problem_path="/nowhere/gelu.py", candidate=f"{cid}.py", backend="triton",
                      device="cuda", targets=["h100"], verdict=verdict, rejection=rejection, reason=reason,
                      trials=[Trial(seed=1, sizes={"N": 1024}, outputs=[output], passed=error < 1e-4)], bench=bench,
                      timeline=_timeline(1000.0 + 10.0 * list(CHAIN).index(cid)))


#: id -> (task fields, source, time ms (None: rejected), rel. L2 error)
CHAIN = {
    "g0-c00": (dict(generation=0, kind="baseline", origin="knowledge_base", kb_id=KB_ID), _source(1024), 1.0, 2e-5),
    "g0-c01": (dict(generation=0, kind="mutate", origin="mutation", parent_ids=[f"kb:{KB_ID}"]),
               _source(2048), 0.8, 3e-5),
    "g1-c00": (dict(generation=1, kind="improve", origin="model", model="anthropic:claude-test",
                    parent_ids=["g0-c01"]), _source(4096, " with one pass"), 0.5, 5e-5),
    "g1-c01": (dict(generation=1, kind="generate", origin="model", model=EVIL_MODEL), _source(512, PAYLOAD), 0.9, 1e-5),
    "g1-c02": (dict(generation=1, kind="fix", origin="model", model="anthropic:claude-test",
                    parent_ids=["g0-c01"]), _source(8192), None, 3e-3),
    "g2-c00": (dict(generation=2, kind="crossover", origin="model", model="anthropic:claude-test",
                    parent_ids=["g1-c00", "g1-c01"]), _source(4096, " crossed " + PAYLOAD), 0.4, 9e-5),
}


def make_timed_run(path: Path, *, finished: bool = True) -> RunDirectory:
    """A run as a GPU machine would have left it (H100 timings in every eval.json)."""
    run = RunDirectory(path)
    path.mkdir(parents=True)
    run.write("run.json", json.dumps({"options": {"request": "Triton GELU for H100", "models": [EVIL_MODEL],
                                                  "device": "cuda", "targets": ["h100"]}}))
    run.write("spec.json", json.dumps({"request": "Triton GELU for H100", "problem": "gelu", "backend": "triton",
                                       "targets": ["h100"]}))
    for cid, (fields, source, ms, error) in CHAIN.items():
        task = CandidateTask(id=cid, target="h100", description=f"{fields['kind']} step", **fields)
        run.write(f"candidates/{cid}/task.json", task.model_dump_json(exclude={"source"}))
        run.write(f"candidates/{cid}/{cid}.py", source)
        result = (_result(cid, ms, error) if ms is not None else
                  _result(cid, None, error, Verdict.REJECTED, RejectionClass.MISMATCH, f"off by 3e-3 {PAYLOAD}"))
        run.write(f"candidates/{cid}/eval.json", result.model_dump_json())
    # a model reply without code: no source, a reply
    task = CandidateTask(id="g2-c01", generation=2, target="h100", kind="improve", origin="model",
                         model="anthropic:claude-test", parent_ids=["g1-c00"])
    run.write("candidates/g2-c01/task.json", task.model_dump_json(exclude={"source"}))
    run.write("candidates/g2-c01/reply.md", "I would widen the block, but here is no code.")
    if finished:
        run.write("best_h100.py", "# kgen: best kernel for h100\n" + CHAIN["g2-c00"][1])
        evidence = Evidence(device="cuda", trials=1, seeds=[1], shapes=[{"N": 1024}], distributions=["normal"],
                            checks_passed=["correctness"], max_rel_l2_error=9e-5)
        ledger = UsageLedger(models={EVIL_MODEL: ModelUsage(calls=1, input_tokens=1000, output_tokens=400,
                                                            seconds=2.0, cost_usd=0.0125),
                                     "anthropic:claude-test": ModelUsage(calls=4, input_tokens=6000,
                                                                         output_tokens=1500, seconds=9.0,
                                                                         unpriced_calls=4)})
        summary = RunSummary(
            run_id=run.run_id, run_dir=str(path), request="Triton GELU for H100", problem="gelu", backend="triton",
            targets=["h100"], mode=f"models: {EVIL_MODEL}", device="cuda", stop_reason="budget spent",
            candidates=7, passed=5, rejected={"numerical_mismatch": 1}, no_code=1,
            usage=ledger.model_dump(mode="json"),
            phase_seconds={"static": 6.0, "correctness.trial": 12.0, "correctness": 18.0},
            gpu_busy_fraction=0.2222, evaluation_wall_s=54.0,
            best={"h100": BestKernel(target="h100", candidate="g2-c00", module=str(run.best_module("h100")),
                                     origin="model", description="crossover step", device_name=H100, time_ms=0.4,
                                     compile_ms=0.6, speedup_vs_compile=1.5, evidence=evidence,
                                     compile_report=["_gelu on h100: 30 registers/thread, 0 spills"])})
        run.write("summary.json", summary.model_dump_json())
        run.write("usage.json", json.dumps(ledger.model_dump(mode="json")))
    return run


@pytest.fixture
def timed_run(tmp_path) -> RunDirectory:
    return make_timed_run(tmp_path / "20261122-081500-3fa9c1")


def sections(page: str) -> dict[str, str]:
    """Section id -> its HTML."""
    return dict(re.findall(r'<section id="([a-z]+)">(.*?)</section>', page, re.S))


# -- a real run ------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_real_offline_run_gets_every_section_and_its_charts_inline_and_beside_it(offline_run):
    page_path = write_report(offline_run)
    assert page_path == offline_run / "report.html"
    page = page_path.read_text()
    found = sections(page)
    assert list(found) == list(SECTION_IDS)
    records = load_records(RunDirectory(offline_run))
    summary = json.loads((offline_run / "summary.json").read_text())
    assert len(records) == summary["candidates"] == 2 and all(r.passed for r in records)
    assert [r.kind for r in records][0] == "baseline" and records[1].parent_ids[0].startswith("kb:")
    # nothing was timed on this CPU, and the page says so instead of showing a speed
    assert "not timed: no GPU" in found["progress"] and "not timed: no GPU" in found["margin"]
    assert "offline: no model calls" in found["cost"]
    assert summary["best"]["h100"]["candidate"] in found["kernels"]
    # where the evaluations' seconds went: every evaluation's phases, none of it GPU time on a CPU
    assert {"cold_start", "open_context", "correctness", "correctness.trial"} <= set(summary["phase_seconds"])
    assert summary["gpu_busy_fraction"] == 0.0 and summary["evaluation_wall_s"] > 0
    assert "<td>correctness</td>" in found["time"] and "evaluations ran on the CPU for" in found["time"]
    # charts are written beside the page and embedded in it, byte for byte; nothing is fetched
    for name in ("report_progress.png", "report_margin.png"):
        png = (offline_run / name).read_bytes()
        assert png.startswith(b"\x89PNG")
        assert f"data:image/png;base64,{base64.b64encode(png).decode()}" in page
    assert not re.search(r'(src|href)="(?!data:|#)', page)
    assert "http://" not in page.replace(str(offline_run), "") and "https://" not in page


# -- a timed run with a lineage --------------------------------------------------------------

def test_the_winners_lineage_shows_each_step_with_its_diff_and_gain(timed_run):
    records = {r.id: r for r in load_records(timed_run)}
    assert records["g2-c00"].time_on("h100") == pytest.approx(0.4)
    assert records["g2-c01"].status == "no_code" and "no" in records["g2-c01"].reason
    tree = lineage(list(records.values()), "g2-c00")
    assert [p.ref for p in tree.parents] == ["g1-c00", "g1-c01"]
    assert tree.parents[0].parents[0].parents[0].ref == f"kb:{KB_ID}"
    assert tree.parents[0].parents[0].parents[0].record.id == "g0-c00"  # its re-measure in this run

    part = sections(write_report(timed_run.path).read_text())["lineage"]
    steps = re.findall(r"<summary>(.*?)</summary>", part)
    assert [s.split(": <span")[0] for s in steps] == [
        "g1-c00 &rarr; g2-c00", "g0-c01 &rarr; g1-c00", f"kb:{KB_ID} &rarr; g0-c01", "g1-c01 &rarr; g2-c00"]
    gains = [re.search(r"gain ([0-9.]+)x", s).group(1) for s in steps]
    assert gains == ["1.250", "1.600", "1.250", "2.250"]  # parent time / child time
    # each step's change, as a unified diff of the parent's source into the child's
    assert "<span class=\"del\">-BLOCK = 1024</span>" in part and "<span class=\"add\">+BLOCK = 2048</span>" in part
    assert "<span class=\"add\">+BLOCK = 4096</span>" in part
    assert "g1-c02" not in part  # a sibling that lost is not the winner's lineage


def test_progress_margin_and_operators_read_the_measured_figures(timed_run):
    page = write_report(timed_run.path).read_text()
    found = sections(page)
    assert list(found) == list(SECTION_IDS)
    assert "best speedup over torch.compile" in found["progress"]
    assert "<td>h100</td><td>1.5</td><td>6</td>" in found["progress"]  # 0.6 / 0.4, after six evaluated
    assert "not timed" not in found["progress"]
    # margins: error / tolerance, the rejected one beyond 1
    assert "<td>g2-c00</td><td>passed</td><td>9e-05</td><td>0.9</td>" in found["margin"]
    assert "<td>30</td>" in found["margin"]
    rows = dict(re.findall(r"<tr><td>([a-z]+)</td>(.*?)</tr>", found["operators"]))
    assert set(rows) == {"mutate", "improve", "generate", "crossover", "fix"}
    # improve: g1-c00 beat its parent; g2-c01's reply held no code (tried, not passed)
    assert rows["improve"] == "<td>2</td><td>1</td><td>50%</td><td>1</td><td>50%</td>"
    assert rows["fix"].startswith("<td>1</td><td>0</td><td>0%</td><td>0</td>")
    assert "<td>1.50x</td>" in found["kernels"] and "0.4 ms on NVIDIA H100" in found["kernels"]
    assert "<td><b>total</b></td><td>5</td><td>7000</td><td>1900</td>" in found["cost"]
    assert "$0.0125" in found["cost"] and "<td>unpriced</td>" in found["cost"]
    assert "7 (5 passed, 1 rejected, 1 without code, 0 pending)" in page
    assert "<td>static</td><td>6.00</td><td>25%</td>" in found["time"]  # of the 24 top-level seconds
    assert "<td>&nbsp;&nbsp;correctness.trial</td><td>12.00</td><td>50%</td>" in found["time"]
    assert "GPU busy 22% of the 54.0 s" in found["time"]
    assert (timed_run.path / "report_progress.png").is_file() and (timed_run.path / "report_margin.png").is_file()


def test_untrusted_text_never_reaches_the_page_unescaped(timed_run):
    page = write_report(timed_run.path).read_text()
    assert PAYLOAD not in page and "<img src=x" not in page
    escaped = "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
    found = sections(page)
    assert escaped in found["cost"] and escaped in found["summary"]  # the model name, the reason
    assert "&lt;/script&gt;" in found["kernels"] and "&lt;img src=x" in found["lineage"]  # kernel sources
    assert page.count("<script>") == 1  # the page's own check, nothing else
    assert "script-src 'sha256-" in page and "default-src 'none'" in page


def test_an_unfinished_or_empty_run_still_gets_a_page_that_says_so(tmp_path):
    unfinished = make_timed_run(tmp_path / "unfinished", finished=False)
    page = write_report(unfinished.path).read_text()
    assert list(sections(page)) == list(SECTION_IDS) and 'id="unfinished"' in page
    assert "best kernel so far" in sections(page)["kernels"] and "g2-c00" in sections(page)["lineage"]
    # no summary yet: the figures of the evaluations saved so far (six of 1 + 3 s, each 2 s on the GPU)
    assert "<td>correctness</td><td>18.00</td><td>75%</td>" in sections(page)["time"]
    assert "GPU busy 22% of the 54.0 s" in sections(page)["time"]
    empty = RunDirectory(tmp_path / "empty")
    empty.path.mkdir()
    empty.write("run.json", json.dumps({"options": {"request": "Triton GELU for H100", "device": "cpu"}}))
    page = write_report(empty.path, tmp_path / "elsewhere").read_text()
    assert (tmp_path / "elsewhere" / "report.html").is_file()
    found = sections(page)
    assert list(found) == list(SECTION_IDS)
    assert 'id="no-candidates"' in page and "offline: no model calls" in found["cost"]
    assert "no evaluation recorded a timeline" in found["time"]
    assert not list((tmp_path / "elsewhere").glob("*.png"))


# -- the command -----------------------------------------------------------------------------

def _kgen(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KGEN_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_kgen_report_finds_a_run_like_resume_and_refuses_an_unknown_one(tmp_path):
    home = tmp_path / "home"
    run = make_timed_run(home / "runs" / "20261122-081500-3fa9c1")
    done = _kgen("report", "20261122-0815", home=home)  # the start of its id, under the runs folder
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run.path / "report.html") and (run.path / "report.html").is_file()
    done = _kgen("report", str(run.path), "--out", str(tmp_path / "out"), home=home)
    assert done.returncode == 0 and done.stdout.strip() == str(tmp_path / "out" / "report.html")
    bad = _kgen("report", "no-such-run", home=home)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no run 'no-such-run'")
    assert "Traceback" not in bad.stderr


# -- a real browser --------------------------------------------------------------------------

def _chromium() -> str | None:
    return next((p for name in ("chromium", "chromium-browser", "google-chrome")
                 if (p := shutil.which(name))), None)


def _browse(browser: str, page: Path, profile: Path, *extra: str) -> str:
    """Run a headless Chromium on the page (no network needed); kill only it if it hangs."""
    process = subprocess.Popen(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", *extra, page.as_uri()],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"chromium did not finish on {page} within 90 s")
    return out


@pytest.mark.skipif(_chromium() is None, reason="no chromium / chromium-browser / google-chrome binary on PATH")
@pytest.mark.slow
def test_a_headless_chromium_renders_every_section_and_decodes_every_chart(offline_run, tmp_path):
    browser = _chromium()
    assert browser is not None
    timed = make_timed_run(tmp_path / "timed")
    for page in (write_report(offline_run), write_report(timed.path)):
        charts = sorted(page.parent.glob("report_*.png"))
        assert len(charts) == 2
        dom = _browse(browser, page, tmp_path / f"profile-{page.parent.name}", "--dump-dom")
        for section in SECTION_IDS:
            assert f'<section id="{section}">' in dom
        mark = re.search(r'id="render-check" data-images-ok="(\d+)" data-images-total="(\d+)"', dom)
        assert mark is not None, "the page's check did not run"
        assert mark.groups() == ("2", "2")  # the charts, decoded; no injected <img> among them
        assert 'data-rendered="ok"' in dom
        shot = tmp_path / f"{page.parent.name}.png"
        _browse(browser, page, tmp_path / f"profile-{page.parent.name}-shot", f"--screenshot={shot}",
                "--window-size=1280,4000")
        assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
