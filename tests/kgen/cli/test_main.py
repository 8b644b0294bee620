"""The `kgen` command as a person runs it: exit codes, one-line errors, JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = str(FIXTURES / "problems" / "relu_kernelbench.py")
CANDIDATES = FIXTURES / "candidates"


def kgen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_teaches_the_commands():
    out = kgen("--help")
    assert out.returncode == 0
    for command in ("eval", "problems", "targets"):
        assert command in out.stdout


def test_problems_list_shows_the_catalog():
    out = kgen("problems", "list")
    assert out.returncode == 0
    assert "rmsnorm_backward" in out.stdout and "problems." in out.stdout


def test_problems_show_prints_metadata_and_source():
    out = kgen("problems", "show", "rmsnorm bwd")
    assert out.returncode == 0
    assert "ROWS=37, HIDDEN=96" in out.stdout and "class Model" in out.stdout


def test_targets_lists_at_least_six():
    out = kgen("targets")
    assert out.returncode == 0
    for name in ("h100", "h200", "b200", "a100", "l40s", "mi300x"):
        assert name in out.stdout


def test_eval_passes_with_exit_code_zero():
    out = kgen("eval", RELU, str(CANDIDATES / "relu_kernelbench_solution.py"), "--device", "cpu")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASSED" in out.stdout


def test_eval_rejects_with_exit_code_one_and_json_says_why():
    out = kgen("eval", RELU, str(CANDIDATES / "relu_wrong_math.py"), "--device", "cpu", "--json")
    assert out.returncode == 1
    result = json.loads(out.stdout)
    assert result["verdict"] == "rejected"
    assert result["rejection"] == "numerical_mismatch"
    assert [s["name"] for s in result["stages"]] == ["static", "load", "correctness"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", RELU, "missing.py"], "candidate file not found: missing.py"),
        (["eval", "nope_problem", str(CANDIDATES / "relu_kernelbench_solution.py")], "unknown problem 'nope_problem'"),
        (["eval", RELU, str(CANDIDATES / "relu_kernelbench_solution.py"), "--target", "h900x"], "unknown hardware target 'h900x'"),
        (["eval", RELU, str(CANDIDATES / "relu_kernelbench_solution.py"), "--device", "tpu"], "--device must be"),
        (["problems", "show", "nope_problem"], "unknown problem"),
        (["eval", RELU, str(CANDIDATES / "relu_kernelbench_solution.py"), "--precision", "half"],
         "unknown precision policy 'half': choose ieee, tf32"),
        (["bench", "--device", "cpu", "--torch-ops", "lenient"], "unknown torch ops policy 'lenient': choose strict, library"),
        (["bench", "--device", "tpu"], "--device must be auto, cpu or cuda, not 'tpu'"),
    ],
)
def test_bad_usage_is_one_line_and_exit_code_two(args, message):
    out = kgen(*args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_bad_usage_with_json_prints_json_too():
    out = kgen("eval", RELU, "missing.py", "--json")
    assert out.returncode == 2
    assert json.loads(out.stdout) == {"verdict": "bad_usage", "reason": "candidate file not found: missing.py"}


def test_bench_without_a_gpu_verifies_and_writes_its_outputs(tmp_path):
    suite, candidates, out = tmp_path / "suite", tmp_path / "candidates", tmp_path / "out"
    suite.mkdir()
    candidates.mkdir()
    (suite / "relu_kernelbench.py").write_text(Path(RELU).read_text())
    (candidates / "relu_kernelbench.py").write_text((CANDIDATES / "relu_kernelbench_solution.py").read_text())
    (suite / "no_candidate.py").write_text(Path(RELU).read_text())
    result = kgen("bench", str(suite), "--candidates", str(candidates), "--out", str(out), "--device", "cpu",
                  "--markdown")
    # not every problem has a verified kernel: exit 1, the rule `kgen solve` exits by
    assert result.returncode == 1, result.stdout + result.stderr
    assert "timings need a GPU" in result.stderr
    # --markdown: suite.md's table on stdout, one row per line although stdout is no terminal
    table = [line for line in (out / "suite.md").read_text().splitlines() if line.startswith("|")]
    assert len(table) == 4 and all(line in result.stdout.splitlines() for line in table)
    report = json.loads((out / "suite.json").read_text())
    verdicts = {row["problem"]: row["verdict"] for row in report["rows"]}
    assert verdicts == {"relu_kernelbench": "passed", "no_candidate": "missing"}
    assert report["summary"]["fast_p_vs_eager"]["0"] == 0.5  # one of two problems correct
    assert {p.name for p in out.iterdir()} == {"suite.json", "suite.csv", "suite.md", "suite.svg", "results"}
    # each evaluated problem's whole verdict beside the table; none for a problem without a candidate
    assert [p.name for p in (out / "results").iterdir()] == ["relu_kernelbench.json"]
    kept = json.loads((out / "results" / "relu_kernelbench.json").read_text())
    assert kept["verdict"] == "passed" and kept["trials"]


def test_bench_counts_a_problem_it_cannot_read_or_load_and_says_so(tmp_path):
    """A problem file with a syntax error, one missing get_inputs and one whose import fails are
    rows with their reasons, in the denominator of every output; the candidate of the one that
    cannot load is not blamed for it; the exit code is 1 (not all verified)."""
    suite, candidates, out = tmp_path / "suite", tmp_path / "candidates", tmp_path / "out"
    suite.mkdir()
    candidates.mkdir()
    source = Path(RELU).read_text()
    (suite / "1_relu.py").write_text(source)  # no candidate: a missing row
    (suite / "2_syntax.py").write_text(source + "\ndef (:\n")
    (suite / "3_no_inputs.py").write_text(source.replace("def get_inputs", "def inputs"))
    (suite / "4_import.py").write_text("import kgen_no_such_module\n" + source)
    for name in ("2_syntax", "3_no_inputs", "4_import"):
        (candidates / f"{name}.py").write_text((CANDIDATES / "relu_kernelbench_solution.py").read_text())
    result = kgen("bench", str(suite), "--candidates", str(candidates), "--out", str(out), "--device", "cpu")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "syntax error on line" in result.stderr and "kgen_no_such_module" in result.stderr
    assert result.stderr.count("(counted as not correct)") == 3
    report = json.loads((out / "suite.json").read_text())
    verdicts = {row["problem"]: row["verdict"] for row in report["rows"]}
    assert verdicts == {"1_relu": "missing", "2_syntax": "unreadable", "3_no_inputs": "unreadable",
                        "4_import": "unreadable"}
    assert report["summary"]["problems"] == 4 and report["summary"]["unreadable"] == 3
    assert "0 of 4 correct" in (out / "suite.md").read_text()
    with (out / "suite.csv").open() as fh:
        assert sum(1 for _ in fh) == 5  # header and four rows
    assert not (out / "results").exists()  # no candidate was verified against a broken reference


def test_bench_with_a_missing_suite_is_bad_usage(tmp_path):
    out = kgen("bench", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "suite folder not found" in out.stderr


def test_version_prints_the_installed_distributions_version():
    from importlib.metadata import version

    for flag in ("--version", "-V"):
        out = kgen(flag)
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"kgen {version('kgen')}\n" and out.stderr == ""


def _command_paths(command, path=()):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _command_paths(sub, (*path, name))


def test_h_is_help_for_every_command(capsys):
    """`-h` is `--help` everywhere: the group, each command, each command of a group."""
    from kgen.cli.command_line import with_default_command
    from kgen.cli.main import kgen_command

    command = kgen_command()
    paths = list(_command_paths(command))
    assert len(paths) > 15
    for path in paths:
        shown = []
        for flag in ("-h", "--help"):
            args = with_default_command([*path, flag], command)
            assert command.main(args=args, prog_name="kgen", standalone_mode=False) in (0, None)
            shown.append(capsys.readouterr().out)
        assert shown[0] == shown[1] and "Usage: kgen" in shown[0], path


def test_h_on_the_real_command_line():
    for args in (["-h"], ["eval", "-h"], ["kb", "list", "-h"]):
        out = kgen(*args)
        first = next(line for line in out.stdout.splitlines() if line.strip())
        assert out.returncode == 0 and first.split("[")[0].split() == ["Usage:", "kgen", *args[:-1]], \
            out.stdout[:200] + out.stderr
