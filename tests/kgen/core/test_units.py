"""Byte sizes and error figures written one way (kgen/core/units.py), and asked by the commands
that print them."""

from __future__ import annotations

import pytest

from kgen.core.units import byte_size, error_figure


@pytest.mark.parametrize(("count", "text"), [(0, "0 B"), (64, "64 B"), (1023, "1023 B"), (1024, "1 KB"),
                                             (1536, "1.5 KB"), (8192, "8 KB"), (232448, "227 KB"),
                                             (3 * 1024**2, "3 MB")])
def test_byte_sizes(count, text):
    assert byte_size(count) == text


@pytest.mark.parametrize(("value", "text"), [(None, "-"), (9.727336300110218e-08, "9.73e-08"),
                                             (0.0020236301654211644, "0.00202"), (1.5, "1.5")])
def test_error_figures(value, text):
    assert error_figure(value) == text


def test_a_runs_compile_lines_and_eval_say_shared_memory_the_same_way():
    from kgen.agent.candidates import kernel_lines
    from kgen.backends.base import KernelReport

    report = KernelReport(kernel="k", target="h100", ok=True, registers=32, spills=0, shared_bytes=8192,
                          num_warps=4, num_stages=3)
    assert kernel_lines([report]) == ["k on h100: 32 registers/thread, 0 spills, 8 KB shared memory, 4 warps, "
                                      "3 stages"]


def test_eval_prints_shared_memory_as_a_run_does():
    """`kgen eval`'s kernel table said "8192 B" where a run's compile lines said "8.0 KB"."""
    from io import StringIO

    from kgen.backends.base import KernelReport
    from kgen.cli.display import print_eval_result
    from kgen.cli.terminal import make_console
    from kgen.evals.result import EvalResult
    from kgen.evals.verdict import Verdict

    result = EvalResult(problem="rmsnorm_backward", problem_path="p.py", candidate="k.py", backend="triton",
                        device="cpu", verdict=Verdict.PASSED,
                        kernels=[KernelReport(kernel="_rmsnorm_bwd_tiles", target="h100", ok=True, registers=74,
                                              spills=0, shared_bytes=8192, num_warps=8, num_stages=3)])
    out = make_console(file=StringIO(), width=80)
    print_eval_result(result, out)
    row = next(line.split() for line in out.file.getvalue().splitlines() if "_rmsnorm_bwd_tiles" in line)
    assert row[4:6] == ["8", "KB"]
