"""The CuTe DSL backend in-process on the CPU: architectures, compiling a call for targets
that are not here, the resources read from the cubin, launch records and skipped calls."""

from pathlib import Path

import pytest
import torch

from kgen.backends.cute.arch import UnsupportedTargetError, cute_arch
from kgen.backends.cute.compile import readable_name, shared_limit_bytes
from kgen.backends.cute.features import strategy_features
from kgen.backends.device import Device
from kgen.backends.module_loading import load_module_from_file
from kgen.backends.registry import get_backend
from kgen.backends.targets import resolve_target

# one test process runs the module: one prepared CuTe backend for the module
pytestmark = pytest.mark.xdist_group("cute_backend")

CUTE = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "cute"


@pytest.fixture(scope="module")
def prepared():
    first = get_backend("cute")
    first.prepare_process(Device.CPU)
    first.warm_up(Device.CPU)


@pytest.fixture
def backend(prepared):
    """A fresh instance per test: an instance keeps the reports of the calls it compiled."""
    return get_backend("cute")


def test_architectures_use_the_arch_specific_variant_from_hopper_on():
    assert [cute_arch(resolve_target(t)) for t in ("a100", "l40s", "h100", "b200")] == [
        "sm_80", "sm_89", "sm_90a", "sm_100a"]
    with pytest.raises(UnsupportedTargetError, match="NVIDIA GPUs only"):
        cute_arch(resolve_target("mi300x"))


def test_a_call_is_compiled_for_targets_that_are_not_here_with_its_resources(backend):
    module = load_module_from_file(CUTE / "softcap_direct_jit.py")
    targets = [resolve_target(t) for t in ("h100", "b200", "mi300x")]
    handed = []
    x = torch.randn(4, 33, dtype=torch.bfloat16)
    with backend.compile_during_calls(targets), backend.record_launches(execute=False, on_skip=handed.append) as log:
        out = module.ModelNew(30.0)(x)
    assert out.shape == x.shape
    assert [launch.kernel for launch in log.launches] == ["softcap_kernel"]
    assert log.launches[0].options["block"] == [256, 1, 1]
    assert [t.shape for t in handed[0]] == [torch.Size([132]), torch.Size([132])]  # both tensors the call was handed
    for name in ("h100", "b200"):
        (report,) = backend.cross_compile(module, [], resolve_target(name))
        assert report.ok and report.kernel == "softcap_kernel" and report.registers > 0 and report.shared_bytes == 0
    (amd,) = backend.cross_compile(module, [], resolve_target("mi300x"))
    assert not amd.ok and "NVIDIA GPUs only" in amd.error


def test_a_dynamic_shared_memory_request_over_the_block_limit_fails_that_target_only(backend):
    module = load_module_from_file(CUTE / "bad_softcap_shared_overflow.py")
    targets = [resolve_target("h100"), resolve_target("a100")]
    with backend.compile_during_calls(targets), backend.record_launches(execute=False):
        module.ModelNew(30.0)(torch.randn(2, 16))
    (h100,) = backend.cross_compile(module, [], targets[0])
    (a100,) = backend.cross_compile(module, [], targets[1])
    assert (h100.ok, a100.ok) == (False, False)  # 240 KB: more than either allows
    assert h100.shared_bytes == 240 * 1024 and f"allows {shared_limit_bytes(targets[0])}" in h100.error


def test_a_compile_error_is_reported_as_text_the_fix_prompt_can_use(backend):
    module = load_module_from_file(CUTE / "bad_softcap_compile_error.py")
    target = resolve_target("h100")
    with backend.compile_during_calls([target]), backend.record_launches(execute=False):
        module.ModelNew(30.0)(torch.randn(2, 16))
    (report,) = backend.cross_compile(module, [], target)
    assert not report.ok and "weakly congruent" in report.error and len(report.error) <= 1500


def test_outside_a_recorder_calls_pass_through_untouched(backend):
    """kgen's hooks are inert when nothing records: the DSL behaves as without kgen."""
    import cutlass.cute as cute

    from kgen.backends.cute import warm_up

    compiled = cute.compile(warm_up._launch, *_fill_args())
    assert compiled is not None


def _fill_args():
    import cutlass
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(torch.zeros(32)), cutlass.Float32(1.0)


def test_mangled_kernel_symbols_read_as_the_python_name():
    symbol = "kernel_cutlass_softcap_kernel_tensorptrbf16gmemalign16o1_0"
    assert readable_name(symbol, ["softcap", "softcap_kernel"]) == "softcap_kernel"
    assert readable_name("kernel_cutlass_rms_bwd_tensorptrf32_0", []) == "rms_bwd"


def test_strategy_features_read_cute_idioms():
    source = (CUTE / "softcap_direct_jit.py").read_text()
    features = strategy_features(source)
    assert features["kernels"] == "1" and features["tensor_cores"] == "no" and features["block"] == "medium"
    gemm_like = source + "\nfrom cutlass.cute.nvgpu import warpgroup\nop = warpgroup.MmaF16BF16Op\n"
    assert strategy_features(gemm_like)["tensor_cores"] == "yes"
    assert strategy_features("def broken(:") == {}


def test_tunables_are_module_level_knob_constants_only():
    from kgen.backends.cute.tunables import find_tunables

    source = (
        "THREADS = 256\nROWS_PER_CTA = 4\nCOPY_BITS = 128\nSTAGES = 3\nTILE_N = 128\n"
        "EPS = 1\nHIDDEN = 4096\n\ndef f():\n    THREADS_PER_ROW = 32\n"
    )
    found = {t.name: t for t in find_tunables(source, resolve_target("h100"))}
    assert sorted(found) == ["COPY_BITS", "ROWS_PER_CTA", "STAGES", "THREADS", "TILE_N"]
    assert found["THREADS"].choices == [64, 128, 256, 512, 1024]  # a block has at most 1024 threads
    assert found["COPY_BITS"].choices == [32, 64, 128]  # 128-bit is the widest global access
    assert found["TILE_N"].axis == "n" and found["STAGES"].kind == "num_stages"
    assert find_tunables("THREADS = (", None) == []
