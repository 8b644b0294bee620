"""A scripted three-generation run: what the loopback OpenAI and Anthropic servers answer.

Shared by the CPU end-to-end test and its GPU twin. The problem is a ReLU in
KernelBench format (sizes a GPU can time quickly); the models answer, across
generations, with a slow-but-correct kernel, a cheating one (torch does the
math), a wrong one, a reply without code, a 429, a time-out, and the fast,
correct kernel that must win where timings exist.
"""

from __future__ import annotations

from pathlib import Path

from llm_server import Reply, ScriptedLLMServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPENAI_KEY = "sk-test-openai-0123456789SECRET"
ANTHROPIC_KEY = "sk-ant-test-9876543210SECRET"

PROBLEM = '''"""ReLU over a 16M-element activation (KernelBench format)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

FAST = (FIXTURES / "candidates" / "relu_kernelbench_solution.py").read_text()

SLOW = '''"""Correct but slow: each program walks 4096 elements sixteen at a time."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_serial(x_ptr, out_ptr, n_elements, CHUNK: tl.constexpr, PER_PROGRAM: tl.constexpr):
    start = tl.program_id(0) * PER_PROGRAM
    for i in range(0, PER_PROGRAM, CHUNK):
        offsets = start + i + tl.arange(0, CHUNK)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_serial[(triton.cdiv(n, 4096),)](x, out, n, CHUNK=16, PER_PROGRAM=4096, num_warps=1)
        return out
'''

CHEAT = (FIXTURES / "candidates" / "redteam_torch_inside.py").read_text()
WRONG = (FIXTURES / "candidates" / "relu_wrong_math.py").read_text()


def fenced(code: str, prose: str = "Here is the kernel.") -> str:
    return f"{prose}\n\n```python\n{code}```\n\nIt masks the tail and writes every element."


#: the per-call deadline the scripted runs give kgen. A loaded CI machine (several test processes,
#: each with verifier children) can take over a second to answer a loopback request, so a tight
#: deadline would turn a scripted answer into a time-out; the hanging reply waits far longer.
CALL_DEADLINE_S = 8.0
HANG_S = 60.0


def script(server: ScriptedLLMServer, *, hang_s: float = 3.0) -> dict[str, int]:
    """Queue the replies; returns the tokens the successful replies report, per route.

    ``hang_s``: how long the reply that does not come in time waits; above the run's
    ``llm_timeout_s`` it is a time-out, below it a reply without code."""
    openai = [
        # generation 0: two "generate" tasks; one hits a 429 first and is retried by the SDK
        Reply.error(429, "slow down", retry_after_s=0.05),
        Reply.text(fenced(SLOW), input_tokens=1000, output_tokens=400),
        Reply.text(fenced(CHEAT), input_tokens=1000, output_tokens=300),
        # generation 1: "fix" the wrong kernel: the model answers with prose only
        Reply.text("I would change the slope of the negative branch.", input_tokens=1200, output_tokens=20),
        # generation 2: "crossover": the model does not answer within the call's deadline
        Reply.hang(hang_s),
    ]
    anthropic = [
        # generation 0: a kernel computing the wrong function
        Reply.text(fenced(WRONG), input_tokens=900, output_tokens=350),
        # generation 1: "improve" the slow kernel: the fast one
        Reply.text(fenced(FAST, "A wider block and one pass:"), input_tokens=1500, output_tokens=380),
        # generation 2: "fix": the fast kernel again, worded differently
        Reply.text(fenced("# one program per 1024 elements\n" + FAST), input_tokens=1500, output_tokens=390),
    ]
    server.script("openai", openai)
    server.script("anthropic", anthropic)
    return {"openai": 1000 + 400 + 1000 + 300 + 1200 + 20, "anthropic": 900 + 350 + 1500 + 380 + 1500 + 390}


def models(server: ScriptedLLMServer) -> list[str]:
    """The servers stand in for the providers, so each model names its provider's key for its
    URL (``#OPENAI_API_KEY``): without that, kgen sends a provider's key to nobody but the
    provider's official API."""
    return [f"openai:gpt-test@{server.openai_base_url}#OPENAI_API_KEY",
            f"anthropic:claude-test@{server.anthropic_base_url}#ANTHROPIC_API_KEY"]


def write_config(home: Path, server: ScriptedLLMServer) -> None:
    """Keys come from the config file, as a user would keep them."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'openai_api_key = "{OPENAI_KEY}"\nanthropic_api_key = "{ANTHROPIC_KEY}"\n'
    )


def files_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()
                     and p.suffix in (".json", ".md", ".py", ".log", ".toml", ".txt"))
