"""The harness self-test: real KernelBench problems judged with their own reference as the
candidate all pass, and the correctness checks stay on (a subtly different model fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.problem.format import read_problem
from kgen.evals.suites.self_test import SELF_TEST_SUFFIX, run_self_test
from kgen.evals.verdict import RejectionClass, Verdict

KERNELBENCH = Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench"
VARIED = [  # a matmul, an elementwise op, a strided reduction, a 3-D convolution, a level-2 fusion, a level-3 model
    "level1/1_Square_matrix_multiplication_.py", "level1/19_ReLU.py", "level1/47_Sum_reduction_over_a_dimension.py",
    "level1/54_conv_standard_3D__square_input__square_kernel.py", "level2/1_Conv2D_ReLU_BiasAdd.py", "level3/1_MLP.py",
]
CPU = EvalOptions(device="cpu", n_seeds=2, timeout_s=240)


def test_real_kernelbench_problems_pass_with_their_own_reference(tmp_path):
    infos = [read_problem(KERNELBENCH / name) for name in VARIED]
    lines: list[str] = []
    rows = run_self_test(infos, CPU, tmp_path, "kgen bench --self-test (test)", progress=lines.append)
    assert [r.outcome for r in rows] == ["passed"] * len(VARIED), [(r.problem, r.reason) for r in rows]
    assert len(lines) == len(VARIED) and lines[-1].startswith(f"[{len(VARIED)}/{len(VARIED)}]")
    table = (tmp_path / "self_test.md").read_text()
    assert f"{len(VARIED)} of {len(VARIED)} problems passed" in table and "not measured (CPU)" in table


@pytest.mark.parametrize(
    "wrong",
    [
        "class ModelNew(Model):\n    def forward(self, *args):\n        return super().forward(*args) * 1.001\n",
        "class ModelNew(Model):\n    def forward(self, *args):\n        out = super().forward(*args)\n"
        "        return out.index_fill(0, torch.tensor([0]), 0.0)\n",
    ],
    ids=["scaled by 1.001", "first row zeroed"],
)
def test_the_self_test_still_checks_correctness(tmp_path, wrong):
    problem = KERNELBENCH / "level1" / "19_ReLU.py"
    candidate = tmp_path / "wrong_reference.py"
    candidate.write_text(problem.read_text() + "\n\n" + wrong)
    result = evaluate(problem, candidate, CPU.model_copy(update={"reference_self_test": True}))
    assert result.verdict is Verdict.REJECTED and result.rejection is RejectionClass.MISMATCH, result.reason


def test_without_the_self_test_the_reference_is_not_a_kernel(tmp_path):
    problem = KERNELBENCH / "level1" / "19_ReLU.py"
    candidate = tmp_path / "reference.py"
    candidate.write_text(problem.read_text() + SELF_TEST_SUFFIX)
    result = evaluate(problem, candidate, CPU)
    assert result.verdict is Verdict.REJECTED
    assert result.rejection in (RejectionClass.NOT_A_KERNEL, RejectionClass.NO_KERNEL_LAUNCH), result.reason


def _line(lines: list[str], problem: str) -> str:
    """The progress line of ``problem`` (lines come as problems finish, in any order)."""
    (line,) = [line for line in lines if f" {problem} " in line]
    return line


def test_a_second_run_into_the_same_folder_keeps_what_was_judged(tmp_path):
    """A level folder at full size takes hours: the same command again judges only what is left,
    and a problem whose file changed, or a line that cannot be read, is judged again."""
    import json
    import shutil

    from kgen.evals.suites.self_test import ROWS_FILE

    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("19_ReLU.py", "21_Sigmoid.py"):
        shutil.copy(KERNELBENCH / "level1" / name, suite / name)
    out = tmp_path / "out"
    first = run_self_test([read_problem(suite / "19_ReLU.py")], CPU, out, "first")
    assert [r.outcome for r in first] == ["passed"]
    lines: list[str] = []
    second = run_self_test([read_problem(suite / n) for n in ("19_ReLU.py", "21_Sigmoid.py")], CPU, out, "second",
                           progress=lines.append)
    assert [r.problem for r in second] == [first[0].problem, "21_Sigmoid"] and second[0] == first[0]
    assert "kept from an earlier run" in _line(lines, "19_ReLU") and "kept from an earlier run" not in _line(lines, "21_Sigmoid")
    assert "2 of 2 problems passed" in (out / "self_test.md").read_text()
    # a changed file and a torn line: judged again; another device's rows are not this one's
    (suite / "19_ReLU.py").write_text((suite / "19_ReLU.py").read_text() + "\n# changed\n")
    with (out / ROWS_FILE).open("a") as f:
        f.write('{"device": "cpu", "row": {"problem": "21_Sig\n')
        f.write(json.dumps({"device": "cuda", "row": {"problem": "22_Tanh", "outcome": "passed", "seconds": 1}}) + "\n")
    lines.clear()
    run_self_test([read_problem(suite / n) for n in ("19_ReLU.py", "21_Sigmoid.py")], CPU, out, "third",
                  progress=lines.append)
    assert "kept from an earlier run" not in _line(lines, "19_ReLU") and "kept from an earlier run" in _line(lines, "21_Sigmoid")
