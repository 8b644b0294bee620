"""The load stage on a real context: the candidate imported inside the guard, ModelNew required."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.load_stage import LoadStage

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"


def test_a_module_defining_model_new_is_loaded_into_the_context(open_verifier):
    ctx = open_verifier(CANDIDATES / "relu_kernelbench_solution.py")
    LoadStage().run(ctx)
    assert isinstance(ctx.module.ModelNew, type)
    assert ctx.module.__file__ == str(ctx.candidate_path)
    [stage] = ctx.report.stages
    assert (stage.name, stage.status, stage.message) == ("load", StageStatus.PASSED, "ModelNew found")


def test_a_module_without_model_new_is_rejected(open_verifier):
    ctx = open_verifier(CANDIDATES / "no_model_new.py")
    with pytest.raises(Rejected, match="no_model_new.py defines no class ModelNew") as caught:
        LoadStage().run(ctx)
    assert caught.value.rejection is RejectionClass.NO_MODEL_NEW


def test_an_import_that_fails_is_a_load_error(open_verifier, tmp_path):
    broken = tmp_path / "imports_nothing_real.py"
    broken.write_text("import torch\nfrom no_such_module_anywhere import kernel\n\nclass ModelNew(torch.nn.Module):\n    pass\n")
    ctx = open_verifier(broken)
    with pytest.raises(Rejected, match="no_such_module_anywhere") as caught:
        LoadStage().run(ctx)
    assert caught.value.rejection is RejectionClass.LOAD_ERROR


_PATCH_KGEN = """\
import sys
import torch

_compare = sys.modules["kgen.evals.checks.compare"]
_compare.check_structure = lambda outputs, expected: None

class ModelNew(torch.nn.Module):
    pass
"""

_PATCH_BENCH = """\
import torch
import triton.testing

_handles = {"bench": triton.testing}
_handles["bench"].do_bench = lambda *args, **kwargs: 0.001

class ModelNew(torch.nn.Module):
    pass
"""


@pytest.mark.parametrize(
    ("source", "rejection", "named"),
    [(_PATCH_KGEN, RejectionClass.FORBIDDEN_CONSTRUCT, "kgen.evals.checks.compare.check_structure"),
     (_PATCH_BENCH, RejectionClass.TIMING_ATTACK, "triton.testing.do_bench")],
    ids=["kgen-function", "timer"],
)
def test_an_import_that_replaces_what_the_verifier_calls_is_rejected(open_verifier, tmp_path, source, rejection, named):
    import triton.testing

    import kgen.evals.checks.compare as compare

    kept = compare.check_structure, triton.testing.do_bench
    path = tmp_path / "tampers.py"
    path.write_text(source)
    ctx = open_verifier(path)
    try:
        with pytest.raises(Rejected, match=named) as caught:
            LoadStage().run(ctx)
        assert caught.value.rejection is rejection
    finally:
        compare.check_structure, triton.testing.do_bench = kept
