"""Library baselines: a clear reason when one cannot be timed, never a silent gap."""

import importlib.util

import pytest

from kgen.evals.baselines.library import BaselineUnavailable, liger_baseline
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem


def _problem(name):
    info = resolve_problem(name)
    return load_problem(info.path, info.cpu_sizes())


def test_problem_without_a_liger_op_says_so():
    with pytest.raises(BaselineUnavailable, match="no Liger baseline wired for gemm_bias_gelu"):
        liger_baseline(_problem("gemm_bias_gelu"))


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is not None, reason="liger-kernel is installed here")
def test_missing_liger_is_reported_not_hidden():
    with pytest.raises(BaselineUnavailable, match="liger-kernel is not installed"):
        liger_baseline(_problem("rmsnorm_backward"))
