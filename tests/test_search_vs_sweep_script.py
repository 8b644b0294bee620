"""scripts/search_vs_sweep.py: the GPU benchmark of kgen's offline search against an exhaustive
sweep, exercised on the CPU (``--dry-run``): every variant of the space built and imported, a few
checked in the interpreter, and kgen's real offline run started from the de-tuned seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "search_vs_sweep.py"


def _run(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_")}
    env["KGEN_HOME"] = str(home)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=home.parent, timeout=timeout)


def test_help_says_what_is_claimed_and_how_to_run_it(tmp_path):
    done = _run("--help", home=tmp_path / "home")
    assert done.returncode == 0
    for words in ("within 5%", "25%", "--dry-run", "--run-option", "--merge", "parameter_space"):
        assert words in done.stdout, words


def test_without_a_gpu_a_real_run_is_a_usage_error_that_points_to_the_dry_run(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    done = _run("--problems", "softmax", "--out", str(tmp_path / "out"), home=tmp_path / "home")
    assert done.returncode == 2 and "--dry-run" in done.stderr


def test_an_unknown_problem_without_a_seed_is_a_usage_error(tmp_path):
    done = _run("--dry-run", "--problems", "gelu", "--out", str(tmp_path / "out"), home=tmp_path / "home")
    assert done.returncode == 2 and "no seed" in done.stderr


@pytest.mark.slow
def test_a_cpu_dry_run_builds_the_whole_space_and_runs_kgens_search_from_the_seed(tmp_path):
    out = tmp_path / "out"
    done = _run("--dry-run", "--problems", "layernorm_forward", "--budget", "2", "--out", str(out),
                home=tmp_path / "home", timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "layernorm_forward" / "result.json").read_text())
    assert result["space_size"] == 40 and len(result["sweep"]) == 40
    assert not [row for row in result["sweep"] if row["error"]]  # every variant imports
    assert sum(1 for row in result["sweep"] if row["checked"]) == 2  # two ran in the interpreter
    assert result["seed_config"] in [row["config"] for row in result["sweep"]]
    search = result["search"]
    # the run started from the seed alone (its knowledge base held nothing else) and verified
    # the seed plus one tuned variant on the CPU
    assert search["evaluations"] == search["candidate_dirs"] == 2
    assert search["trail"][0]["config"] == result["seed_config"]
    assert all(row["verdict"] == "passed" for row in search["trail"])
    assert result["winner_config"] is not None and result["winner_in_space"]
    assert result["verdict"] == "dry run" and result["ratio"] is None  # nothing timed, nothing judged
    table = (out / "search_vs_sweep.md").read_text()
    assert "| layernorm_forward | 40 |" in table and "dry run" in table
    assert json.loads((out / "search_vs_sweep.json").read_text())[0]["problem"] == "layernorm_forward"

    # a result merged elsewhere makes the same table
    merged = tmp_path / "merged"
    done = _run("--merge", str(out / "layernorm_forward" / "result.json"), "--out", str(merged),
                home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert "| layernorm_forward | 40 |" in (merged / "search_vs_sweep.md").read_text()


def _judged(tmp_path: Path, winner_ms: float, evaluations: int) -> subprocess.CompletedProcess:
    """A GPU result written by hand (no GPU here): the report's verdicts and exit code."""
    best = {"programs_per_sm@_grid_programs": 2, "num_warps@_ln_fwd_rows": 8}
    other = {"programs_per_sm@_grid_programs": 4, "num_warps@_ln_fwd_rows": 8}
    sweep = [{"config": best, "ms": 0.100, "error": None, "in_space": True, "device_name": "NVIDIA H100"},
             {"config": other, "ms": winner_ms, "error": None, "in_space": True}]
    search = {"evaluations": evaluations, "winner": {"config": other}, "stop_reason": "budget spent",
              "seconds": 100.0, "passed": evaluations, "run_dir": "run"}
    result = {"problem": "layernorm_forward", "target": "h100", "device": "cuda", "dry_run": False,
              "seed_config": best, "space_size": 40, "knobs": list(best), "share_allowed": 0.25,
              "tolerance": 0.05, "search": search, "sweep": sweep}
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import search_vs_sweep
    finally:
        sys.path.remove(str(SCRIPT.parent))
    search_vs_sweep.judge(result)
    path = tmp_path / f"r_{winner_ms}_{evaluations}.json"
    path.write_text(json.dumps(result))
    return _run("--merge", str(path), "--out", str(tmp_path / f"out_{winner_ms}_{evaluations}"),
                home=tmp_path / "home")


def test_the_report_passes_only_when_both_criteria_hold(tmp_path):
    passed = _judged(tmp_path, winner_ms=0.104, evaluations=10)
    assert passed.returncode == 0 and "| 1.040 |" in passed.stdout and "PASS" in passed.stdout
    slow = _judged(tmp_path, winner_ms=0.106, evaluations=10)
    assert slow.returncode == 1 and "**no**" in slow.stdout and "FAIL" in slow.stdout
    costly = _judged(tmp_path, winner_ms=0.100, evaluations=11)
    assert costly.returncode == 1 and "28%" in costly.stdout and "FAIL" in costly.stdout


_TIMED_SWEEP = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import search_vs_sweep as svs
from kgen.agent.search.mutation import parameter_space
from kgen.backends.targets import resolve_target

out = Path(sys.argv[2])
target = resolve_target("h100")
seed = (Path(sys.argv[1]) / "detuned_seeds" / "softmax.py").read_text()
points = parameter_space(seed, target)[:2]
paths = svs.write_variants("softmax", seed, points, target, out)
wrong = out / "wrong.py"  # computes something else: a failed check, not a crash
wrong.write_text(paths[0].read_text().replace("* inv_sum", "* inv_sum * 2.0"))
broken = out / "broken.py"  # raises: a failed row too
broken.write_text(paths[0].read_text().replace("n_cols = x.shape[-1]", "n_cols = x.shape[7]"))
points += [dict(points[0], rows_each=8), dict(points[0], rows_each=16)]
paths += [wrong, broken]
calls = []

def timer(fn, input_sets, budget_s, min_trials):
    started = time.perf_counter()
    fn(*input_sets[len(calls) % len(input_sets)])
    calls.append(budget_s)
    return {"ms": (time.perf_counter() - started) * 1e3, "trials": 1, "device_name": "cpu (test timer)"}

args = svs.parse_args(["--compile-jobs", "2", "--sweep-budget", "0.01", "--confirm-budget", "0.02"])
sizes = {"ROWS": 5, "COLS": 300}
rows = svs.sweep_timed("softmax", points, paths, args, device="cpu", sizes=sizes, timer=timer)
again = svs.confirm("softmax", {"a": paths[0], "b": paths[1]}, args, device="cpu", sizes=sizes, timer=timer)
print(json.dumps({"rows": rows, "confirmed": again, "budgets": calls}))
"""


@pytest.mark.slow
def test_the_timed_sweep_checks_every_point_and_records_failures_without_stopping(tmp_path):
    """The GPU sweep's code on the CPU (the interpreter, a stand-in timer): compiled ahead in
    worker processes, each point checked against the reference once, then timed; a variant
    that computes the wrong thing or raises is a row with its error, and the sweep goes on."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "KGEN_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", _TIMED_SWEEP, str(SCRIPT.parent), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    rows = found["rows"]
    assert [r["error"] is None for r in rows] == [True, True, False, False]
    assert "max abs error" in rows[2]["error"] and "IndexError" in rows[3]["error"]
    assert rows[0]["ms"] > 0 and rows[0]["device_name"] == "cpu (test timer)" and rows[2]["ms"] is None
    assert set(found["confirmed"]) == {"a", "b"}
    # two timed points at the sweep's budget, then two rounds of two at the confirming budget
    assert found["budgets"] == [0.01, 0.01, 0.02, 0.02, 0.02, 0.02]


def test_re_timed_figures_decide_when_there_are_some(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import search_vs_sweep
    finally:
        sys.path.remove(str(SCRIPT.parent))
    a, b, c = {"k": 1}, {"k": 2}, {"k": 3}
    sweep = [{"config": a, "ms": 0.090, "confirm_ms": 0.101, "error": None, "in_space": True},
             {"config": b, "ms": 0.095, "confirm_ms": 0.100, "error": None, "in_space": True},
             {"config": c, "ms": 0.200, "error": None, "in_space": True}]
    result = {"seed_config": c, "space_size": 40, "share_allowed": 0.25, "tolerance": 0.05,
              "dry_run": False, "sweep": sweep,
              "search": {"evaluations": 10, "winner": {"config": a}}}
    search_vs_sweep.judge(result)
    assert result["sweep_best"]["config"] == b and result["decided_by"] == "re-timed"
    assert result["ratio"] == pytest.approx(1.01) and result["verdict"] == "PASS"
    assert result["seed_ms"] == 0.200
