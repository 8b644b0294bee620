"""Model-written reference problems: saved from a reply, and self-checked in the sandbox."""

from __future__ import annotations

import pytest

from kgen.agent.spec.reference_problem import (
    ReferenceProblemError,
    extract_problem_code,
    new_reference_problem,
    problem_slug,
    self_check_problem,
    write_reference_problem,
)
from kgen.evals.problem.catalog import resolve_problem

GOOD = '''"""Squared ReLU: y = relu(x)^2."""

import torch
import torch.nn as nn

TOKENS = 4096
WIDTH = 8192

KGEN_NAME = "squared_relu"
KGEN_ALIASES = ["relu squared", "squared relu forward"]
KGEN_DESCRIPTION = "Squared ReLU forward (bf16 in and out, fp32 math)"
KGEN_KIND = "forward"
KGEN_SMALL_SIZES = {"TOKENS": 37, "WIDTH": 100}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        acc = torch.promote_types(x.dtype, torch.float32)
        y = torch.relu(x.to(acc)).pow(2)
        return y.to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, WIDTH, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def kgen_bytes():
    return 2 * TOKENS * WIDTH * 2


def kgen_flops():
    return 2 * TOKENS * WIDTH
'''

FORWARD_BODY = "        y = torch.relu(x.to(acc)).pow(2)\n"


def _variant(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


BAD = {
    "noise inside forward": (
        _variant(FORWARD_BODY, FORWARD_BODY + "        y = y + 1e-3 * torch.rand_like(y)\n"),
        "forward is not deterministic",
    ),
    "inputs from an unseeded generator": (
        _variant(
            "    return [torch.randn(TOKENS, WIDTH, dtype=torch.bfloat16)]",
            "    g = torch.Generator()\n    g.seed()\n"
            "    return [torch.rand(TOKENS, WIDTH, generator=g).to(torch.bfloat16)]",
        ),
        "get_inputs() is not reproducible under torch.manual_seed",
    ),
    "all-zero output": (_variant(FORWARD_BODY, "        y = torch.zeros_like(x, dtype=acc)\n"), "output 0 is all zeros"),
    "NaN output": (_variant(FORWARD_BODY, FORWARD_BODY + "        y = y * float('nan')\n"), "output 0 has NaN or Inf"),
    "forward raises": (
        _variant(FORWARD_BODY, "        raise RuntimeError('shape mismatch in reference')\n"),
        "forward raised RuntimeError: shape mismatch in reference",
    ),
    "hard-coded bf16": (
        _variant("        return y.to(x.dtype)", "        return y.to(torch.bfloat16)"),
        "on float64 inputs output 0 is bfloat16",
    ),
}


def test_a_good_problem_passes(tmp_path):
    path = tmp_path / "problem_squared_relu.py"
    path.write_text(GOOD)
    check = self_check_problem(path)
    assert check.passed, check.reasons
    assert check.reasons == [] and check.sizes == {"TOKENS": 37, "WIDTH": 100} and check.seconds > 0


def test_a_catalog_problem_passes():
    check = self_check_problem(resolve_problem("rmsnorm_backward").path)
    assert check.passed, check.reasons


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_problem_fails_with_the_right_reason(tmp_path, case):
    source, expected = BAD[case]
    path = tmp_path / "problem_bad.py"
    path.write_text(source)
    check = self_check_problem(path)
    assert not check.passed
    assert any(expected in reason for reason in check.reasons), check.reasons


def test_a_syntax_error_fails_without_running(tmp_path):
    path = tmp_path / "problem_broken.py"
    path.write_text(_variant("    def forward(self, x):", "    def forward(self, x:"))
    check = self_check_problem(path)
    assert not check.passed and "syntax error" in check.reasons[0]


def test_a_catalog_name_is_not_taken(tmp_path):
    path = tmp_path / "problem_taken.py"
    path.write_text(_variant('KGEN_NAME = "squared_relu"', 'KGEN_NAME = "softmax"'))
    check = self_check_problem(path)
    assert not check.passed and "already a catalog problem's name" in check.reasons[0]


@pytest.mark.slow
def test_a_hang_is_cut_off(tmp_path):
    path = tmp_path / "problem_hang.py"
    path.write_text(_variant("def get_inputs():\n", "def get_inputs():\n    while True:\n        pass\n"))
    check = self_check_problem(path, timeout_s=10)
    assert not check.passed and "did not finish within 10 s" in check.reasons[0]


class ScriptedWriter:
    """The caller's text model: replies in order, keeping what it was asked."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.calls: list[tuple[str, str]] = []

    def __call__(self, system: str, user: str) -> str:
        self.calls.append((system, user))
        return self.replies.pop(0)


def _fenced(code: str) -> str:
    return f"Here is the reference problem.\n\n```python\n{code}```\n\nIt computes relu(x)^2."


def test_write_reference_problem_saves_the_code_block(tmp_path):
    writer = ScriptedWriter(_fenced(GOOD), _fenced(GOOD))
    path = write_reference_problem("Squared ReLU forward", writer, tmp_path / "run")
    assert path == tmp_path / "run" / "problem_squared_relu_forward.py"
    assert path.read_text() == GOOD
    system, user = writer.calls[0]
    assert "class Model(nn.Module)" in system and 'KGEN_NAME = "rmsnorm_forward"' in system
    assert "Squared ReLU forward" in user
    again = write_reference_problem("Squared ReLU forward", writer, tmp_path / "run")
    assert again.name == "problem_squared_relu_forward_2.py" and path.read_text() == GOOD


def test_backward_operations_get_a_backward_example(tmp_path):
    writer = ScriptedWriter(_fenced(GOOD))
    write_reference_problem("squared relu backward", writer, tmp_path)
    assert 'KGEN_NAME = "rmsnorm_backward"' in writer.calls[0][0]


def test_a_reply_without_code_is_an_error(tmp_path):
    with pytest.raises(ReferenceProblemError, match="no complete python code block"):
        write_reference_problem("squared relu", ScriptedWriter("I cannot help with that."), tmp_path)
    assert not list(tmp_path.iterdir())


def test_extraction_prefers_the_block_defining_model():
    reply = f"```bash\npip install torch\n```\n```python\nimport torch\n```\n{_fenced(GOOD)}"
    assert extract_problem_code(reply) == GOOD
    assert extract_problem_code(GOOD) == GOOD


def test_slug_is_file_name_safe():
    assert problem_slug("RMSNorm + residual add (bwd)!") == "rmsnorm_residual_add_bwd"
    assert len(problem_slug("word " * 40)) <= 48


def test_a_failed_self_check_goes_back_to_the_model(tmp_path):
    zeros, _ = BAD["all-zero output"]
    writer = ScriptedWriter(_fenced(zeros), _fenced(GOOD))
    path = new_reference_problem("squared relu", writer, tmp_path)
    assert path.read_text() == GOOD
    retry = writer.calls[1][1]
    assert "output 0 is all zeros" in retry and "torch.zeros_like" in retry


def test_no_passing_problem_raises_with_the_reasons(tmp_path):
    nan, _ = BAD["NaN output"]
    writer = ScriptedWriter(_fenced(nan))
    with pytest.raises(ReferenceProblemError, match="NaN or Inf") as info:
        new_reference_problem("squared relu", writer, tmp_path, attempts=1)
    assert any("NaN" in reason for reason in info.value.reasons)
