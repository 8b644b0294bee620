"""`kgen eval` and `kgen bench` as a person runs them at 80 columns: names suggested, tables that
fit, exit codes a script can use, and stdout that is only the markdown under ``--markdown``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from kgen.evals.problem.catalog import catalog
from kgen.evals.suites.suite import find_candidate
from kgen.knowledge_base import SEED_KERNELS_DIR

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
RELU_SOLUTION = FIXTURES / "candidates" / "relu_kernelbench_solution.py"


def kgen_80(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The command in a console 80 wide (stdout a pipe, as `kgen ... > file` runs), from the
    folder beside ``home``, so that folders given by relative paths are said short."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_") and not k.endswith("_API_KEY")}
    env.update(KGEN_HOME=str(home), COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=home.parent)


def too_wide(text: str, width: int = 80) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def test_eval_of_an_unknown_name_suggests_only_close_names(home, tmp_path):
    """`kgen eval no_such_problem` suggested log_softmax, layernorm_trailing, rmsnorm_forward."""
    out = kgen_80(home, "eval", "no_such_problem", str(RELU_SOLUTION))
    assert out.returncode == 2 and "unknown problem 'no_such_problem'" in out.stderr
    assert "did you mean" not in out.stderr and "kgen problems list" in out.stderr
    out = kgen_80(home, "eval", "rmsnrom_forward", str(RELU_SOLUTION))
    assert out.returncode == 2 and "did you mean rmsnorm_forward" in out.stderr


def test_bench_on_a_fresh_install_leaves_problems_without_a_shipped_kernel_out_of_its_exit_code(home, tmp_path):
    """`kgen bench --small` exited 1 on a fresh install only because some catalog problems have
    no shipped kernel, and each "missing (no candidate file)" wrapped over 3 lines at 80 columns.
    Such a problem is a row of one line, said once to be left out of the exit code; the table
    fits 80 columns, and fast_p with nothing timed reads as unmeasured, not as 0.00."""
    unshipped = max((info for info in catalog() if find_candidate(info, SEED_KERNELS_DIR / "triton") is None),
                    key=lambda info: len(info.name))  # the longest name: the hardest row to fit
    suite = tmp_path / "suite"
    suite.mkdir()
    for info in (next(info for info in catalog() if info.name == "gelu"), unshipped):
        shutil.copy(info.path, suite / info.path.name)
    out = kgen_80(home, "bench", "suite", "--small", "--device", "cpu", "--out", "out")
    assert out.returncode == 0, out.stdout + out.stderr
    assert too_wide(out.stdout) == [], out.stdout
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.split()[:1] in (["gelu"], [unshipped.name])}
    assert "passed" in rows["gelu"] and "missing (no shipped kernel)" in rows[unshipped.name]
    said = " ".join(out.stdout.split())  # the lines under the table wrap at spaces to the width
    assert "1 problem without a shipped kernel: not run, left out of the exit code" in said
    assert "fast_0 0.50, fast_1 n/a, fast_1.5 n/a, fast_2 n/a (n/a: nothing timed)" in said
    assert "0.00" not in out.stdout


def test_bench_with_its_own_candidates_still_counts_a_missing_one(home, tmp_path):
    """With --candidates every problem of the suite is selected: one without a candidate is 1."""
    suite, candidates = tmp_path / "suite", tmp_path / "candidates"
    suite.mkdir()
    candidates.mkdir()
    shutil.copy(RELU, suite / "relu_kernelbench.py")
    shutil.copy(RELU, suite / "no_candidate.py")
    shutil.copy(RELU_SOLUTION, candidates / "relu_kernelbench.py")
    out = kgen_80(home, "bench", str(suite), "--candidates", str(candidates), "--device", "cpu", "--out",
                  str(tmp_path / "out"), "--markdown")
    assert out.returncode == 1, out.stdout + out.stderr
    # --markdown > file: stdout is the markdown table and nothing else; what was written goes to stderr
    assert out.stdout.rstrip("\n") == (tmp_path / "out" / "suite.md").read_text().rstrip("\n")
    assert "wrote " in out.stderr
