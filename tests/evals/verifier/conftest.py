"""A real verifier context in the test process, for the tests of each stage.

``open_verifier(candidate, problem, **request)`` does what the child does before its first
stage (``context.open_context``: the backend prepares the process, the sandbox guard is
installed, the precision policy applied) for a candidate copied into a box of its own, at
the problem's first CPU size set and one seed unless the request says otherwise. The
stages then run on it in the Triton interpreter, as in the child.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from kgen.backends.device import Device
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.size_sets import verification_size_plan
from kgen.evals.verifier.context import VerifierContext, open_context
from kgen.evals.verifier.messages import ChildRequest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"

OpenVerifier = Callable[..., VerifierContext]


@pytest.fixture
def open_verifier(tmp_path: Path) -> Iterator[OpenVerifier]:
    # open_context sets the library precision flags for the process: put them back after
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)

    def open_for(candidate: Path, problem: str | Path = RELU, **request) -> VerifierContext:
        info = resolve_problem(problem)
        box = tmp_path / "box"
        box.mkdir(exist_ok=True)
        boxed = box / candidate.name
        shutil.copyfile(candidate, boxed)
        fields = {
            "problem_path": str(info.path), "candidate_path": str(boxed), "workdir": str(box), "seeds": [7],
            "size_sets": [verification_size_plan(info, Device.CPU)[0].sizes], "distributions": False,
            "policies": info.policies(None, None), **request,
        }
        return open_context(ChildRequest(**fields), tmp_path / "report.json")

    yield open_for
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
