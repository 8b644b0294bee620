"""Other processes on the GPU: read from NVML's process table, never counting kgen's own."""

from __future__ import annotations

import ctypes
import os

from kgen.evals.timing.gpu_sharing import (
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


def _family_seen_by_a_verifier(kgen_pid: int | None) -> set[int]:
    """``_family()`` as computed in a child of this process (playing kgen)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KGEN_PARENT_PID"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    if kgen_pid is not None:
        env["KGEN_PARENT_PID"] = str(kgen_pid)
    code = "from kgen.evals.timing.gpu_sharing import _family; print(*sorted(_family()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    return {int(p) for p in done.stdout.split()}


def test_a_spare_beside_the_verifier_is_kgen_s_own_but_an_orphan_is_not():
    import subprocess
    import sys

    spare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # a process that is no descendant of kgen: its parent exits at once, so it is reparented
    orphan = int(subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                text=True, check=True).stdout)
    try:
        family = _family_seen_by_a_verifier(os.getpid())
        assert {os.getpid(), spare.pid} <= family
        assert orphan not in family and 1 not in family
        # with no kgen named, a sibling is not known to be kgen's: only the verifier's own line
        assert spare.pid not in _family_seen_by_a_verifier(None)
    finally:
        spare.kill()
        spare.wait()
        os.kill(orphan, 9)
