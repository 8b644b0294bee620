"""Suites: discovery, candidate pairing, rows from results, fast_p arithmetic, the four outputs."""

import csv
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kgen.evals.problem.catalog import catalog
from kgen.evals.problem.format import ProblemInfo, read_problem
from kgen.evals.result import EvalResult
from kgen.evals.suites.suite import (
    SuiteRow,
    discover_suite,
    fast_line,
    find_candidate,
    in_suite_order,
    load_failure,
    render_markdown,
    row_from_result,
    scan_suite,
    summarize,
    unreadable_rows,
    write_suite_outputs,
)
from kgen.evals.verdict import RejectionClass, Verdict

HAS_BENCH = "bench" in EvalResult.model_fields

PROBLEM_SRC = '''
import torch
N = 1024
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
'''


def info(name: str, stem: str | None = None) -> ProblemInfo:
    return ProblemInfo(name=name, path=Path(f"/nowhere/{stem or name}.py"))


def result(name: str, passed: bool = True, **extra) -> EvalResult:
    return EvalResult(
        problem=name, problem_path=f"/nowhere/{name}.py", candidate=f"/c/{name}.py",
        backend="triton", device="cuda",
        verdict=Verdict.PASSED if passed else Verdict.REJECTED,
        rejection=None if passed else RejectionClass.MISMATCH,
        reason="" if passed else "rel_l2 0.3 > 0.01", **extra,
    )


def bench(candidate_ms: float, eager_ms: float, compile_ms: float | None = None,
          pct: float | None = 50.0) -> dict:
    measurements = {
        "candidate": {"median_ms": candidate_ms, "p10_ms": candidate_ms, "p90_ms": candidate_ms,
                      "trials": 100, "sync_ratio": 0.01, "flags": []},
        "eager": {"median_ms": eager_ms, "trials": 100, "flags": []},
        "torch.compile": ({"median_ms": compile_ms, "trials": 100, "flags": []}
                          if compile_ms is not None else {"error": "compile failed"}),
    }
    sol = None if pct is None else {
        "achieved_tbs": 2.5, "achieved_tflops": 0.1, "pct_of_sol": pct, "score": 0.7,
    }
    return {"device_name": "NVIDIA H100 80GB HBM3", "sizes": {"N": 1024},
            "measurements": measurements, "errors": {"liger": "not installed"}, "sol": sol}


def timed_row(name: str, speedup: float | None, correct: bool = True,
              compile_speedup: float | None = None) -> SuiteRow:
    """A row as row_from_result would build it from a bench block (built directly when
    EvalResult has no bench field yet)."""
    if speedup is None:
        return row_from_result(result(name, correct), info(name), f"/c/{name}.py")
    cand = 1.0
    compile_ms = compile_speedup * cand if compile_speedup is not None else None
    b = bench(cand, speedup * cand, compile_ms)
    if HAS_BENCH:
        return row_from_result(result(name, correct, bench=b), info(name), f"/c/{name}.py")
    return SuiteRow(
        problem=name, candidate=f"/c/{name}.py", verdict="passed" if correct else "rejected",
        candidate_ms=cand, eager_ms=speedup * cand, compile_ms=compile_ms,
        speedup_vs_eager=speedup, speedup_vs_compile=compile_speedup, pct_of_sol=50.0,
        achieved_tbs=2.5, achieved_tflops=0.1, sol_score=0.7,
        device_name="NVIDIA H100 80GB HBM3",
    )


def kernelbench_rows() -> list[SuiteRow]:
    """4 problems: 3 correct with speedups 0.5, 1.2, 3.0 vs eager, 1 missing."""
    return [
        timed_row("a", 0.5, compile_speedup=0.4),
        timed_row("b", 1.2, compile_speedup=1.1),
        timed_row("c", 3.0, compile_speedup=2.5),
        row_from_result(None, info("d"), None),
    ]


# --------------------------------------------------------------------------- discovery


def test_discover_none_is_the_catalog():
    assert [i.name for i in discover_suite(None)] == [i.name for i in catalog()]


def test_discover_folder_skips_non_problems(tmp_path):
    (tmp_path / "1_Square.py").write_text(PROBLEM_SRC)
    (tmp_path / "2_Double.py").write_text(PROBLEM_SRC)
    (tmp_path / "helpers.py").write_text("def f():\n    return 1\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    (tmp_path / "__init__.py").write_text("")
    infos = discover_suite(tmp_path)
    assert [i.name for i in infos] == ["1_Square", "2_Double"]
    _, skipped = scan_suite(tmp_path)
    assert sorted(p.name for p, _ in skipped) == ["broken.py", "helpers.py"]
    with pytest.raises(FileNotFoundError):
        discover_suite(tmp_path / "absent")


#: problem files kgen cannot read, each broken its own way: file name -> bytes
BROKEN_PROBLEMS = {
    "3_syntax.py": (PROBLEM_SRC + "def (:\n").encode(),
    "4_undecodable.py": PROBLEM_SRC.encode() + b"# \xff\xfe not utf-8\n",
    "5_no_inputs.py": PROBLEM_SRC.replace("def get_inputs", "def make_inputs").encode(),
    "6_bad_metadata.py": (PROBLEM_SRC + "KGEN_ALIASES = [N]\n").encode(),
}


def test_every_problem_file_that_cannot_be_read_is_a_row_in_the_denominator(tmp_path):
    """A broken problem file (syntax, bytes, a missing name, bad metadata) is an "unreadable" row
    with its reason, in suite order and in fast_p's denominator; a helper module is no input."""
    (tmp_path / "1_Square.py").write_text(PROBLEM_SRC)
    (tmp_path / "helpers.py").write_text("def f():\n    return 1\n")
    for name, data in BROKEN_PROBLEMS.items():
        (tmp_path / name).write_bytes(data)
    infos, skipped = scan_suite(tmp_path)
    unreadable = unreadable_rows(skipped)
    assert {row.problem for row in unreadable} == {Path(name).stem for name in BROKEN_PROBLEMS}
    assert all(row.verdict == "unreadable" and row.reason and not row.correct for row in unreadable)
    assert "syntax error on line" in next(r.reason for r in unreadable if r.problem == "3_syntax")
    assert "get_inputs" in next(r.reason for r in unreadable if r.problem == "5_no_inputs")
    rows = in_suite_order([row_from_result(result("1_Square"), infos[0], "/c/1_Square.py"), *unreadable])
    assert [row.problem for row in rows] == ["1_Square", "3_syntax", "4_undecodable", "5_no_inputs",
                                             "6_bad_metadata"]
    summary = summarize(rows)
    assert (summary.problems, summary.correct, summary.unreadable) == (5, 1, 4)
    assert summary.fast_p_vs_eager["0"] == pytest.approx(0.2) and summary.exit_code == 1
    table = render_markdown(rows, summary, "kgen bench x", "2026-01-01")
    assert "1 of 5 correct" in table and "| 3_syntax | unreadable (problem file" in table


def test_a_problem_that_reads_but_cannot_load_says_why(tmp_path):
    """Loading runs the file: an import that fails or an error at module level is the problem's
    fault, named before any candidate is judged against it."""
    cases = {"missing_import.py": "import kgen_no_such_module\n" + PROBLEM_SRC,
             "raises.py": PROBLEM_SRC + "raise RuntimeError('half-written reference')\n",
             "fine.py": PROBLEM_SRC}
    failures = {}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        failures[name] = load_failure(read_problem(tmp_path / name))
    assert "ModuleNotFoundError" in failures["missing_import.py"]
    assert "half-written reference" in failures["raises.py"]
    assert failures["fine.py"] is None


@pytest.mark.parametrize("verdicts, code", [
    (["passed"], 0), (["passed", "passed"], 0), (["passed", "missing"], 1), (["passed", "rejected"], 1),
    (["passed", "inconclusive"], 1), (["passed", "unreadable"], 1), ([], 1),
])
def test_one_exit_code_rule_for_a_suite(verdicts, code):
    """0 only when every problem of the suite has a verified kernel (an empty suite verified
    nothing); the rule `kgen bench` and `kgen solve` both exit by."""
    rows = [SuiteRow(problem=f"p{i}", verdict=v) for i, v in enumerate(verdicts)]
    assert summarize(rows).exit_code == code


def test_find_candidate_by_name_stem_or_solution(tmp_path):
    problem = info("rmsnorm_forward", stem="7_RMSNorm")
    assert find_candidate(problem, tmp_path) is None
    (tmp_path / "7_RMSNorm_solution.py").write_text("")
    assert find_candidate(problem, tmp_path) == tmp_path / "7_RMSNorm_solution.py"
    (tmp_path / "7_RMSNorm.py").write_text("")
    assert find_candidate(problem, tmp_path) == tmp_path / "7_RMSNorm.py"
    (tmp_path / "rmsnorm_forward.py").write_text("")
    assert find_candidate(problem, tmp_path) == tmp_path / "rmsnorm_forward.py"


# --------------------------------------------------------------------------- rows


def test_row_from_missing_and_rejected_results():
    missing = row_from_result(None, info("x"), None)
    assert missing.verdict == "missing" and missing.candidate is None
    rejected = row_from_result(result("x", passed=False), info("x"), "/c/x.py")
    assert rejected.verdict == "rejected" and rejected.rejection == "numerical_mismatch"
    assert rejected.reason and rejected.candidate_ms is None


@pytest.mark.skipif(not HAS_BENCH, reason="EvalResult has no bench field yet")
def test_row_from_bench_block():
    row = row_from_result(result("x", bench=bench(0.5, 1.0, None)), info("x"), "/c/x.py")
    assert row.candidate_ms == 0.5 and row.eager_ms == 1.0
    assert row.speedup_vs_eager == pytest.approx(2.0)
    assert row.compile_ms is None and row.speedup_vs_compile is None
    assert row.pct_of_sol == 50.0 and row.sol_score == 0.7 and row.achieved_tbs == 2.5
    assert row.device_name == "NVIDIA H100 80GB HBM3"
    assert "torch.compile: compile failed" in row.flags and "liger: not installed" in row.flags


def test_a_ratio_whose_intervals_overlap_is_not_claimed_in_the_table():
    b = bench(1.0, 2.0, 1.3)
    b["measurements"]["eager"].update(p10_ms=1.9, p90_ms=2.1)
    b["measurements"]["torch.compile"].update(p10_ms=0.95, p90_ms=1.4)
    row = row_from_result(result("x", bench=b), info("x"), "/c/x.py")
    assert row.same_speed_as == ["torch.compile"] and row.speedup_vs_compile == pytest.approx(1.3)
    table = render_markdown([row], summarize([row]), "kgen bench", "2026-01-01")
    line = next(line for line in table.splitlines() if line.startswith("| x |"))
    assert "| 2.00x | ≈1.30x | - |" in line


# --------------------------------------------------------------------------- summary


def test_fast_p_kernelbench_arithmetic():
    summary = summarize(kernelbench_rows())
    assert summary.problems == 4 and summary.correct == 3 and summary.timed == 3
    assert summary.fast_p_vs_eager == pytest.approx({"0": 0.75, "1": 0.5, "1.5": 0.25, "2": 0.25})
    assert summary.fast_p_vs_compile == pytest.approx({"0": 0.75, "1": 0.5, "1.5": 0.25, "2": 0.25})
    assert summary.geomean_speedup_vs_eager == pytest.approx((0.5 * 1.2 * 3.0) ** (1 / 3))
    assert summary.geomean_speedup_vs_compile == pytest.approx((0.4 * 1.1 * 2.5) ** (1 / 3))
    assert summary.device_name == "NVIDIA H100 80GB HBM3"


def test_rejected_fast_rows_do_not_count_and_missing_stay_in_denominator():
    rows = [timed_row("a", 5.0, correct=False), timed_row("b", 2.5),
            row_from_result(None, info("c"), None), row_from_result(None, info("d"), "/c/d.py")]
    summary = summarize(rows)
    assert summary.fast_p_vs_eager == pytest.approx({"0": 0.25, "1": 0.25, "1.5": 0.25, "2": 0.25})
    assert summary.geomean_speedup_vs_eager == pytest.approx(2.5)


def test_no_timings_summary():
    """With nothing timed, fast_p for p > 0 is unmeasured (None, "n/a" wherever it is printed),
    never 0.00, which reads as slow; fast_0 is the correctness rate, measured without a GPU."""
    rows = [timed_row("a", None), timed_row("b", None, correct=False)]
    summary = summarize(rows)
    assert summary.fast_p_vs_eager == {"0": 0.5, "1": None, "1.5": None, "2": None}
    assert summary.geomean_speedup_vs_eager is None and summary.timed == 0
    assert summarize([]).fast_p_vs_eager["0"] == 0.0
    figures = "fast_0 0.50, fast_1 n/a, fast_1.5 n/a, fast_2 n/a (n/a: nothing timed)"
    assert fast_line("fast_p vs eager", summary.fast_p_vs_eager) == f"fast_p vs eager: {figures}"
    assert f"fast_p vs torch.compile: {figures}" in render_markdown(rows, summary, "kgen bench", "2026-01-01")


@pytest.mark.parametrize("verdicts, selected, code", [
    ({"a": "passed", "b": "missing"}, {"a"}, 0),  # `kgen solve --only a`: b was not asked for
    ({"a": "passed", "b": "missing"}, {"b"}, 1),
    ({"a": "passed", "b": "missing"}, None, 1),  # no selection: every problem is selected
    ({"a": "passed"}, set(), 1),  # an empty selection verified nothing
])
def test_the_selected_problems_decide_the_exit_code(verdicts, selected, code):
    """`kgen solve --only` exited 1 with every selected problem verified ("2 of 100 correct")."""
    rows = [SuiteRow(problem=name, verdict=verdict) for name, verdict in verdicts.items()]
    summary = summarize(rows, selected=selected)
    assert summary.exit_code == code
    assert (summary.problems, summary.correct) == (len(rows), sum(v == "passed" for v in verdicts.values()))


# --------------------------------------------------------------------------- outputs


def test_outputs_written_and_parseable(tmp_path):
    rows = kernelbench_rows()
    summary = summarize(rows)
    paths = write_suite_outputs(rows, summary, tmp_path / "out", "kgen suite --json", "2026-11-22")
    assert set(paths) == {"json", "csv", "svg", "md"}

    data = json.loads(paths["json"].read_text())
    assert data["summary"]["fast_p_vs_eager"]["1"] == 0.5
    assert [r["problem"] for r in data["rows"]] == ["a", "b", "c", "d"]
    assert data["command"] == "kgen suite --json" and data["date"] == "2026-11-22"

    with paths["csv"].open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 4 and table[0]["device"] == "NVIDIA H100 80GB HBM3"
    assert table[3]["verdict"] == "missing" and table[3]["device"] == "NVIDIA H100 80GB HBM3"
    assert math.isclose(float(table[2]["speedup_vs_eager"]), 3.0)

    md = paths["md"].read_text()
    assert md.startswith("`kgen suite --json`, NVIDIA H100 80GB HBM3, 2026-11-22")
    assert "| problem | verdict | policies | time ms | TB/s | TFLOP/s | %SOL | vs eager | vs compile | vs Liger |" in md
    assert "| c | passed |" in md and "3.00x" in md
    assert "fast_0 0.75, fast_1 0.50, fast_1.5 0.25, fast_2 0.25" in md
    assert "geomean" in md

    root = ET.parse(paths["svg"]).getroot()
    assert root.tag.endswith("svg")
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert {"a", "b", "c", "d"} <= set(texts)
    assert "1x" in texts and "3.00x" in texts and "50%" in texts
    assert not any("timings need a GPU" in t for t in texts)


def test_no_timing_chart_says_timings_need_a_gpu(tmp_path):
    rows = [timed_row("a", None), timed_row("b", None, correct=False),
            row_from_result(None, info("c & <d>"), None)]
    paths = write_suite_outputs(rows, summarize(rows), tmp_path, "kgen suite --device cpu",
                                "2026-11-22")
    root = ET.parse(paths["svg"]).getroot()
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "timings need a GPU" in texts
    assert "passed" in texts and "rejected" in texts and "missing" in texts
    assert "c & <d>" in texts
    md = paths["md"].read_text()
    assert "timings need a GPU" in md.splitlines()[0]
    assert "| b | rejected (numerical_mismatch) | precision ieee, torch ops strict | - |" in md


def test_a_kernelbench_level_folder_sorts_by_problem_number_and_finds_solutions_by_their_names(tmp_path):
    from kgen.evals.suites.suite import find_candidate, scan_suite

    level = tmp_path / "level1"
    level.mkdir()
    source = (Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench" / "level1" / "19_ReLU.py").read_text()
    for name in ("1_A.py", "2_B.py", "10_C.py", "19_ReLU.py"):
        (level / name).write_text(source)
    infos, _ = scan_suite(level)
    assert [i.name for i in infos] == ["1_A", "2_B", "10_C", "19_ReLU"]
    sols = tmp_path / "sols"
    sols.mkdir()
    (sols / "level1_2_B.py").write_text("")
    for sample in (3, 0, 12):
        (sols / f"level_1_problem_10_sample_{sample}_kernel.py").write_text("")
    (sols / "level_2_problem_19_sample_0_kernel.py").write_text("")  # another level's problem 19
    found = {i.name: find_candidate(i, sols) for i in infos}
    assert found["2_B"].name == "level1_2_B.py"
    assert found["10_C"].name == "level_1_problem_10_sample_0_kernel.py"
    assert found["1_A"] is None and found["19_ReLU"] is None


def test_quack_is_a_column_and_the_table_says_what_each_baseline_ran():
    b = bench(1.0, 2.0, 1.5)
    b["measurements"]["quack"] = {"median_ms": 1.25, "p10_ms": 1.2, "p90_ms": 1.3, "trials": 100, "flags": []}
    b["baseline_versions"] = {"torch": "2.11.0", "liger_kernel": "0.8.5", "quack_kernels": "0.6.5"}
    problem = ProblemInfo(name="x", path=Path("/nowhere/x.py"), baseline_compute="bf16 GEMM, fp32 accumulation",
                          has_baseline_class=True)
    row = row_from_result(result("x", bench=b), problem, "/c/x.py")
    assert row.quack_ms == 1.25 and row.speedup_vs_quack == pytest.approx(1.25)
    assert row.baseline == "Baseline: bf16 GEMM, fp32 accumulation"
    table = render_markdown([row], summarize([row]), "kgen bench", "2026-01-01")
    assert "| vs quack |" in table and "| 1.25x |" in table
    assert "- x: Baseline: bf16 GEMM, fp32 accumulation" in table
    assert "liger_kernel 0.8.5, quack_kernels 0.6.5, torch 2.11.0" in table
    plain = row_from_result(result("y", bench=bench(1.0, 2.0)), info("y"), "/c/y.py")
    assert plain.baseline == "Model: the reference as written"
