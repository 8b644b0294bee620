"""The parent's view of its GPU through NVML: CUDA's device 0 found from CUDA_VISIBLE_DEVICES,
and nothing guessed where NVML cannot answer."""

from __future__ import annotations

import pytest

from kgen.evals.timing import gpu_sharing
from kgen.evals.timing.gpu_identity import VisibleDevice, first_visible_device, visible_gpu


@pytest.mark.parametrize(("value", "expected"), [
    (None, VisibleDevice(index=0)),
    ("3", VisibleDevice(index=3)),
    (" 2, 0", VisibleDevice(index=2)),
    ("GPU-8f1c2d3e-aaaa-bbbb-cccc-123456789abc,1", VisibleDevice(uuid="GPU-8f1c2d3e-aaaa-bbbb-cccc-123456789abc")),
    ("", None),
    ("-1", None),
    ("MIG-1234", None),
])
def test_cuda_device_zero_in_nvml_terms(value, expected):
    assert first_visible_device(value) == expected


def test_no_gpu_visible_is_unknown(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpu() is None


def test_no_nvml_library_is_unknown(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpu_sharing, "NVML_LIBRARY", "libkgen-no-such-nvml.so.1")
    assert visible_gpu() is None


def test_without_nvml_both_questions_say_so_and_neither_raises(monkeypatch):
    monkeypatch.setattr(gpu_sharing, "NVML_LIBRARY", "libkgen-no-such-nvml.so.1")
    with pytest.raises(gpu_sharing.NvmlUnavailable, match="NVML not available"):
        with gpu_sharing.nvml_device(0):
            pass
    neighbours = gpu_sharing.gpu_neighbours(0)
    assert not neighbours.available and neighbours.reason.startswith("NVML not available")
