"""Reading the candidate module out of an LLM reply: what real replies look like, and the
reasons given back to the model when a reply holds no usable module."""

import ast

import pytest

from kgen.agent.code_extraction import NoCodeError, extract_candidate

MODULE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _relu[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
'''


def test_a_single_fenced_block_is_returned_exactly():
    reply = f"Here is the kernel: one program per block of 1024.\n\n```python\n{MODULE}```\n"
    assert extract_candidate(reply) == MODULE


def test_py_tag_and_prose_after_the_block():
    reply = f"Plan: mask the tail.\n```py\n{MODULE}```\nThis reads x once and writes y once, so it is memory-bound."
    assert extract_candidate(reply) == MODULE


def test_of_several_blocks_the_module_defining_model_new_wins():
    snippet = "offs = pid * BLOCK + tl.arange(0, BLOCK)\nmask = offs < n\n"
    reply = (
        f"The key change is the mask:\n```python\n{snippet}```\n"
        f"Full module:\n```python\n{MODULE}```\n"
        "Run it with:\n```bash\npython -m pytest\n```\n"
    )
    assert extract_candidate(reply) == MODULE


def test_of_two_blocks_with_model_new_the_longest_wins():
    stub = "class ModelNew(nn.Module):\n    pass\n"
    reply = f"```python\n{MODULE}```\nand a minimal skeleton:\n```python\n{stub}```"
    assert extract_candidate(reply) == MODULE


def test_a_parsing_block_beats_a_longer_broken_one():
    broken = MODULE.replace("def forward(self, x):", "def forward(self, x)") + "# " + "padding " * 50 + "\n"
    reply = f"```python\n{broken}```\nfixed:\n```python\n{MODULE}```"
    assert extract_candidate(reply) == MODULE


def test_an_untagged_block_counts_when_no_block_is_tagged():
    assert extract_candidate(f"```\n{MODULE}```") == MODULE


def test_an_unfenced_reply_that_is_the_module_is_accepted():
    assert extract_candidate(MODULE) == MODULE


def test_crlf_line_endings_are_normalised():
    reply = f"Kernel below.\n```python\n{MODULE}```\nDone.\n".replace("\n", "\r\n")
    code = extract_candidate(reply)
    assert "\r" not in code
    assert code == MODULE


def test_a_cut_off_reply_still_yields_the_block_when_it_parses():
    assert extract_candidate(f"```python\n{MODULE}") == MODULE


def test_extracted_code_always_parses_and_defines_model_new():
    tree = ast.parse(extract_candidate(f"```python\n{MODULE}```"))
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def test_no_code_at_all_is_rejected_with_a_reason():
    with pytest.raises(NoCodeError, match="reply has no python code block"):
        extract_candidate("I would use one program per row and keep the row in registers.")


def test_only_a_shell_block_is_no_python_code():
    with pytest.raises(NoCodeError, match="reply has no python code block"):
        extract_candidate("Install first:\n```bash\npip install triton\n```\n")


def test_a_block_without_model_new_is_rejected():
    reply = "```python\nclass Model(nn.Module):\n    pass\n```"
    with pytest.raises(NoCodeError, match="code block defines no ModelNew"):
        extract_candidate(reply)


def test_a_syntax_error_names_the_line():
    broken = MODULE.replace("def forward(self, x):", "def forward(self, x)")
    line = broken.splitlines().index("    def forward(self, x)") + 1
    with pytest.raises(NoCodeError, match=rf"code does not parse: line {line}: "):
        extract_candidate(f"```python\n{broken}```")


def test_no_code_error_is_a_value_error():
    with pytest.raises(ValueError):
        extract_candidate("")


def test_model_new_mentioned_only_in_prose_is_not_code():
    with pytest.raises(NoCodeError):
        extract_candidate("class ModelNew would wrap the kernel, but I need more details.")
