"""A request over several backends, offline on a CPU: one ordinary run per backend in the
request's folder, a summary that keeps each backend's result and picks the best per target,
a backend that cannot run noted while the other goes on, and resume skipping what finished."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

import kgen
from kgen.agent.runs.backend_runs import fastest
from kgen.agent.runs.start import resume_run
from kgen.agent.runs.summary import BestKernel, Evidence, RunSummary
from kgen.cli.run_summary import render_summary


@pytest.mark.slow
def test_both_backends_run_each_and_report_the_best_of_each(tmp_path):
    lines: list[str] = []
    summary = kgen.generate("RMSNorm backward for H100, both backends", models=[], budget=1, device="cpu",
                            out=tmp_path / "run", kb=str(tmp_path / "kb"), progress=lines.append)
    assert list(summary.by_backend) == ["triton", "cute"]
    triton, cute = summary.by_backend["triton"], summary.by_backend["cute"]
    assert (triton.backend, cute.backend) == ("triton", "cute")
    assert triton.problem == cute.problem == summary.problem == "rmsnorm_backward"
    # each backend's own run directory, resumable on its own
    for name in ("triton", "cute"):
        spec = json.loads((tmp_path / "run" / name / "spec.json").read_text())
        assert spec["backend"] == name
    # on a CPU Triton's interpreter verifies; CuTe compiles but cannot run
    assert set(triton.best) == {"h100"} and triton.best["h100"].backend == "triton"
    assert cute.best == {} and cute.candidates == 1
    assert any("compiled for the targets, not run" in n for n in cute.notes), cute.notes
    assert not any("interpreter" in n for n in cute.notes)
    assert summary.best["h100"].backend == "triton"
    assert summary.candidates == triton.candidates + cute.candidates
    assert any(line.startswith("[cute] ") and "compiled, not run" in line for line in lines), lines[-8:]
    assert any(line.startswith("[triton] ") for line in lines)
    saved = RunSummary.model_validate_json((tmp_path / "run" / "summary.json").read_text())
    assert saved.by_backend.keys() == summary.by_backend.keys()

    out = io.StringIO()
    render_summary(summary, Console(file=out, width=140))
    text = out.getvalue()
    assert "rmsnorm_backward (triton)" in text and "rmsnorm_backward (cute)" in text
    assert "h100: best kernel" in text and "(triton)" in text

    # `kgen report` on the request's folder: one page per backend's run
    from typer.testing import CliRunner

    from kgen.cli.main import app

    report = CliRunner().invoke(app, ["report", str(tmp_path / "run")])
    assert report.exit_code == 0, report.output
    assert report.output.split() == [str(tmp_path / "run" / name / "report.html") for name in ("triton", "cute")]

    # resume: both finished, nothing runs again
    again: list[str] = []
    resumed = resume_run(str(tmp_path / "run"), runs_dir=tmp_path / "runs", progress=again.append)
    assert resumed.best["h100"].candidate == summary.best["h100"].candidate
    assert sum("finished before: kept" in line for line in again) == 2, again

    # a backend that never started (kgen was killed before it): resume starts it, keeps the other
    import shutil

    shutil.rmtree(tmp_path / "run" / "cute")
    later: list[str] = []
    resumed = resume_run(str(tmp_path / "run"), runs_dir=tmp_path / "runs", progress=later.append)
    assert "[triton] finished before: kept" in later and not any("[cute] finished" in line for line in later)
    assert (tmp_path / "run" / "cute" / "summary.json").is_file() and resumed.by_backend["cute"].candidates == 1


def test_a_backend_that_cannot_run_is_noted_and_the_other_goes_on(tmp_path):
    """Offline, CuTe has no GELU kernel to tune: its run fails with the reason, Triton's runs
    (it ships one), and the request ends with Triton's kernel."""
    lines: list[str] = []
    summary = kgen.generate("GELU for H100, both backends", models=[], budget=1, device="cpu",
                            out=tmp_path / "run", kb=str(tmp_path / "kb"), progress=lines.append)
    assert list(summary.by_backend) == ["triton"]
    assert summary.best["h100"].backend == "triton"
    assert any(n.startswith("cute: no run (") and "no cute kernel for gelu" in n
               for n in summary.notes), summary.notes
    assert any(line.startswith("[cute] failed: ") for line in lines)
    assert not (tmp_path / "run" / "cute").exists()  # a run that produced nothing leaves no folder


def test_every_backend_failing_is_an_error_naming_each(tmp_path):
    from kgen.api import KgenUsageError

    with pytest.raises(KgenUsageError) as caught:
        kgen.generate("fused embedding RMSNorm backward for H100, both backends", models=[], device="cpu", out=tmp_path / "run",
                      kb=str(tmp_path / "kb"))
    text = str(caught.value)
    assert text.startswith("no backend produced a run: ")
    assert "triton: " in text and "cute: " in text


def _kernel(backend: str, ms: float | None, gpu: str) -> BestKernel:
    evidence = Evidence(device="cuda", trials=1, seeds=[1], shapes=[], distributions=["normal"],
                        checks_passed=["correctness"])
    return BestKernel(target="h100", backend=backend, candidate=f"{backend}-c", module="m.py", origin="kb",
                      evidence=evidence, time_ms=ms, device_name=gpu)


def test_the_fastest_is_chosen_by_time_on_the_target_only():
    triton, cute = _kernel("triton", 0.170, "NVIDIA H100 80GB HBM3"), _kernel("cute", 0.147, "NVIDIA H100 80GB HBM3")
    assert fastest([triton, cute], "h100").backend == "cute"
    # a faster time measured on another GPU does not count for this target
    elsewhere = _kernel("cute", 0.100, "NVIDIA H200")
    assert fastest([triton, elsewhere], "h100").backend == "triton"
    # nothing timed (a CPU run): the request's order decides
    assert fastest([_kernel("triton", None, ""), _kernel("cute", None, "")], "h100").backend == "triton"


@pytest.mark.slow
def test_backend_option_picks_one_backend_of_a_request_for_both(tmp_path):
    summary = kgen.generate("RMSNorm backward for H100, both backends", backend="cute", models=[], budget=1,
                            device="cpu", out=tmp_path / "run", kb=str(tmp_path / "kb"))
    assert summary.backend == "cute" and summary.by_backend == {}
    assert json.loads((tmp_path / "run" / "spec.json").read_text())["backend"] == "cute"
    assert not (tmp_path / "run" / "triton").exists()
