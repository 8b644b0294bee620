"""The dynamic torch-op recorder: sees torch compute however it is reached, and nothing of Triton's.

Runs in-process under the Triton CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before anything imports triton).
"""

import os
from pathlib import Path

import pytest
import torch

from kgen.backends.cpu_devices import gpu_idioms_on_cpu
from kgen.backends.module_loading import load_module_from_file
from kgen.evals.checks import torch_usage
from kgen.evals.checks.torch_usage import (
    ALLOWED_ATEN_OPS,
    TorchOpUsage,
    is_allowed_aten_op,
    record_torch_ops,
)
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem
from kgen.knowledge_base import SEED_KERNELS_DIR

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs kernels in Triton's CPU interpreter"
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "candidates"
SEEDS = sorted((SEED_KERNELS_DIR / "triton").glob("*.py"))
#: the CPU sizes, made smaller still where the interpreter would be slow
SMALLER = {"cross_entropy_forward": {"N_TOKENS": 7, "VOCAB": 301}}


def _load(path: Path):
    return load_module_from_file(path)


def _relu_input() -> torch.Tensor:
    return torch.randn(16, 33, generator=torch.Generator().manual_seed(0))


def _outputs(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


# ----------------------------------------------------------------------------------------
# Correct kernels: no compute ops, identical results
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_seed_kernel_dispatches_no_compute_ops_and_results_are_unchanged(path):
    info = resolve_problem(path.stem)
    problem = load_problem(info.path, SMALLER.get(path.stem, info.small_sizes))
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    model = _load(path).ModelNew(*problem.get_init_inputs())
    # a seed asks torch.cuda for the SM count as on a GPU; on the CPU kgen answers as an H100
    # would while candidate code runs (the verifier does the same)
    with torch.no_grad(), gpu_idioms_on_cpu(None):
        plain = _outputs(model(*inputs))
        with record_torch_ops() as usage:
            recorded = _outputs(model(*inputs))
    assert usage.compute_ops == {}, usage.summary()
    assert usage.allowed_ops  # at least the output allocation
    assert all(torch.equal(a, b) for a, b in zip(plain, recorded, strict=True))


def test_kernelbench_solution_dispatches_only_its_allocation():
    model = _load(FIXTURES / "relu_kernelbench_solution.py").ModelNew()
    x = _relu_input()
    with record_torch_ops() as usage:
        out = model(x)
    assert usage.compute_ops == {}
    assert usage.allowed_ops == {"aten.empty_like.default": 1}
    assert torch.equal(out, torch.relu(x))


def test_autotuned_kernel_dispatches_no_compute_ops():
    path = FIXTURES / "control_relu_autotuned.py"
    if not path.exists():
        pytest.skip("control fixture not present")
    x = _relu_input()
    with record_torch_ops() as usage:
        out = _load(path).ModelNew()(x)
    assert usage.compute_ops == {}
    assert torch.equal(out, torch.relu(x))


# ----------------------------------------------------------------------------------------
# Torch compute is caught however it is reached
# ----------------------------------------------------------------------------------------

DUMMY_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def launch(x):
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
'''


def _candidate(tmp_path: Path, forward: str, extra: str = "", name: str = "cand"):
    body = "\n".join("        " + line for line in forward.strip().splitlines())
    path = tmp_path / f"{name}.py"
    path.write_text(f"{DUMMY_KERNEL}\n{extra}\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{body}\n")
    return _load(path).ModelNew()


@pytest.mark.parametrize(
    ("forward", "op"),
    [
        ("return torch.relu(launch(x))", "aten.relu.default"),
        ("return getattr(torch, 'rel' + 'u')(launch(x))", "aten.relu.default"),
        ("return __import__('torch').nn.functional.relu(launch(x))", "aten.relu.default"),
        ("out = launch(x)\nreturn out * (out > 0)", "aten.mul.Tensor"),
        ("out = launch(x)\nreturn out.clamp(min=0)", "aten.clamp.default"),
        ("return torch.ops.aten.relu(launch(x))", "aten.relu.default"),
        ("return torch.nn.ReLU()(launch(x))", "aten.relu.default"),
        ("w = torch.ones(x.shape[1], x.shape[1])\nreturn launch(x) @ w", "aten.mm.default"),
        ("return torch.einsum('ij->ij', launch(x)).relu()", "aten.relu.default"),
        ("out = launch(x)\nout.index_add_(0, torch.arange(2), out[:2].clone())\nreturn out", "aten.index_add_.default"),
    ],
)
def test_torch_compute_is_recorded(tmp_path, forward, op):
    model = _candidate(tmp_path, forward)
    x = _relu_input()
    with record_torch_ops() as usage:
        model(x)
    assert usage.compute_ops.get(op, 0) >= 1, usage
    assert usage.computes


def test_relu_with_a_dummy_launch_shows_relu_and_right_answer(tmp_path):
    model = _candidate(tmp_path, "return torch.relu(launch(x))")
    x = _relu_input()
    with record_torch_ops() as usage:
        out = model(x)
    assert torch.equal(out, torch.relu(x))
    assert usage.compute_ops == {"aten.relu.default": 1}
    assert "aten.relu.default x1" in usage.summary()


@pytest.mark.parametrize(
    ("name", "op"),
    [
        ("redteam_torch_inside.py", "aten.relu.default"),
        ("redteam_getattr_torch.py", "aten.relu.default"),
        ("redteam_dunder_import.py", "aten.relu.default"),
        ("redteam_nn_module_call.py", "aten.relu.default"),
        ("redteam_operator_math.py", "aten.gt.Scalar"),
        ("redteam_try_except_fallback.py", None),  # its kernel works: the fallback never runs
    ],
)
def test_planted_fixtures(name, op):
    x = _relu_input()
    with record_torch_ops() as usage:
        out = _load(FIXTURES / name).ModelNew()(x)
    assert torch.equal(out, torch.relu(x))  # the exploit would otherwise pass
    if op is None:
        assert usage.compute_ops == {}
    else:
        assert op in usage.compute_ops, usage


@pytest.mark.parametrize("escape", ["numpy()", "tolist()", "__array__()", "__dlpack__()"])
def test_host_escapes_are_recorded(tmp_path, escape):
    model = _candidate(tmp_path, f"out = launch(x)\nout.{escape}\nreturn out")
    with record_torch_ops() as usage:
        model(_relu_input())
    assert usage.compute_ops.get(f"Tensor.{escape[:-2]}") == 1, usage


def test_torch_hidden_in_a_kernel_body_is_recorded(tmp_path):
    # Under the interpreter a kernel body is plain Python: torch called there must count.
    extra = '''
_SIDE = torch.zeros(4)


@triton.jit
def sneaky_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    _SIDE.exp_()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''
    forward = "out = torch.empty_like(x)\nsneaky_kernel[(1,)](x, out, x.numel(), BLOCK=1024)\nreturn out"
    model = _candidate(tmp_path, forward, extra=extra)
    with record_torch_ops() as usage:
        model(_relu_input())
    assert usage.compute_ops.get("aten.exp_.default") == 1, usage


def test_torch_in_a_callback_handed_to_triton_is_recorded(tmp_path):
    extra = "copy_kernel.add_pre_run_hook(lambda *args, **kwargs: args[0].relu_())"
    model = _candidate(tmp_path, "return launch(x)", extra=extra)
    with record_torch_ops() as usage:
        model(_relu_input())
    assert usage.compute_ops.get("aten.relu_.default") == 1, usage


# ----------------------------------------------------------------------------------------
# Triton's interpreter calls torch itself: those ops are not the candidate's
# ----------------------------------------------------------------------------------------


def test_interpreter_argument_copies_are_ignored(monkeypatch):
    model = _load(SEEDS[0].parent / "rmsnorm_backward.py").ModelNew()
    args = (torch.randn(5, 8), torch.randn(5, 8), torch.randn(8), torch.rand(5) + 0.5)
    with record_torch_ops() as usage:
        model(*args)
    assert usage.compute_ops == {}
    assert "aten.set_.source_Storage" not in usage.allowed_ops

    # What the interpreter does on its own: host aliases (new_empty + set_) before a grid,
    # storage copies (empty + set_ + copy_) after it. Without the filter they show up.
    assert torch_usage._interpreter_codes()
    monkeypatch.setattr(torch_usage, "_ignored_codes", set())
    with record_torch_ops() as raw:
        model(*args)
    assert raw.compute_ops.get("aten.set_.source_Storage", 0) > 0
    assert raw.compute_ops.get("aten.set_.source_Storage_storage_offset", 0) > 0
    assert raw.allowed_ops.get("aten.copy_.default", 0) > 0


# ----------------------------------------------------------------------------------------
# The recorder itself
# ----------------------------------------------------------------------------------------


def test_classification():
    assert is_allowed_aten_op("aten.empty_like.default")
    assert is_allowed_aten_op("aten::view")
    assert is_allowed_aten_op("aten._to_copy.default")
    assert is_allowed_aten_op("aten.clone.default")
    for op in ("aten.relu.default", "aten.add.Tensor", "aten.mm.default", "aten.cat.default",
               "aten.index.Tensor", "aten.set_.source_Storage", "prims.add.default", "mylib.relu.default"):
        assert not is_allowed_aten_op(op), op
    assert {"empty", "view", "copy_", "_to_copy", "clone"} <= ALLOWED_ATEN_OPS
    assert not {"add", "mul", "mm", "sum", "exp", "index_add", "scatter", "convolution", "_softmax"} & ALLOWED_ATEN_OPS


def test_allocation_views_and_casts_are_allowed():
    x = torch.randn(4, 6)
    with record_torch_ops() as usage:
        y = torch.empty(4, 6)
        torch.zeros_like(x).fill_(1.0)
        x.t().contiguous().view(-1).reshape(6, 4)[1:, ::2].unsqueeze(0).squeeze(0)
        x.to(torch.float64).float().half()
        x.permute(1, 0).expand(6, 4).clone()
        torch.arange(10)
        y.copy_(x)
        x[0, 0].item()
    assert usage.compute_ops == {}, usage
    assert usage.allowed_ops["aten.clone.default"] >= 2


def test_nested_recorders_and_clean_exit():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="boom"):
        with record_torch_ops() as outer:
            torch.exp(x)
            with record_torch_ops() as inner:
                torch.sin(x)
            raise RuntimeError("boom")
    assert outer.compute_ops == {"aten.exp.default": 1, "aten.sin.default": 1}
    assert inner.compute_ops == {"aten.sin.default": 1}
    assert _get_current_dispatch_mode() is None
    torch.cos(x)  # after the block nothing is recorded any more
    assert "aten.cos.default" not in outer.compute_ops


def test_any_device_meta_tensors():
    x = torch.empty(4, 4, device="meta")
    with record_torch_ops() as usage:
        torch.relu(x)
        torch.empty_like(x)
    assert usage.compute_ops == {"aten.relu.default": 1}
    assert usage.allowed_ops == {"aten.empty_like.default": 1}


def test_usage_is_a_json_model():
    usage = TorchOpUsage(compute_ops={"aten.relu.default": 2}, allowed_ops={"aten.view.default": 1})
    assert TorchOpUsage.model_validate_json(usage.model_dump_json()) == usage
    assert usage.summary() == "aten.relu.default x2"
    assert TorchOpUsage().summary() == ""


def test_cuda_array_interface_is_a_host_escape():
    x = torch.randn(3)
    with record_torch_ops() as usage:
        with pytest.raises((AttributeError, RuntimeError, TypeError)):
            x.__cuda_array_interface__  # noqa: B018 - a CPU tensor refuses, after the read is seen
    assert usage.compute_ops == {"Tensor.__cuda_array_interface__": 1}
