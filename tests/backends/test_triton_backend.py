"""The Triton backend: process setup, launch recording (interpreter), cross-compilation.

tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported, so kernels
here run on CPU tensors through Triton's interpreter. Cross-compiling from an
interpreting process goes through the backend's worker subprocess (one per test
session), which is where most of this file's time goes.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kgen.backends.base import Backend, KernelLaunch
from kgen.backends.device import Device
from kgen.backends.registry import UnknownBackendError, get_backend
from kgen.backends.targets import resolve_target
from kgen.backends.triton import cross_compile as xc
from kgen.backends.triton.launches import describe_launch, record_launches, triton_type_of

REPO = Path(__file__).resolve().parents[2]
# a kernel whose launches the tests know (tests/fixtures/search_kernels/README.md)
SEED = REPO / "tests" / "fixtures" / "search_kernels" / "rmsnorm_backward.py"
CUDA = torch.cuda.is_available()

AUTOTUNED = '''
import os
import time

import torch
import triton
import triton.language as tl


def _cpu_bench(kernel_call, quantiles):
    """The default benchmarker needs a GPU driver, even under the interpreter."""
    start = time.perf_counter()
    kernel_call()
    return [time.perf_counter() - start] * len(quantiles)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
    key=["n"],
    do_bench=_cpu_bench if os.environ.get("TRITON_INTERPRET") == "1" else None,
)
@triton.jit
def _scale(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _add_one(y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(y_ptr + offs) + 1)
    else:
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=mask) + 1, mask=mask)


def forward(x, alpha=2.0):
    y = torch.empty_like(x)
    n = x.numel()
    _scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, alpha)
    _add_one[(triton.cdiv(n, 64),)](y, n, BLOCK=64)
    return y
'''

FP8 = '''
import triton
import triton.language as tl


@triton.jit
def _via_fp8(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x.to(tl.float8e4nv).to(tl.float32), mask=mask)


def forward(x, y):
    _via_fp8[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
'''

SPECIALIZE = '''
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n"])
def _copy(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs * stride, tl.load(x_ptr + offs * stride, mask=offs < n), mask=offs < n)
'''


@pytest.fixture(scope="module")
def backend():
    b = get_backend("triton")
    b.prepare_process(Device.CPU)
    return b


@pytest.fixture(scope="module")
def seed(backend):
    return backend.load_candidate(SEED)


def _seed_inputs(rows=8, cols=1000):
    torch.manual_seed(0)
    x = torch.randn(rows, cols, dtype=torch.bfloat16)
    return torch.randn_like(x), x, torch.randn(cols, dtype=torch.bfloat16), torch.rand(rows) + 0.5


def _run_seed(model, inputs):
    """Run the seed; skip where Triton's own interpreter cannot (Triton < 3.9 with a recent numpy)."""
    try:
        return model(*inputs)
    except Exception as exc:  # triton.runtime.errors.InterpreterError
        if "only 0-dimensional arrays can be converted" in str(exc):
            pytest.skip(f"this Triton's interpreter cannot run a runtime-bounded loop with this numpy: {exc}")
        raise


def _write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture(scope="module")
def seed_launches(seed):
    with record_launches() as log:
        _run_seed(seed.ModelNew(), _seed_inputs(rows=64, cols=4096))
    return log.launches


# ---------------------------------------------------------------------------- registry, setup


def test_registry_gives_a_backend():
    backend = get_backend("triton")
    assert isinstance(backend, Backend)
    assert backend.name == "triton"


def test_unknown_backend_lists_known():
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'cute-dsl'.*known backends: .*triton"):
        get_backend("cute-dsl")


def test_prepare_process_cpu_sets_interpret(backend, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backend.prepare_process(Device.CPU)
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_prepare_process_refuses_a_mode_switch_after_import(backend, monkeypatch):
    import triton.language  # noqa: F401 - imported in interpret mode by this session

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="before prepare_process"):
        backend.prepare_process(Device.CUDA)


def test_prepare_process_cuda_unsets_interpret_in_a_fresh_process():
    code = (
        "import os\n"
        "from kgen.backends.device import Device\n"
        "from kgen.backends.registry import get_backend\n"
        "get_backend('triton').prepare_process(Device.CUDA)\n"
        "assert 'TRITON_INTERPRET' not in os.environ\n"
        "import triton.language.standard as s\n"
        "print(type(s.cdiv).__name__)\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "JITFunction"


# ---------------------------------------------------------------------------- launch recording


def test_seed_forward_records_two_launches_each(seed):
    model = seed.ModelNew()
    with record_launches() as log:
        _run_seed(model, _seed_inputs())
        _run_seed(model, _seed_inputs())
    assert len(log.launches) == 4
    assert [launch.kernel for launch in log.launches] == ["_rmsnorm_bwd_rows", "_sum_partials"] * 2
    assert log.autotune_launches == []

    rows = log.launches[0]
    assert rows.signature == {
        "grad_out_ptr": "*bf16", "x_ptr": "*bf16", "weight_ptr": "*bf16", "rstd_ptr": "*fp32",
        "grad_x_ptr": "*bf16", "partial_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
        "rows_per_program": "i32",
    }
    assert rows.constants == {"BLOCK_COLS": 1024}
    assert rows.options == {"num_warps": 4}
    assert rows.grid == [4]
    assert rows.specialization["x_ptr"] == "D"
    assert "n_cols" not in rows.specialization  # 1000 is not a multiple of 16
    partials = log.launches[1]
    assert partials.constants == {"BLOCK_COLS": 256}
    assert partials.grid == [4]  # cdiv(1000, 256)
    KernelLaunch.model_validate_json(rows.model_dump_json())  # launches cross process boundaries as JSON


def test_recording_restores_triton_and_nests(seed):
    from triton.runtime.interpreter import GridExecutor
    from triton.runtime.jit import JITFunction

    before = (GridExecutor.__call__, JITFunction.run)
    with record_launches() as outer:
        with record_launches() as inner:
            _run_seed(seed.ModelNew(), _seed_inputs())
        _run_seed(seed.ModelNew(), _seed_inputs())
    assert (len(outer.launches), len(inner.launches)) == (4, 2)
    assert (GridExecutor.__call__, JITFunction.run) == before
    with record_launches() as after:
        pass
    assert after.launches == []


def test_launches_can_be_recorded_without_running(seed):
    inputs = _seed_inputs()
    model = seed.ModelNew()
    with record_launches() as real:
        expected = _run_seed(model, inputs)
    with record_launches(execute=False) as dry:
        ghost = _run_seed(model, inputs)
    assert [launch.model_dump() for launch in dry.launches] == [launch.model_dump() for launch in real.launches]
    assert not torch.equal(ghost[0], expected[0])  # nothing wrote grad_x this time
    with record_launches() as again:
        assert torch.equal(_run_seed(model, inputs)[0], expected[0])  # execution is back on
    assert len(again.launches) == 2


def test_torch_only_forward_records_nothing():
    with record_launches() as log:
        torch.relu(torch.randn(16))
    assert log.launches == []


def test_autotune_and_heuristics_launches(backend, tmp_path):
    module = backend.load_candidate(_write(tmp_path, "autotuned", AUTOTUNED))
    x = torch.randn(1000)
    with record_launches() as log:
        y = module.forward(x)
        module.forward(x)
    torch.testing.assert_close(y, x * 2 + 1)
    # one launch per kernel[grid](...) call; the autotuner's config trials are kept apart
    assert [launch.kernel for launch in log.launches] == ["_scale", "_add_one"] * 2
    assert len(log.autotune_launches) == 2  # two configs, benchmarked once, on the first call
    tuned = log.launches[0]
    assert tuned.constants["BLOCK"] in (64, 128)
    assert tuned.options["num_warps"] == (2 if tuned.constants["BLOCK"] == 64 else 4)
    assert tuned.signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "alpha": "fp32"}
    assert tuned.grid == [-(-1000 // tuned.constants["BLOCK"])]
    assert log.launches[1].constants == {"BLOCK": 64, "EVEN": False}


@pytest.mark.parametrize(
    "value, expected",
    [
        (7, ("i32", "")), (32, ("i32", "D")), (1, ("i32", "1")), (2**40, ("i64", "D")), (-3, ("i32", "")),
        (2**63 + 1, ("u64", "")), (1.5, ("fp32", "")), (True, ("u1", "")), (None, ("constexpr", "")),
    ],
)
def test_scalar_types(value, expected):
    assert triton_type_of(value) == expected


def test_tensor_types_match_triton():
    from triton.runtime import jit

    for dtype, name in [(torch.float16, "*fp16"), (torch.bfloat16, "*bf16"), (torch.float32, "*fp32"),
                        (torch.int64, "*i64"), (torch.int8, "*i8"), (torch.bool, "*u1"), (torch.uint8, "*u8")]:
        t = torch.empty(8, dtype=dtype)
        assert triton_type_of(t)[0] == name
        if hasattr(jit, "mangle_type"):
            assert jit.mangle_type(t) == name
    assert triton_type_of(torch.empty(9)[1:]) == ("*fp32", "")  # 4-byte offset: not 16-aligned


def test_describe_launch_uses_declared_constexprs():
    def kernel(x_ptr, n, scale, BLOCK: "tl.constexpr", ACT: "tl.constexpr" = None):  # noqa: F821
        pass

    import triton.language as tl

    launch = describe_launch(
        kernel, (torch.empty(4), 16, 0.5), {"BLOCK": 32, "ACT": tl.float16, "num_stages": 2, "grid": (3,)},
        lambda meta: (meta["BLOCK"] // 8,),
    )
    assert launch.signature == {"x_ptr": "*fp32", "n": "i32", "scale": "fp32"}
    assert launch.constants == {"BLOCK": 32, "ACT": "tl.float16"}
    assert launch.options == {"num_stages": 2}
    assert launch.grid == [4]
    assert xc.decode_constant("tl.float16") == tl.float16


# ---------------------------------------------------------------------------- cross-compiling


def test_seed_cross_compiles_for_four_targets(backend, seed, seed_launches):
    reports = backend.cross_compile_many(seed, seed_launches, [resolve_target(n) for n in ("h100", "a100", "b200", "mi300x")])
    assert set(reports) == {"h100", "a100", "b200", "mi300x"}
    for target, rs in reports.items():
        assert [r.kernel for r in rs] == ["_rmsnorm_bwd_rows", "_sum_partials"], target
        for r in rs:
            assert r.ok, (target, r.error)
            assert r.target == target
            assert r.registers is not None and 0 < r.registers <= 255, (target, r)
            assert r.spills == 0, (target, r)
            assert r.shared_bytes is not None and r.shared_bytes >= 0
            assert r.num_stages is not None
        rows, partials = rs
        assert rows.num_warps == 16 and partials.num_warps == 4
        assert rows.registers > partials.registers
        if target != "mi300x":
            assert rows.shared_bytes > 0  # the row reduction goes through shared memory


def test_cross_compile_single_target_through_the_protocol(backend, seed, seed_launches):
    reports = backend.cross_compile(seed, seed_launches, resolve_target("l40s"))
    assert [(r.kernel, r.target, r.ok) for r in reports] == [
        ("_rmsnorm_bwd_rows", "l40s", True), ("_sum_partials", "l40s", True),
    ]


def test_duplicate_launches_compile_once(seed_launches):
    assert len(xc.distinct_jobs(seed_launches * 3)) == 2


def test_cross_compile_autotuned(backend, tmp_path):
    module = backend.load_candidate(_write(tmp_path, "autotuned_xc", AUTOTUNED))
    with record_launches() as log:
        module.forward(torch.randn(256))
    reports = backend.cross_compile(module, log.launches, resolve_target("h100"))
    assert [(r.kernel, r.ok) for r in reports] == [("_scale", True), ("_add_one", True)]
    assert reports[0].num_warps == log.launches[0].options["num_warps"]
    assert all(r.registers and r.registers > 0 for r in reports)


def test_compile_failure_is_a_report_not_an_exception(backend, tmp_path):
    module = backend.load_candidate(_write(tmp_path, "fp8_kernel", FP8))
    x = torch.randn(300)
    with record_launches() as log:
        module.forward(x, torch.empty_like(x))
    reports = backend.cross_compile_many(module, log.launches, [resolve_target("a100"), resolve_target("h100")])
    (a100,), (h100,) = reports["a100"], reports["h100"]
    assert not a100.ok and a100.registers is None
    assert "fp8e4nv" in a100.error and "\n" not in a100.error  # A100 has no e4m3 FP8
    assert h100.ok and h100.registers > 0


def test_unknown_kernel_is_a_failed_report(backend, seed):
    launch = KernelLaunch(kernel="_no_such_kernel", signature={"x": "*fp32"})
    (report,) = backend.cross_compile(seed, [launch], resolve_target("h100"))
    assert not report.ok and "not found" in report.error


def test_specialization_follows_triton(tmp_path, backend):
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    module = backend.load_candidate(_write(tmp_path, "specialize", SPECIALIZE))
    kernel = JITFunction(module._copy.fn, do_not_specialize=["n"])  # a compilable twin of the interpreted kernel
    job = KernelLaunch(
        kernel="_copy",
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "stride": "i32"},
        constants={"BLOCK": 64},
        specialization={"x_ptr": "D", "y_ptr": "", "n": "D", "stride": "1"},
    )
    signature, constexprs, attrs = xc._specialize(module, kernel, job, GPUTarget("cuda", 90, 32))
    assert signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "stride": "constexpr", "BLOCK": "constexpr"}
    assert constexprs == {(3,): 1, (4,): 64}
    assert list(attrs) == [(0,)]  # y_ptr is unaligned, n is do_not_specialize


def test_error_lines():
    from triton.compiler.errors import CompilationError

    class FakeNode:
        lineno, col_offset = 5, 27

    err = CompilationError("def k(x):\n    y = x.to(tl.float8e4nv)\n", FakeNode(), "type fp8e4nv not supported")
    assert xc.error_line(err) == "CompilationError at 5:27: type fp8e4nv not supported"
    ptxas = RuntimeError("`ptxas` failed with error code 255\n`ptxas` stderr:\nptxas k.ptx, line 9; error   : bad")
    assert xc.error_line(ptxas) == "RuntimeError: `ptxas` failed with error code 255: ptxas k.ptx, line 9; error   : bad"


def test_resource_parsers():
    res = " Function _k:\n  REG:58 STACK:0 SHARED:1024 LOCAL:8 CONSTANT[0]:608 TEXTURE:0\n"
    assert xc.parse_res_usage("Resource usage:\n Common:\n  GLOBAL:0\n" + res, "_k") == (58, 2)
    asm = "  .sgpr_count:     32\n  .vgpr_count:     37\n  .private_segment_fixed_size: 16\n"
    assert xc.amdgcn_usage(asm) == (37, 4)


# ---------------------------------------------------------------------------- on a GPU

GPU_CHECK = r'''
import json, sys, torch
from kgen.backends.device import Device
from kgen.backends.registry import get_backend
from kgen.backends.targets import resolve_target
b = get_backend("triton"); b.prepare_process(Device.CUDA)
m = b.load_candidate(sys.argv[1])
x = torch.randn(512, 4096, dtype=torch.bfloat16, device="cuda")
args = (torch.randn_like(x), x, torch.randn(4096, dtype=torch.bfloat16, device="cuda"), torch.rand(512, device="cuda"))
with b.record_launches() as log:
    m.ModelNew()(*args)
torch.cuda.synchronize()
cap = torch.cuda.get_device_capability()
target = resolve_target(f"sm{cap[0]}{cap[1]}")
reports = b.cross_compile(m, log.launches, target)
device = torch.cuda.current_device()
actual = {}
for name in ("_rmsnorm_bwd_rows", "_sum_partials"):
    for k in getattr(m, name).device_caches[device][0].values():
        actual[name] = (k.n_regs, k.n_spills, k.metadata.shared)
print(json.dumps({"launches": len(log.launches), "reports": [r.model_dump() for r in reports], "actual": actual}))
'''


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cross_compiled_figures_match_the_device():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", GPU_CHECK, str(SEED)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["launches"] == 2
    for report in result["reports"]:
        regs, spills, shared = result["actual"][report["kernel"]]
        assert report["ok"]
        assert (report["registers"], report["spills"], report["shared_bytes"]) == (regs, spills, shared)
