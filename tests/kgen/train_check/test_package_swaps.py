"""`kgen.train_check.package_swaps`: an exported package's ops wired into a Llama group by group, as
`torch.compile` sees them: each group compiled with fullgraph (no graph break), the compiled loss
and gradients equal to the same wiring in eager mode, and close to the stock model's; groups that
replace the same code are refused together.

The package holds the shipped seeds and the fused seams' waiting seeds. The fused ones are taken
as verified here (their CPU verification is tests/knowledge_base/test_seed_kernels.py's; the GPU's
waits for a lent GPU): this file is about the wiring, not the verdicts."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from kgen.evals.problem.catalog import resolve_problem
from kgen.export.package import write_package
from kgen.export.sources import Exportable, find_exportables
from kgen.knowledge_base import SEED_KERNELS_DIR, UNVERIFIED_SEEDS_DIR
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.train_check.in_model import all_groups
from kgen.train_check.model import ModelSize, build_model
from kgen.train_check.package_swaps import (
    GROUPS,
    available_groups,
    check_groups,
    kernel_names,
    wire,
    wire_stock,
)
from kgen.train_check.tokens import token_batches

SIZE = ModelSize(hidden=32, layers=2, heads=2, intermediate=64, vocab=256, batch=2, seq=16)
PACKAGE = "wired_group_ops"


def _kernel(problem: str) -> Exportable:
    shipped = SEED_KERNELS_DIR / "triton" / f"{problem}.py"
    if shipped.is_file():
        (found,) = find_exportables(str(shipped), problem=problem)
        return found
    path = UNVERIFIED_SEEDS_DIR / "triton" / f"{problem}.py"
    info = resolve_problem(problem)
    return Exportable(source=str(path), problem=info.name, problem_path=info.path, backend="triton",
                      verdict="passed", speed="not timed", kernel_path=path, evidence="taken as verified by this test",
                      code_hash=normalised_code_hash(path.read_text()))


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    from kgen.train_check.kernels import prepare_process

    prepare_process("cpu")  # the interpreter computing as the verifier's does
    out = tmp_path_factory.mktemp("wired")
    problems = dict.fromkeys(p for g in GROUPS for p in g.problems)
    write_package([_kernel(p) for p in problems], out, PACKAGE)
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def test_every_group_is_available_and_every_op_registered_for_the_compiler(package):
    assert available_groups(package) == [g.name for g in GROUPS]
    assert all(k.registration == "triton_op" for k in package.package.kernels.values())
    assert all_groups(package) == [g for g in available_groups(package) if g != "cross_entropy"]
    assert {"_rmsnorm_fwd_tile", "_ce_fwd_chunks"} <= kernel_names(package)


@pytest.mark.parametrize("group", [g.name for g in GROUPS])
def test_each_group_compiles_without_a_graph_break_and_matches_eager_and_stock(package, group):
    ids = token_batches(SIZE.vocab, SIZE.batch, SIZE.seq, 1, seed=3, device="cpu")[0]
    model = build_model(SIZE, 0, "cpu")
    loss_fn = wire(model, package, [group])
    params = list(model.parameters())
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")  # a graph break raises
    got = compiled(ids)
    got_grads = torch.autograd.grad(got, params)
    assert not torch._dynamo.utils.counters["graph_break"]
    eager = loss_fn(ids)
    eager_grads = torch.autograd.grad(eager, params)
    assert float(got) == pytest.approx(float(eager), rel=1e-6)
    assert max(_rel(a, b) for a, b in zip(got_grads, eager_grads, strict=True)) < 1e-6
    stock = build_model(SIZE, 0, "cpu")
    want = wire_stock(stock)(ids)
    want_grads = torch.autograd.grad(want, list(stock.parameters()))
    assert float(got) == pytest.approx(float(want), rel=2e-3)
    assert max(_rel(a, b) for a, b in zip(got_grads, want_grads, strict=True)) < 5e-2  # bf16 training


def test_groups_that_replace_the_same_code_or_unknown_names_are_refused():
    assert check_groups(["swiglu", "fused_add_rmsnorm"]) == ["fused_add_rmsnorm", "swiglu"]
    with pytest.raises(ValueError, match="replace the same code"):
        check_groups(["cross_entropy", "fused_linear_cross_entropy"])
    with pytest.raises(ValueError, match="unknown swap group"):
        check_groups(["layernorm"])


def test_the_packages_own_tests_pass_with_a_two_output_pair(tmp_path):
    """The package's own pytest file, without kgen: the fused add + RMSNorm pair's forward returns
    two tensors, so its gradient check hands the backward one upstream gradient per output."""
    import os
    import subprocess

    out = tmp_path / "fused"
    write_package([_kernel(p) for p in ("fused_add_rmsnorm_forward", "fused_add_rmsnorm_backward")], out, "fused_pair")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "tests"],
                          cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout  # two kernels against their references, the pair's gradients
