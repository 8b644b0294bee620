"""The fix prompt carries every static-rule violation, not the first few hundred characters.

A model shown only the first violation fixes that one and meets the next in the following
generation: each costs a candidate. The verifier records them all on the static stage; the
fix prompt must show each one's message, and under its length cap count (by rule and line)
any it cannot show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kgen
from kgen.agent.llm.prompt_context import (
    MAX_REASON_CHARS,
    MAX_VIOLATIONS_CHARS,
    TaskContext,
    rejection_from_result,
    render_fix,
)
from kgen.backends.targets import resolve_target
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.result import EvalResult
from kgen.evals.verdict import RejectionClass, StageResult, StageStatus, Verdict

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"

#: a ReLU with seven violations of five rules (imports, monkey-patches, kept state)
MANY_VIOLATIONS = '''import torch
import torch.nn as nn
import triton
import triton.language as tl
import time
import os
import socket

# one test process runs the module: one real verdict for the module
pytestmark = pytest.mark.xdist_group("fix_prompt_violations")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


torch.cuda.Event.elapsed_time = lambda self, end_event: 0.001
triton.testing.do_bench = lambda fn, *args, **kwargs: 0.001
_CACHE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        global _CACHE
        started = time.perf_counter()
        if os.environ.get("FAST"):
            return x
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        _CACHE[n] = out
        return out
'''


def context() -> TaskContext:
    return TaskContext.from_problem(resolve_problem("rmsnorm_backward"), "triton", resolve_target("h100"))


@pytest.fixture(scope="module")
def rejected(tmp_path_factory) -> EvalResult:
    """The verifier's real verdict, read back from JSON as the agent reads ``eval.json``."""
    candidate = tmp_path_factory.mktemp("fix") / "cand.py"
    candidate.write_text(MANY_VIOLATIONS)
    result = kgen.evaluate(RELU, candidate, device="cpu")
    assert result.rejection is RejectionClass.FORBIDDEN_CONSTRUCT, result.reason
    return EvalResult.model_validate_json(result.model_dump_json())


def test_every_violation_the_verifier_found_is_in_the_fix_prompt(rejected):
    [static] = [s for s in rejected.stages if s.name == "static"]
    violations = static.evidence["violations"]
    assert len(violations) >= 6 and len({v["rule"] for v in violations}) >= 4
    assert sum(len(v["message"]) for v in violations) > MAX_REASON_CHARS  # more than a reason holds
    prompt = render_fix(context(), MANY_VIOLATIONS, rejection_from_result(rejected))
    for violation in violations:
        assert violation["message"] in prompt, violation
        assert f"(rule {violation['rule']}, line {violation['line']})" in prompt
    assert f"found {len(violations)} violation(s)" in prompt


def _static_rejection(count: int) -> EvalResult:
    violations = [
        {"rule": "monkey-patch", "line": line, "rejection": "forbidden_construct",
         "message": f"cand.py:{line}: assignment to `triton.testing.helper_{line}` patches an imported "
                    f"module or object"}
        for line in range(1, count + 1)
    ]
    return EvalResult(
        problem="relu", problem_path=str(RELU), candidate="cand.py", backend="triton", device="cpu",
        targets=["h100"], verdict=Verdict.REJECTED, rejection=RejectionClass.FORBIDDEN_CONSTRUCT,
        reason="\n".join(v["message"] for v in violations[:20]) + f"\n... and {count - 20} more",
        stages=[StageResult(name="static", status=StageStatus.FAILED, message="rejected",
                            evidence={"violations": violations})],
    )


def test_past_the_cap_the_rest_are_counted_by_rule_and_line_never_dropped_silently():
    rejection = rejection_from_result(_static_rejection(200))
    shown = rejection.violations[:-1]
    assert sum(len(line) for line in shown) <= MAX_VIOLATIONS_CHARS
    assert 20 < len(shown) < 200
    assert all(f"cand.py:{line}: " in shown[line - 1] for line in range(1, len(shown) + 1))
    assert rejection.violations[-1] == (f"{200 - len(shown)} more violation(s) not shown for length: "
                                        f"monkey-patch at line(s) {len(shown) + 1}-200")
    prompt = render_fix(context(), "class ModelNew: ...\n", rejection)
    assert all(line in prompt for line in rejection.violations)


def test_a_rejection_without_violations_keeps_its_reason():
    result = _static_rejection(1).model_copy(update={
        "reason": "syntax error in cand.py line 3: invalid syntax",
        "stages": [StageResult(name="static", status=StageStatus.FAILED, message="x")],
    })
    rejection = rejection_from_result(result)
    assert rejection.violations == [] and rejection.reason.startswith("syntax error")
