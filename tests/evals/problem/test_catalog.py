"""The shipped catalog: enough problems, each well-formed, names and aliases resolve."""

import pytest
import torch

from kgen.evals.problem.catalog import (
    UnknownProblemError,
    catalog,
    close_names,
    paired_backward,
    resolve_problem,
)
from kgen.evals.problem.format import load_problem

REQUIRED = {
    "rmsnorm_forward", "rmsnorm_backward", "layernorm_forward", "layernorm_backward", "softmax",
    "cross_entropy_forward", "cross_entropy_backward", "embedding_backward",
    "fused_embedding_rmsnorm_backward", "swiglu", "gelu", "row_sum", "cumsum", "gemm_bias_gelu",
    "causal_attention_forward", "conv1d",
}


def test_catalog_covers_the_required_problems():
    names = {info.name for info in catalog()}
    assert len(names) >= 16
    assert REQUIRED <= names


@pytest.mark.parametrize("info", catalog(), ids=lambda info: info.name)
def test_each_problem_is_complete_and_runs_its_fp64_reference(info):
    assert info.has_kgen_metadata and info.description and info.aliases
    assert info.kind in ("forward", "backward")
    assert info.small_sizes, "CPU runs need a small size set"
    problem = load_problem(info.path, info.cpu_sizes())
    assert problem.bytes_moved() > 0 and problem.flops() > 0
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    assert any(t.dtype in (torch.bfloat16, torch.float32) for t in inputs if torch.is_tensor(t))
    model = problem.model_class(*problem.get_init_inputs()).double()
    up = [t.double() if torch.is_tensor(t) and t.is_floating_point() else t for t in inputs]
    outputs = model(*up)
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    for out in outputs:
        assert out.dtype == torch.float64, "the reference must stay in fp64 on fp64 inputs"
        assert torch.isfinite(out).all()
        assert out.abs().sum() > 0, "a degenerate all-zero output hides bugs"


@pytest.mark.parametrize(
    ("typed", "name"),
    [("RMSNorm bwd", "rmsnorm_backward"), ("rms_norm_backward", "rmsnorm_backward"), ("SOFTMAX", "softmax")],
)
def test_names_and_aliases_resolve_forgivingly(typed, name):
    assert resolve_problem(typed).name == name


def test_unknown_name_suggests_the_nearest():
    with pytest.raises(UnknownProblemError, match="did you mean .*rmsnorm_backward"):
        resolve_problem("rmsnrm_backwards")


def test_every_catalog_problem_states_what_its_baselines_compute_in():
    for info in catalog():
        assert info.baseline_compute, f"{info.name} has no KGEN_BASELINE_COMPUTE"


@pytest.mark.parametrize("name", [i.name for i in catalog() if i.has_baseline_class])
def test_a_declared_baseline_computes_the_problems_operation(name):
    """A problem's Baseline (what eager and torch.compile are timed on) is the same operation
    as its reference, in narrower dtypes: close to the fp64 reference, not equal to it."""
    info = next(i for i in catalog() if i.name == name)
    problem = load_problem(info.path, info.cpu_sizes())
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    reference = problem.model_class()(*[t.double() if t.is_floating_point() else t for t in inputs])
    baseline = problem.baseline_class()(*inputs)
    assert baseline.dtype == inputs[0].dtype
    error = ((baseline.double() - reference).norm() / reference.norm()).item()
    assert error < 2e-2, f"{name}: Baseline is {error:.3g} from the reference"


@pytest.mark.parametrize(("forward", "backward"), [
    ("rmsnorm_forward", "rmsnorm_backward"), ("layernorm_forward", "layernorm_backward"),
    ("cross_entropy_forward", "cross_entropy_backward"), ("softmax", None), ("swiglu", None),
    ("rmsnorm_backward", None), ("embedding_backward", None),
    ("fused_add_rmsnorm_forward", "fused_add_rmsnorm_backward"), ("fused_linear_cross_entropy", None),
])
def test_the_catalog_pairs_a_forward_with_its_backward(forward, backward):
    """One rule (``paired_backward``): <op>_forward with <op>_backward, whose
    kgen_backward_inputs makes inputs like its own get_inputs() from the forward's, and whose
    outputs are the gradients of the forward's floating-point inputs."""
    found = paired_backward(resolve_problem(forward))
    assert (found.name if found else None) == backward
    if found is None:
        return
    fwd_info = resolve_problem(forward)
    fwd = load_problem(fwd_info.path, fwd_info.cpu_sizes())
    bwd = load_problem(found.path, found.cpu_sizes())
    torch.manual_seed(0)
    inputs, init = fwd.get_inputs(), fwd.get_init_inputs()
    out = fwd.model_class(*init)(*inputs)
    # a forward with several outputs hands its backward one gradient per output, as autograd does
    grad_out = [torch.ones_like(o) for o in out] if isinstance(out, tuple) else torch.ones_like(out)
    made = bwd.module.kgen_backward_inputs(grad_out, inputs, init)
    own = bwd.get_inputs()
    assert [(t.shape, t.dtype) for t in made] == [(t.shape, t.dtype) for t in own]
    grads = bwd.model_class(*bwd.get_init_inputs())(*made)
    grads = grads if isinstance(grads, tuple) else (grads,)
    floats = [t for t in inputs if t.is_floating_point()]
    assert [(g.shape, g.dtype) for g in grads] == [(t.shape, t.dtype) for t in floats]


KERNELBENCH_NAMES = ["19_ReLU", "20_LeakyReLU", "23_Softmax", "35_GroupNorm_", "36_RMSNorm_", "37_FrobeniusNorm_",
                     "38_L1Norm_", "1_Square_matrix_multiplication_", "2_Standard_matrix_multiplication_"]


@pytest.mark.parametrize(
    ("typed", "first"),
    [("36_RMSNorm", "36_RMSNorm_"),  # the stem without KernelBench's trailing underscore
     ("36", "36_RMSNorm_"),  # a problem number
     ("rmsnorm", "36_RMSNorm_"),  # part of the name
     ("23_Sofmtax", "23_Softmax")],  # a typo
)
def test_a_mistyped_name_suggests_the_close_one_first(typed, first):
    assert close_names(typed, KERNELBENCH_NAMES)[0] == first


def test_a_name_that_is_part_of_another_suggests_no_mere_look_alike():
    """`--only 36_RMSNorm` also offered 35_GroupNorm_ (alike in spelling, another operation)."""
    assert close_names("36_RMSNorm", KERNELBENCH_NAMES) == ["36_RMSNorm_"]


def test_a_name_like_no_other_suggests_nothing():
    """'did you mean log_softmax, layernorm_trailing, rmsnorm_forward?' for no_such_problem read as
    if kgen knew better; a suggestion shares a real part of the spelling or there is none."""
    assert close_names("no_such_problem", KERNELBENCH_NAMES) == []
    assert close_names("no_such_problem", [info.name for info in catalog()]) == []
    with pytest.raises(UnknownProblemError) as caught:
        resolve_problem("no_such_problem")
    assert "did you mean" not in str(caught.value) and "kgen problems list" in str(caught.value)
