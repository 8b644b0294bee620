"""agent/spec/library_match.py: which knowledge-base kernels may serve a problem outside the catalog.

A real Chroma store seeded with the shipped library (kgen's own embedding, no download), and
unmodified KernelBench level-1 files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kgen.agent.spec.library_match import LIBRARY_CANDIDATES, match_library, match_suite
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import read_problem

pytestmark = pytest.mark.xdist_group("library_match")

LEVEL1 = Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench" / "level1"


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    from kgen.knowledge_base.seeding import open_knowledge_base

    return open_knowledge_base(str(tmp_path_factory.mktemp("library") / "kb"))


def level1(name: str):
    return read_problem(LEVEL1 / f"{name}.py")


@pytest.mark.parametrize(("problem", "twin"), [
    ("23_Softmax", "softmax"), ("88_MinGPTNewGelu", "gelu"), ("26_GELU_", "gelu_exact"),
    ("24_LogSoftmax", "log_softmax"), ("95_CrossEntropyLoss", "cross_entropy_mean"), ("89_cumsum", "cumsum_dim"),
])
def test_a_kernelbench_file_is_served_by_the_catalog_kernel_with_the_same_reference(kb, problem, twin):
    match = match_library(level1(problem), kb, backend="triton", target="h100")
    assert match.served and match.how == "twin" and match.twins == [twin]
    assert 1 <= len(match.kernels) <= LIBRARY_CANDIDATES
    assert all(k.problem == twin and "class ModelNew" in k.source for k in match.kernels)
    assert match.line().startswith(f"{problem}: same reference as {twin}; to try: {match.kernels[0].kb_id}")


@pytest.mark.parametrize(("problem", "reason"), [
    ("19_ReLU", "no triton kernel in the library computes this reference (checked: "),
    ("90_cumprod", "no triton kernel in the library computes this reference (checked: "),  # a scan, not a sum
    ("41_Max_Pooling_1D", "no triton kernel in the library takes this problem's arguments"),
    ("100_HingeLoss", "no triton kernel in the library computes this reference (checked: "),  # a loss, not CE
])
def test_a_problem_the_library_cannot_serve_gets_its_own_one_line_reason(kb, problem, reason):
    match = match_library(level1(problem), kb, backend="triton", target="h100")
    assert not match.served and not match.kernels
    assert match.reason.startswith(reason) and "\n" not in match.reason
    assert match.line() == f"{problem}: cannot serve offline: {match.reason}"


def test_a_problem_with_kernels_of_its_own_is_served_by_them(kb):
    match = match_library(resolve_problem("softmax"), kb, backend="triton")
    assert match.served and match.how == "own" and {k.problem for k in match.kernels} == {"softmax"}


def test_a_backend_without_kernels_serves_nothing(kb):
    match = match_library(level1("23_Softmax"), kb, backend="no-such-backend")
    assert not match.served and "no no-such-backend kernel" in match.reason


def test_a_suite_is_screened_whole_and_a_broken_reference_is_its_reason(kb, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("19_ReLU", "23_Softmax"):
        shutil.copy(LEVEL1 / f"{name}.py", suite)
    broken = (LEVEL1 / "23_Softmax.py").read_text().replace("torch.softmax(x, dim=1)", "torch.softmax(x, dim=7)")
    (suite / "999_BrokenSoftmax.py").write_text(broken)
    infos = [read_problem(p) for p in sorted(suite.glob("*.py"))]
    matches = match_suite(infos, kb, backend="triton", target="h100")
    assert {n for n, m in matches.items() if m.served} == {"23_Softmax"}
    assert "999_BrokenSoftmax's reference does not run" in matches["999_BrokenSoftmax"].reason


@pytest.mark.parametrize(("problem", "waiting"), [
    ("48_Mean_reduction_over_a_dimension", "mean_dim"), ("49_Max_reduction_over_a_dimension", "max_dim"),
    ("91_cumsum_reverse", "cumsum_reverse"), ("92_cumsum_exclusive", "cumsum_exclusive"),
])
def test_an_operation_whose_catalog_seed_waits_for_a_gpu_says_so(kb, problem, waiting):
    """The catalog covers the operation but its seed has no GPU evidence yet: the reason names it
    and the file, so the user knows what one GPU run unlocks (not only that nothing matched)."""
    match = match_library(level1(problem), kb, backend="triton", target="h100")
    assert not match.served
    assert match.reason.startswith("no triton kernel in the library computes this reference (checked: ")
    assert (f"; the catalog's {waiting} computes it, but its seed waits for a GPU run "
            f"(knowledge_base/seed_kernels_unverified/triton/{waiting}.py: `kgen eval` it on a GPU)") in match.reason


@pytest.mark.parametrize("problem", ["19_ReLU", "90_cumprod", "41_Max_Pooling_1D", "53_Min_reduction_over_a_dimension"])
def test_a_waiting_seed_is_named_only_where_its_reference_computes_the_problems(kb, problem):
    match = match_library(level1(problem), kb, backend="triton", target="h100")
    named = [n for n in ("mean_dim", "max_dim", "cumsum_reverse", "cumsum_exclusive", "causal_attention_forward")
             if f"catalog's {n} " in match.reason]
    assert named == [], (problem, match.reason)
