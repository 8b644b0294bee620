"""Other processes on the GPU: read from NVML's process table, never counting kgen's own."""

from __future__ import annotations

import ctypes
import os

from kgen.evals.gpu_sharing import (
    GpuNeighbours,
    ProcessInfo,
    _family,
    gpu_neighbours,
    processes_from,
)


def _table(entries):
    buffer = (ProcessInfo * 8)()
    for i, (pid, used) in enumerate(entries):
        buffer[i].pid, buffer[i].usedGpuMemory = pid, used
    return buffer


def test_other_processes_are_listed_and_our_own_are_not():
    buffer = _table([(os.getpid(), 10**9), (424242, 43 * 10**9), (424243, 0xFFFFFFFFFFFFFFFF)])
    found = processes_from(buffer, 3, {os.getpid()})
    assert [(p.pid, p.used_bytes) for p in found] == [(424242, 43 * 10**9), (424243, None)]
    line = GpuNeighbours(available=True, others=found).describe()
    assert line.startswith("shared GPU: 2 other process(es)") and "43.0 GB" in line


def test_only_the_filled_entries_count():
    buffer = _table([(111, 1), (222, 2), (333, 3)])
    assert [p.pid for p in processes_from(buffer, 2, set())] == [111, 222]


def test_an_unshared_gpu_says_nothing():
    assert GpuNeighbours(available=True).describe() is None


def test_kgen_s_family_includes_this_process_and_its_parent():
    family = _family()
    assert os.getpid() in family and os.getppid() in family


def test_without_nvml_the_answer_is_unavailable_not_an_error():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        result = gpu_neighbours(0)
        assert result.available is False and "NVML not available" in result.reason
        assert result.describe() is None
    else:  # a machine with a driver: the call works and never lists this process
        result = gpu_neighbours(0)
        assert os.getpid() not in {p.pid for p in result.others}
