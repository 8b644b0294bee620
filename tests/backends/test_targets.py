"""The hardware target registry: figures, forgiving alias resolution, compiler targets."""

import pytest

from kgen.backends.targets import (
    HardwareTarget,
    UnknownTargetError,
    all_targets,
    compiler_target,
    resolve_target,
)

REQUIRED = {"h100", "h200", "b200", "a100", "l40s", "mi300x"}


def test_registry_has_the_required_targets():
    names = {t.name for t in all_targets()}
    assert REQUIRED <= names
    assert len(names) == len(all_targets()), "target names must be unique"


@pytest.mark.parametrize("target", all_targets(), ids=lambda t: t.name)
def test_figures_are_sane(target: HardwareTarget):
    assert target.sm_count > 50
    assert 20 <= target.memory_gb <= 300
    assert 0.5 <= target.memory_bandwidth_tbs <= 10
    assert target.fp32_tflops > 10
    assert target.bf16_tflops is not None and target.bf16_tflops > target.fp32_tflops
    assert target.tf32_tflops is None or target.tf32_tflops < target.bf16_tflops
    assert target.fp8_tflops is None or target.fp8_tflops > target.bf16_tflops
    assert target.shared_memory_per_sm_kb >= 64
    assert target.l2_mb > 0
    assert target.warp_size == (64 if target.vendor == "amd" else 32)
    backend, arch, warp = target.gpu_target()
    assert (backend, warp) == (("hip" if target.vendor == "amd" else "cuda"), target.warp_size)
    assert target.compiler_target == f"{backend}:{arch}"


def test_dense_peaks_not_sparse():
    h100 = resolve_target("h100")
    assert (h100.bf16_tflops, h100.fp8_tflops, h100.tf32_tflops) == (989.4, 1978.9, 494.7)
    assert resolve_target("a100").fp8_tflops is None
    assert resolve_target("a100").bf16_tflops == 312.0
    assert resolve_target("mi300x").bf16_tflops == 1307.4


@pytest.mark.parametrize(
    "alias, name",
    [
        ("h100", "h100"), ("H100 SXM", "h100"), ("hopper", "h100"), ("sm90", "h100"),
        ("sm_90", "h100"), ("SM_90a", "h100"), ("cuda:90", "h100"), ("NVIDIA H100 80GB HBM3", "h100"),
        ("h100-pcie", "h100-pcie"), ("H100_PCIe", "h100-pcie"),
        ("h200", "h200"), ("NVIDIA H200", "h200"),
        ("b200", "b200"), ("blackwell", "b200"), ("sm100", "b200"), ("sm_100a", "b200"), ("cuda:100", "b200"),
        ("a100", "a100"), ("ampere", "a100"), ("A100 SXM 80GB", "a100"), ("NVIDIA A100-SXM4-80GB", "a100"),
        ("sm_80", "a100"),
        ("l40s", "l40s"), ("L40S", "l40s"), ("sm_89", "l40s"), ("ada lovelace", "l40s"),
        ("mi300", "mi300x"), ("MI300X", "mi300x"), ("mi-300x", "mi300x"), ("gfx942", "mi300x"),
        ("hip:gfx942", "mi300x"), ("AMD Instinct MI300X", "mi300x"), ("cdna3", "mi300x"),
    ],
)
def test_alias_resolution(alias, name):
    assert resolve_target(alias).name == name


def test_resolve_passes_targets_through():
    target = resolve_target("h100")
    assert resolve_target(target) is target


def test_compiler_target_tuples():
    assert compiler_target("h100") == ("cuda", 90, 32)
    assert compiler_target("a100") == ("cuda", 80, 32)
    assert compiler_target("b200") == ("cuda", 100, 32)
    assert compiler_target("l40s") == ("cuda", 89, 32)
    assert compiler_target("mi300x") == ("hip", "gfx942", 64)
    assert compiler_target(resolve_target("hopper")) == ("cuda", 90, 32)


def test_unknown_target_names_the_nearest():
    with pytest.raises(UnknownTargetError) as info:
        resolve_target("h10")
    assert isinstance(info.value, LookupError)
    message = str(info.value)
    assert "'h10'" in message and "nearest known targets: h100" in message
    assert "mi300x" in message  # the full list of known targets follows


def test_unknown_target_without_close_match_lists_known():
    with pytest.raises(LookupError, match=r"unknown hardware target 'tpu-v5'.*known: h100"):
        resolve_target("tpu-v5")
    with pytest.raises(UnknownTargetError, match="nearest known targets: mi300x"):
        resolve_target("mi250")
