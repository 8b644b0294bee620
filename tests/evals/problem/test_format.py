"""The problem format: KernelBench files load, size constants rebind, metadata reads."""

from pathlib import Path

import pytest

from kgen.evals.problem.format import CPU_SIZE_CAP, ProblemError, load_problem, read_problem

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_plain_kernelbench_file_reads_without_metadata():
    info = read_problem(FIXTURES / "problems" / "relu_kernelbench.py")
    assert info.name == "relu_kernelbench"
    assert info.sizes == {"batch_size": 4096, "dim": 393216}
    assert not info.has_kgen_metadata
    assert info.cpu_sizes() == {"batch_size": 128, "dim": 96}
    assert all(v <= CPU_SIZE_CAP for v in info.cpu_sizes().values())


def test_rebinding_reaches_derived_constants(tmp_path):
    path = tmp_path / "derived.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\nB = 4\nS = 8\nN = B * S\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
        "def get_inputs():\n    return [torch.zeros(N)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    problem = load_problem(path, {"B": 3})
    assert problem.sizes == {"B": 3, "S": 8, "N": 24}
    assert problem.get_inputs()[0].shape == (24,)


def test_unknown_size_name_is_an_error():
    with pytest.raises(ProblemError, match="has no size constant HIDEN"):
        load_problem(FIXTURES / "problems" / "relu_kernelbench.py", {"HIDEN": 3})


def test_file_missing_model_is_not_a_problem(tmp_path):
    path = tmp_path / "nomodel.py"
    path.write_text("def get_inputs():\n    return []\n")
    with pytest.raises(ProblemError, match="missing Model, get_init_inputs"):
        read_problem(path)


def test_syntax_error_in_problem_names_the_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("class Model(:\n")
    with pytest.raises(ProblemError, match="syntax error on line 1"):
        read_problem(path)
