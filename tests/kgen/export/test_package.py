"""`kgen export`'s package (kgen/export/package.py, op_runtime.py): seeds exported, imported from
the folder (no pip), run on CPU tensors in Triton's interpreter against the problems' references;
torch.compile(fullgraph=True) traces them, and sees their Triton kernels (``triton_op``) where
the kernel's wrapper traces, an opaque op where it does not; autograd through the rmsnorm and
cross-entropy pairs, compiled too; the package's own pytest file passes; a kernel file changed
after export is refused at import."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem
from kgen.export.package import write_package
from kgen.export.problem_signature import ExportError
from kgen.export.sources import find_exportables
from kgen.knowledge_base import SEED_KERNELS_DIR

SEEDS = Path(SEED_KERNELS_DIR) / "triton"
#: one package per test session: torch.library registers an op name once per process
PACKAGE = "exported_seed_ops"
PROBLEMS = ("rmsnorm_forward", "rmsnorm_backward", "softmax", "cross_entropy_forward", "cross_entropy_backward")


def _export(out: Path, name: str, problems: tuple[str, ...] = PROBLEMS) -> None:
    kernels = [k for p in problems for k in find_exportables(str(SEEDS / f"{p}.py"), problem=p)]
    write_package(kernels, out, name)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    _export(out, PACKAGE)
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE), out
    finally:
        sys.path.remove(str(out))


def _reference(problem: str, sizes: dict[str, int], seed: int):
    """The catalog's reference at ``sizes``, its inputs under ``seed``, and its init inputs."""
    loaded = load_problem(resolve_problem(problem).path, sizes)
    torch.manual_seed(seed)
    return loaded.model_class(*loaded.get_init_inputs()), loaded.get_inputs(), loaded.get_init_inputs()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize(("problem", "sizes"), [
    ("rmsnorm_forward", {"ROWS": 9, "HIDDEN": 40}),
    ("softmax", {"ROWS": 5, "COLS": 33}),
    ("cross_entropy_forward", {"N_TOKENS": 7, "VOCAB": 50}),
    ("rmsnorm_backward", {"ROWS": 3, "HIDDEN": 17}),
])
def test_ops_match_the_reference_on_cpu(package, problem, sizes):
    module, _ = package
    model, inputs, init = _reference(problem, sizes, seed=11)
    got = getattr(module, problem)(*inputs)
    want = model(*[v.double() if v.is_floating_point() else v for v in inputs])
    eager = model(*inputs)
    for g, w, e in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want, eager)), strict=True):
        assert g.dtype == e.dtype and g.shape == w.shape
        assert _rel(g, w) < 1e-2
    # the op is registered under the package's namespace, and the module wrapper is the same op
    assert hasattr(torch.ops, f"kgen_{PACKAGE}")
    cls = "".join(part.capitalize() for part in problem.split("_"))
    again = getattr(module, cls)(*init)(*inputs)
    assert all(torch.equal(a, b) for a, b in zip(again if isinstance(again, tuple) else (again,),
                                                   got if isinstance(got, tuple) else (got,), strict=True))


def test_the_manifest_carries_source_hash_problem_version_and_verdict(package):
    import json

    module, out = package
    manifest = json.loads((out / PACKAGE / "manifest.json").read_text())
    entry = next(e for e in manifest["kernels"] if e["name"] == "rmsnorm_forward")
    assert (out / PACKAGE / entry["kernel_file"]).read_bytes() == (SEEDS / "rmsnorm_forward.py").read_bytes()
    assert entry["verdict"] == "passed" and entry["problem"] == "rmsnorm_forward"
    assert entry["backward"] == "rmsnorm_backward"
    assert manifest["kgen_version"] and len(entry["kernel_sha256"]) == 64
    assert [e["name"] for e in manifest["kernels"] if e["backward"]] == ["rmsnorm_forward", "cross_entropy_forward"]


class _Block(torch.nn.Module):
    """A small model using three exported ops between torch ops."""

    def __init__(self, module, hidden: int, vocab: int) -> None:
        super().__init__()
        self.norm = module.RmsnormForward()
        self.weight = torch.nn.Parameter((1 + 0.1 * torch.randn(hidden)).to(torch.bfloat16))
        self.head = torch.nn.Parameter((0.2 * torch.randn(hidden, vocab)).to(torch.bfloat16))
        self.loss = module.cross_entropy_forward

    def forward(self, x, targets):
        h = self.norm(x * 2, self.weight)
        return self.loss(h @ self.head, targets).mean()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_traces_the_ops_without_a_graph_break(package, backend):
    module, _ = package
    torch._dynamo.reset()
    torch.manual_seed(3)
    block = _Block(module, hidden=24, vocab=40)
    x, targets = torch.randn(6, 24, dtype=torch.bfloat16), torch.randint(0, 40, (6,))
    compiled = torch.compile(block, fullgraph=True, backend=backend)  # a graph break raises
    assert torch.equal(compiled(x, targets), block(x, targets))
    # a new shape traces again from the fake implementation (the reference on fake tensors)
    x2, t2 = torch.randn(3, 24, dtype=torch.bfloat16), torch.randint(0, 40, (3,))
    assert torch.equal(compiled(x2, t2), block(x2, t2))


def test_autograd_through_the_pairs_matches_the_reference_gradients(package):
    module, _ = package
    torch.manual_seed(5)
    x = torch.randn(7, 48, dtype=torch.bfloat16)
    weight = (1 + 0.1 * torch.randn(48)).to(torch.bfloat16)
    logits = (2 * torch.randn(7, 30)).to(torch.bfloat16)
    targets = torch.randint(0, 30, (7,))

    leaves = [x.clone().requires_grad_(), weight.clone().requires_grad_(), logits.clone().requires_grad_()]
    loss = (module.rmsnorm_forward(leaves[0], leaves[1]).float() ** 2).sum() + module.cross_entropy_forward(
        leaves[2], targets).sum()
    got = torch.autograd.grad(loss, leaves)

    refs = [v.double().requires_grad_() for v in (x, weight, logits)]
    rms, _, _ = _reference("rmsnorm_forward", {"ROWS": 7, "HIDDEN": 48}, 0)
    ce, _, _ = _reference("cross_entropy_forward", {"N_TOKENS": 7, "VOCAB": 30}, 0)
    ref_loss = (rms(refs[0], refs[1]) ** 2).sum() + ce(refs[2], targets).sum()
    want = torch.autograd.grad(ref_loss, refs)
    for g, w, leaf in zip(got, want, leaves, strict=True):
        assert g.dtype == leaf.dtype and g.shape == leaf.shape
        assert _rel(g, w) < 2e-2


def test_calls_outside_what_was_verified_are_refused_or_made_contiguous(package):
    module, _ = package
    with pytest.raises(TypeError, match="must be torch.float32"):
        module.softmax(torch.randn(3, 8, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="must be torch.bfloat16"):
        module.rmsnorm_forward(torch.randn(3, 8), torch.ones(8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="2 dimensions"):
        module.softmax(torch.randn(2, 3, 8))
    strided = torch.randn(16, 12).t()  # a transposed view: the verifier gave softmax only plain inputs
    assert not strided.is_contiguous()
    torch.testing.assert_close(module.softmax(strided), torch.softmax(strided, dim=-1), atol=1e-6, rtol=1e-5)


def _run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_packages_own_tests_pass_without_kgen(package):
    _, out = package
    test_text = (out / "tests" / f"test_{PACKAGE}.py").read_text()
    assert "kgen" not in test_text.replace(PACKAGE, "").replace("kgen export", "")
    done = _run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "tests"], out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "7 passed" in done.stdout  # 5 kernels against their references, 2 pairs' gradients


def test_the_packages_own_test_fails_on_a_wrong_kernel(tmp_path):
    """The generated test can fail: a kernel file swapped for a wrong one (and its hash updated,
    so the import accepts it) fails its comparison with the reference."""
    import hashlib
    import json

    _export(tmp_path, "wrong_softmax_ops", ("softmax",))
    kernel = tmp_path / "wrong_softmax_ops" / "kernels" / "softmax.py"
    kernel.write_text(kernel.read_text().replace("tl.exp(", "tl.exp(0.5 * "))
    manifest_path = tmp_path / "wrong_softmax_ops" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["kernels"][0]["kernel_sha256"] = hashlib.sha256(kernel.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    done = _run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "tests"], tmp_path)
    assert done.returncode == 1 and "rel-L2" in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("tamper", [
    lambda text: text + "\n# edited after export\n",
    lambda text: text.replace("BLOCK_ROWS=4", "BLOCK_ROWS=8"),
])
def test_a_kernel_changed_after_export_is_refused_at_import(tmp_path, tamper):
    _export(tmp_path, "tampered_ops", ("rmsnorm_forward",))
    kernel = tmp_path / "tampered_ops" / "kernels" / "rmsnorm_forward.py"
    kernel.write_text(tamper(kernel.read_text()))
    done = _run_python(["-c", "import tampered_ops"], tmp_path)
    assert done.returncode != 0
    assert "TamperedKernelError" in done.stderr and "code hash mismatch" in done.stderr
    assert "kernels/rmsnorm_forward.py" in done.stderr


def test_an_untouched_export_imports(tmp_path):
    _export(tmp_path, "untouched_ops", ("rmsnorm_forward",))
    done = _run_python(["-c", "import untouched_ops; print(untouched_ops.rmsnorm_forward.__name__)"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "rmsnorm_forward"


def test_two_kernels_for_one_problem_or_a_bad_name_are_refused(tmp_path):
    kernels = find_exportables(str(SEEDS / "softmax.py"), problem="softmax")
    with pytest.raises(ExportError, match="two kernels for softmax"):
        write_package(kernels * 2, tmp_path / "a", "twice")
    with pytest.raises(ExportError, match="no package name"):
        write_package(kernels, tmp_path / "b", "Bad-Name")


def _graphs(fn, *args):
    """``fn`` compiled by torch.compile (fullgraph) with AOTAutograd as Inductor sees it; the
    forward and backward graphs' node targets, as text, and the compiled result."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    seen: list[list[str]] = []

    def keep(graph, _inputs):
        seen.append([str(node.target) for node in graph.graph.nodes])
        return make_boxed_func(graph)

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    return compiled(*args), seen


def test_every_seed_is_registered_so_the_compiler_sees_its_triton_kernels(package):
    module, out = package
    import json

    manifest = json.loads((out / PACKAGE / "manifest.json").read_text())
    assert {e["name"]: e["registration"] for e in manifest["kernels"]} == dict.fromkeys(PROBLEMS, "triton_op")
    torch.manual_seed(7)
    x, weight = torch.randn(9, 40, dtype=torch.bfloat16), (1 + 0.1 * torch.randn(40)).to(torch.bfloat16)
    got, graphs = _graphs(lambda a, w: module.rmsnorm_forward(a * 2, w).float().sum(dim=-1), x, weight)
    (forward,) = graphs
    # the op's body is traced: its Triton launch is a node of the graph, the opaque op is not
    assert any("triton_kernel_wrapper_functional" in t for t in forward), forward
    assert not any(f"kgen_{PACKAGE}" in t for t in forward), forward
    want = module.rmsnorm_forward(x * 2, weight).float().sum(dim=-1)
    assert torch.equal(got, want)


def test_autograd_through_a_pair_compiles_with_both_kernels_in_the_graphs(package):
    module, _ = package
    torch.manual_seed(8)
    x = torch.randn(6, 32, dtype=torch.bfloat16, requires_grad=True)
    weight = (1 + 0.1 * torch.randn(32)).to(torch.bfloat16).requires_grad_()

    def loss(a, w):
        return (module.rmsnorm_forward(a, w).float() ** 2).sum()

    value, graphs = _graphs(loss, x, weight)
    got = torch.autograd.grad(value, (x, weight))
    assert len(graphs) == 2 and all(any("triton_kernel_wrapper" in t for t in g) for g in graphs), graphs
    want = torch.autograd.grad(loss(x, weight), (x, weight))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


def _exportable_file(tmp_path: Path, problem: str, source: str):
    """A kernel file for ``problem`` that the exporter takes as verified (its eval.json says passed):
    the registration probe, not the verdict, is what these tests are about."""
    from kgen.export.sources import Exportable
    from kgen.knowledge_base.code_hash import normalised_code_hash

    folder = tmp_path / "cand"
    folder.mkdir()
    path = folder / f"{problem}.py"
    path.write_text(source)
    info = resolve_problem(problem)
    return Exportable(source=str(path), problem=info.name, problem_path=info.path, backend="triton",
                      verdict="passed", speed="not timed", kernel_path=path, evidence="test",
                      code_hash=normalised_code_hash(source))


_SWIGLU_HEAD = """
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def _k(g_ptr, u_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    g = tl.load(g_ptr + offs, mask=m).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=m).to(tl.float32)
    tl.store(o_ptr + offs, (g * tl.sigmoid(g) * u).to(o_ptr.dtype.element_ty), mask=m)
"""


@pytest.mark.parametrize(("name", "body", "why"), [
    ("host_read", """
class ModelNew(nn.Module):
    def forward(self, gate, up):
        out = torch.empty_like(gate)
        n = gate.numel()
        if float(gate.abs().max()) > 1e30:  # a host read: no fake tensor has a value
            raise ValueError("overflow")
        _k[(triton.cdiv(n, 256),)](gate, up, out, n, BLOCK=256)
        return out
""", "its launch does not trace"),
    ("wrong_shape", """
class ModelNew(nn.Module):
    def forward(self, gate, up):
        out = torch.empty_like(gate)
        n = gate.numel()
        _k[(triton.cdiv(n, 256),)](gate, up, out, n, BLOCK=256)
        return out.view(-1)  # flattened: not the reference's shape
""", "where its problem's reference returns"),
], ids=["host_read", "wrong_shape"])
def test_a_kernel_whose_wrapper_does_not_trace_is_an_opaque_op_that_still_compiles(tmp_path, name, body, why):
    kernel = _exportable_file(tmp_path, "swiglu", _SWIGLU_HEAD + body)
    manifest = write_package([kernel], tmp_path / "out", f"opaque_{name}")
    (entry,) = manifest.kernels
    assert entry.registration == "custom_op" and why in entry.registration_note, entry.registration_note
    if name == "wrong_shape":
        return  # a verified kernel never returns another shape; this one only shows the probe says so
    sys.path.insert(0, str(tmp_path / "out"))
    try:
        module = importlib.import_module(f"opaque_{name}")
    finally:
        sys.path.remove(str(tmp_path / "out"))
    gate, up = torch.randn(5, 16, dtype=torch.bfloat16), torch.randn(5, 16, dtype=torch.bfloat16)
    got, graphs = _graphs(lambda g, u: module.swiglu(g, u) * 2, gate, up)
    assert any(f"kgen_opaque_{name}" in t for t in graphs[0]), graphs  # the op, opaque, in the graph
    assert torch.equal(got, module.swiglu(gate, up) * 2)


def test_a_backend_torch_cannot_trace_is_registered_as_an_opaque_op_without_a_probe():
    from kgen.backends.registry import backend_info

    assert backend_info("triton").compiler_traceable and not backend_info("cute").compiler_traceable
