"""The parent's side of the baseline job: one job per key per process, its future shared; a
job that fails gives figures with a note on every baseline, never an exception. The real job
module runs here on the CPU, through the sandbox, and says timings need a GPU."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kgen.backends.device import Device
from kgen.evals.baselines.job import NO_GPU
from kgen.evals.baselines.messages import BASELINES, BaselineFigures
from kgen.evals.baselines.service import (
    BaselineJobSpec,
    BaselineService,
    apply_baselines,
    figures_from_outcome,
    start_baselines,
)
from kgen.evals.problem.policies import Policies
from kgen.evals.sandbox.box import SandboxLimits, SandboxOutcome
from kgen.evals.timing.bench_result import BenchResult, Measurement

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RELU = FIXTURES / "problems" / "relu_kernelbench.py"
SIZES = {"batch_size": 16, "dim": 64}


def _spec(**fields) -> BaselineJobSpec:
    return BaselineJobSpec(**{"problem_path": str(RELU), "sizes": SIZES, "device": Device.CUDA, **fields})


def test_one_job_per_key_however_many_candidates_ask_at_once():
    started, release = [], threading.Event()

    def runner(spec):
        started.append(spec)
        release.wait(10)
        return BaselineFigures(measurements={"eager": Measurement(median_ms=1.0)}, origin="measured", finished=True)

    service = BaselineService(runner)
    futures = []
    askers = [threading.Thread(target=lambda: futures.append(service.figures(_spec()))) for _ in range(8)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    other = service.figures(_spec(sizes={"batch_size": 32, "dim": 64}))
    release.set()
    assert len({id(f) for f in futures}) == 1 and futures[0] is not other
    assert futures[0].result(10).measurements["eager"].median_ms == 1.0
    other.result(10)
    assert len(started) == 2 and service.jobs_started() == 2
    service.shutdown()


def test_a_runner_that_raises_gives_notes_not_an_exception():
    def runner(spec):
        raise OSError(28, "No space left on device")

    service = BaselineService(runner)
    figures = service.figures(_spec()).result(10)
    assert figures.origin == "not_measured" and not figures.measurements
    assert set(figures.errors) == set(BASELINES)
    assert "the baseline job could not run (OSError" in figures.errors["liger"]
    service.shutdown()


def _outcome(**fields) -> SandboxOutcome:
    return SandboxOutcome(**{"returncode": 0, "timed_out": False, "seconds": 1.0, "network_isolated": False,
                             "workdir": ".", **fields})


def test_a_job_without_a_finished_report_is_turned_into_notes(tmp_path):
    report = tmp_path / "report.json"
    timed_out = figures_from_outcome(_outcome(returncode=-9, timed_out=True), report, 300)
    assert timed_out.errors["eager"] == "not measured: the baseline job reached its 300 s time limit"
    died = figures_from_outcome(_outcome(returncode=-11, signal_name="SIGSEGV",
                                         stderr_tail="Traceback...\nSegmentation fault\n"), report, 300)
    assert died.errors["torch.compile"] == "not measured: the baseline job died by SIGSEGV (Segmentation fault)"
    report.write_text(BaselineFigures(finished=False).model_dump_json())  # died mid-way
    assert "exit code 1" in figures_from_outcome(_outcome(returncode=1), report, 300).errors["liger"]
    report.write_text("{torn")
    assert "could not be read" in figures_from_outcome(_outcome(), report, 300).errors["eager"]


def test_the_real_job_on_the_cpu_ends_with_timings_need_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    service = BaselineService()
    first = start_baselines(RELU, SIZES, Device.CPU, Policies(), limits=SandboxLimits(timeout_s=120), service=service)
    again = start_baselines(RELU, SIZES, Device.CPU, Policies(), limits=SandboxLimits(timeout_s=120), service=service)
    assert first is again
    figures = first.result(180)
    assert figures.finished and figures.origin == "not_measured"
    assert figures.errors == {name: f"not measured: {NO_GPU}" for name in BASELINES}
    assert service.jobs_started() == 1
    service.shutdown()
    # a CPU evaluation has no bench: nothing to merge into
    assert apply_baselines(None, first) is None
    # a bench gets the notes, and no figure
    merged = apply_baselines(BenchResult(measurements={"candidate": Measurement(median_ms=0.1)}), first)
    assert merged.errors["eager"] == f"not measured: {NO_GPU}" and set(merged.measurements) == {"candidate"}


def test_a_job_still_running_past_the_wait_is_a_note(tmp_path):
    release = threading.Event()
    service = BaselineService(lambda spec: (release.wait(10), BaselineFigures(finished=True))[1])
    bench = BenchResult(measurements={"candidate": Measurement(median_ms=0.1)})
    merged = apply_baselines(bench, service.figures(_spec()), timeout_s=0.05)
    release.set()
    assert merged.errors["eager"] == "not measured: the baseline job had not finished after 0.05 s"
    service.shutdown()


@pytest.mark.parametrize("change", [{"sizes": {"batch_size": 8, "dim": 64}}, {"device": Device.CPU},
                                    {"backend": "cute"}, {"policies": Policies(precision="tf32")},
                                    {"store_dir": "/elsewhere"}])
def test_every_part_of_a_job_key_matters(change):
    assert _spec().key() == _spec().key() != _spec(**change).key()
