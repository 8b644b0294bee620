"""The prompts tell the model the extraction rule: the one complete final module goes last, and
may be marked ```python final — and a reply that does what the prompt says is read as meant."""

from __future__ import annotations

import re

import pytest

from kgen.agent.llm.code_extraction import CANDIDATE, REFERENCE_PROBLEM, extract_module
from kgen.agent.llm.prompt_context import TaskContext, render_generate, render_system
from kgen.agent.spec.reference_problem import reference_problem_prompt
from kgen.backends.targets import resolve_target
from kgen.evals.problem.catalog import resolve_problem

#: "put the one complete final ... last", and the fence opener that marks it
_LAST = re.compile(r"put the one complete final (module|file) last")
_MARK = re.compile(r"opening its fence with (```python final)")


def _prompts() -> dict[str, str]:
    ctx = TaskContext.from_problem(resolve_problem("rmsnorm_forward"), "triton", resolve_target("h100"),
                                   dtypes=["bf16"])
    system, _user = reference_problem_prompt("a fused softmax over the last dimension")
    return {
        "system (triton)": render_system("triton"),
        "system (cute)": render_system("cute"),
        "generate (the reply section fix, improve and crossover share)": render_generate(ctx),
        "reference problem": system,
    }


@pytest.mark.parametrize("name", list(_prompts()))
def test_every_prompt_asking_for_a_module_says_the_final_one_goes_last_and_may_be_marked(name):
    text = _prompts()[name]
    assert _LAST.search(text), name
    assert _MARK.search(text), name


DRAFT = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x  # draft\n"
FINAL = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x  # final\n"


def test_a_candidate_reply_written_as_the_prompt_says_yields_the_marked_module():
    opener = _MARK.search(render_system("triton")).group(1)
    reply = (f"A first try:\n\n```python\n{DRAFT}```\n\nThe corrected module:\n\n{opener}\n{FINAL}```\n\n"
             f"For comparison, the draft again:\n\n```python\n{DRAFT}```\n")
    assert extract_module(reply, CANDIDATE).strip() == FINAL.strip()


def test_a_reference_problem_reply_written_as_the_prompt_says_yields_the_marked_file():
    system, _ = reference_problem_prompt("a fused softmax over the last dimension")
    opener = _MARK.search(system).group(1)
    source = resolve_problem("rmsnorm_forward").path.read_text().rstrip() + "\n"
    draft = source + "# draft\n"
    reply = f"Draft:\n\n```python\n{draft}```\n\nFinal:\n\n{opener}\n{source}```\n\n```python\nprint(1)\n```\n"
    assert extract_module(reply, REFERENCE_PROBLEM).strip() == source.strip()
