"""Reading the candidate module out of an LLM reply: what real replies look like, and the
reasons given back to the model when a reply holds no usable module."""

import ast

import pytest

from kgen.agent.llm.code_extraction import NoCodeError, extract_candidate

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


def test_a_skeleton_after_the_module_does_not_win():
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


# -- which block: the final complete module, as different models write replies --------------

KERNEL_PART, CLASS_PART = MODULE.split("\n\n\nclass ModelNew")
CLASS_PART = "class ModelNew" + CLASS_PART
#: a first attempt, longer than the final module (drafts carry commentary)
DRAFT = MODULE.replace("BLOCK=1024", "BLOCK=256").replace(
    "class ModelNew(nn.Module):",
    "# first attempt: small blocks, one program per 256 elements; occupancy is poor here\n"
    "# and the launch count is four times what it needs to be, see the note below\n"
    "class ModelNew(nn.Module):",
)


def _fence(code: str, info: str = "python") -> str:
    return f"```{info}\n{code}```"


def test_a_draft_then_the_corrected_final_version_gives_the_final_version():
    reply = (
        f"Here is a first version:\n\n{_fence(DRAFT)}\n\n"
        "Wait, 256-element blocks launch too many programs. Here is the corrected, final version:\n\n"
        f"{_fence(MODULE)}\n"
    )
    assert len(DRAFT) > len(MODULE)  # the old rule (longest) took the draft
    assert extract_candidate(reply) == MODULE


def test_the_module_then_a_usage_example_gives_the_module():
    usage = "model = ModelNew().cuda()\nx = torch.randn(4096, device='cuda')\nprint(model(x))\n"
    reply = f"{_fence(MODULE)}\n\nUsage:\n\n{_fence(usage)}\n"
    assert extract_candidate(reply) == MODULE


def test_imports_in_one_fence_and_the_class_in_the_next_are_joined_in_order():
    reply = (f"First the kernel:\n{_fence(KERNEL_PART + chr(10))}\n"
             f"Then the module that launches it:\n{_fence(CLASS_PART)}\n")
    code = extract_candidate(reply)
    tree = ast.parse(code)
    assert [type(n).__name__ for n in tree.body][-1] == "ClassDef"
    assert code.index("import triton") < code.index("def _relu") < code.index("class ModelNew")
    assert code == KERNEL_PART + "\n\n\n" + CLASS_PART


def test_a_final_version_that_only_replaces_model_new_keeps_the_drafts_kernel():
    """'Only the class changes:' — the file the model means is the draft with the class replaced."""
    new_class = CLASS_PART.replace("1024", "2048")
    reply = f"{_fence(MODULE)}\nOnly the class changes:\n{_fence(new_class)}"
    code = extract_candidate(reply)
    assert code == MODULE.rstrip("\n") + "\n\n\n" + new_class
    classes = [n for n in ast.parse(code).body if isinstance(n, ast.ClassDef)]
    assert ast.unparse(classes[-1]) == ast.unparse(ast.parse(new_class).body[0])  # the last one counts


def test_a_usage_example_is_never_joined_into_the_module():
    usage = "import torch\nmodel = ModelNew()\nprint(model(torch.randn(8)))\n"
    reply = f"{_fence(KERNEL_PART + chr(10))}\nTry it:\n{_fence(usage)}\nand the class:\n{_fence(CLASS_PART)}"
    code = extract_candidate(reply)
    assert "print(" not in code and code == KERNEL_PART + "\n\n\n" + CLASS_PART


def test_a_module_that_needs_nothing_is_taken_alone():
    reply = f"```python\nimport torch\n```\n{_fence(MODULE)}"
    assert extract_candidate(reply) == MODULE


@pytest.mark.parametrize("marker", [
    ("**Final version:**\n", "python"),
    ("### Final\n", "python"),
    ("", "python final"),
    ("", "python title=final.py"),
])
def test_a_block_marked_final_beats_a_later_alternative(marker):
    before, info = marker
    reply = f"{before}{_fence(MODULE, info)}\n\nFor comparison, the naive version:\n\n{_fence(DRAFT)}\n"
    assert extract_candidate(reply) == MODULE


def test_a_first_line_final_comment_marks_the_block():
    final = "# FINAL\n" + MODULE
    reply = f"{_fence(final)}\nAn alternative with smaller blocks:\n{_fence(DRAFT)}"
    assert extract_candidate(reply) == final


def test_final_in_prose_is_not_a_marker():
    reply = f"This is not the final version:\n{_fence(DRAFT)}\nThis one is:\n{_fence(MODULE)}"
    assert extract_candidate(reply) == MODULE


@pytest.mark.parametrize("cut_at", ["_relu[(", "(x_ptr + offs"])
def test_a_cut_off_final_version_falls_back_to_the_last_complete_block(cut_at):
    """Cut between two statements the rest still parses; cut mid-expression it does not."""
    cut = MODULE[: MODULE.index(cut_at)]
    reply = f"{_fence(DRAFT)}\nBetter:\n```python\n{cut}"
    assert extract_candidate(reply) == DRAFT


def test_a_broken_marked_block_does_not_win():
    broken = MODULE.replace("def forward(self, x):", "def forward(self, x)")
    reply = f"{_fence(DRAFT)}\n**Final:**\n{_fence(broken)}"
    assert extract_candidate(reply) == DRAFT


def test_unfenced_code_between_prose_is_found():
    reply = f"Sure! Here is the kernel.\n\n{MODULE}\nThis launches one program per 1024 elements."
    assert extract_candidate(reply) == MODULE


def test_a_file_name_after_the_language_still_tags_python():
    assert extract_candidate(f"{_fence(DRAFT, 'python:kernel.py')}\n{_fence(MODULE, 'python:kernel.py')}") == MODULE


def test_a_block_tagged_with_another_language_counts_only_when_it_is_the_whole_module():
    assert extract_candidate(_fence(MODULE, "triton")) == MODULE
    with pytest.raises(NoCodeError, match="no python code block"):
        extract_candidate(_fence("x = 1\n", "text"))


# -- one rule for candidates and reference problems ------------------------------------------

PROBLEM = '''import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''
PROBLEM_DRAFT = PROBLEM.replace("N = 4096", "N = 1024  # draft: too small to time, fixed below")


def _layouts(final: str, draft: str) -> dict[str, tuple[str, str]]:
    """Reply layouts -> (reply, the module that must be read from it)."""
    head, _, tail = final.partition("\n\n\nclass ")
    tail = "class " + tail
    return {
        "one block": (_fence(final), final),
        "draft then final": (f"{_fence(draft)}\nCorrected:\n{_fence(final)}", final),
        "final then usage": (f"{_fence(final)}\n{_fence('print(get_inputs())' + chr(10))}", final),
        "marked final then alternative": (f"{_fence(final, 'python final')}\nOr:\n{_fence(draft)}", final),
        "split in two": (f"{_fence(head + chr(10))}\n{_fence(tail)}", head + "\n\n\n" + tail),
        "unfenced": (f"Here it is.\n\n{final}\nDone.", final),
    }


@pytest.mark.parametrize("layout", list(_layouts(MODULE, DRAFT)))
def test_candidates_and_reference_problems_are_read_by_the_same_rule(layout):
    from kgen.agent.llm.code_extraction import CANDIDATE, REFERENCE_PROBLEM, extract_module
    from kgen.agent.spec.reference_problem import extract_problem_code

    reply, expected = _layouts(MODULE, DRAFT)[layout]
    assert extract_module(reply, CANDIDATE) == extract_candidate(reply) == expected
    reply, expected = _layouts(PROBLEM, PROBLEM_DRAFT)[layout]
    assert extract_module(reply, REFERENCE_PROBLEM) == extract_problem_code(reply) == expected


def test_a_reference_problem_needs_get_inputs_to_be_complete():
    from kgen.agent.llm.code_extraction import REFERENCE_PROBLEM, extract_module

    model_only = PROBLEM[: PROBLEM.index("def get_inputs")]
    reply = f"{_fence(PROBLEM)}\nThe model class, annotated:\n{_fence(model_only)}"
    assert extract_module(reply, REFERENCE_PROBLEM) == PROBLEM
    with pytest.raises(NoCodeError, match="defines no get_inputs at module level"):
        extract_module(_fence(model_only), REFERENCE_PROBLEM)
