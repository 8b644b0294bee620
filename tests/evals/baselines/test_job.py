"""The trusted baseline job: without a GPU it reports that timings need one and measures
nothing; a job that fails still writes a report naming why, on every baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kgen.backends.device import Device
from kgen.evals.baselines.job import NO_GPU, main, more_sets_fit, run
from kgen.evals.baselines.messages import BASELINES, BaselineFigures, BaselineRequest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"


def test_on_the_cpu_nothing_is_measured_and_the_report_says_timings_need_a_gpu():
    figures = run(BaselineRequest(problem_path=str(RELU), sizes={"batch_size": 16, "dim": 64}, device=Device.CPU))
    assert figures.finished and figures.origin == "not_measured" and not figures.measurements
    assert figures.errors == {name: f"not measured: {NO_GPU}" for name in BASELINES}
    assert figures.sizes == {"batch_size": 16, "dim": 64}


def test_the_module_writes_its_report_as_a_child(tmp_path):
    request = tmp_path / "request.json"
    request.write_text(BaselineRequest(problem_path=str(RELU), sizes={}, device=Device.CPU).model_dump_json())
    done = subprocess.run([sys.executable, "-m", "kgen.evals.baselines.job", str(request),
                           str(tmp_path / "report.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    figures = BaselineFigures.model_validate_json((tmp_path / "report.json").read_text())
    assert figures.finished and figures.errors["torch.compile"] == f"not measured: {NO_GPU}"
    assert "Traceback" not in done.stderr


def test_a_job_that_fails_reports_why_on_every_baseline(tmp_path, monkeypatch):
    import kgen.evals.baselines.job as job

    def broken(request):
        raise FileNotFoundError("problem file gone")

    monkeypatch.setattr(job, "run", broken)
    request = tmp_path / "request.json"
    request.write_text(BaselineRequest(problem_path=str(RELU), sizes={}, device=Device.CUDA).model_dump_json())
    assert main([str(request), str(tmp_path / "report.json")]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["finished"] and set(report["errors"]) == set(BASELINES)
    assert "the baseline job failed (FileNotFoundError: problem file gone)" in report["errors"]["eager"]


def test_more_input_sets_are_drawn_only_where_the_device_holds_them():
    assert more_sets_fit(free_bytes=10 * 2**30, set_bytes=2**30)
    assert not more_sets_fit(free_bytes=3 * 2**30, set_bytes=2**30)


def test_importing_the_job_or_the_service_imports_no_toolchain():
    """The job's backend prepares the process before triton is imported (Liger's kernels are
    Triton's); the parent's service stays light."""
    code = ("import sys, kgen.evals.baselines.job, kgen.evals.baselines.service\n"
            "print(','.join(m for m in ('torch', 'triton') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr
