"""`kgen export` from the command line (kgen/cli/export.py over kgen/export/sources.py): a run's
winner exported and listed; refusals (a rejected or unverified candidate, an unknown problem, a
run without a winner, a file without ModelNew) as one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.agent.runs.summary import BestKernel, Evidence, RunSummary
from kgen.agent.spec.kernel_spec import KernelSpec
from kgen.evals.result import EvalResult
from kgen.knowledge_base import SEED_KERNELS_DIR

SEEDS = Path(SEED_KERNELS_DIR) / "triton"
REDTEAM = Path(__file__).resolve().parents[2] / "fixtures" / "candidates"


def kgen(*args: str, home: Path, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = os.environ | {"KGEN_HOME": str(home), "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def _one_line_refusal(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def _run_folder(root: Path, problem: str, winners: dict[str, tuple[str, str, str]]) -> Path:
    """A finished run's folder as kgen writes it: run.json, spec.json, summary.json naming each
    target's winner, each candidate's source and eval.json (target -> (id, kernel file, verdict))."""
    run = root / "20261122-081500-abc123"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "spec.json").write_text(KernelSpec(request=problem, problem=problem, operation=problem, backend="triton",
                                              targets=list(winners) or ["h100"], source="matcher").model_dump_json())
    best = {}
    for target, (cid, kernel, verdict) in winners.items():
        folder = run / "candidates" / cid
        folder.mkdir(parents=True)
        (folder / f"{cid}.py").write_bytes(Path(kernel).read_bytes())
        (folder / "eval.json").write_text(EvalResult(
            problem=problem, problem_path="", candidate=cid, backend="triton", device="cpu", verdict=verdict,
            reason="" if verdict == "passed" else "partial output: 40% of y never written").model_dump_json())
        best[target] = BestKernel(target=target, backend="triton", candidate=cid, module=str(run / f"best_{target}.py"),
                                  origin="knowledge_base", evidence=Evidence(device="cpu", trials=3, seeds=[1],
                                                                             shapes=[], distributions=[],
                                                                             checks_passed=[]))
    summary = RunSummary(run_id=run.name, run_dir=str(run), request=problem, problem=problem, backend="triton",
                         targets=list(winners), mode="offline", device="cpu", best=best,
                         notes=[] if best else ["no verified kernel for h100 (3 candidates tried)"])
    (run / "summary.json").write_text(summary.model_dump_json())
    return run


def test_a_runs_winner_is_listed_and_exported(tmp_path):
    run = _run_folder(tmp_path / "runs", "softmax", {"h100": ("g1-c02", str(SEEDS / "softmax.py"), "passed")})
    listed = kgen("export", str(run), "--list", home=tmp_path / "home")
    assert listed.returncode == 0, listed.stderr
    assert "softmax" in listed.stdout and "h100" in listed.stdout and "passed" in listed.stdout
    assert "not timed" in listed.stdout and "yes" in listed.stdout

    out = tmp_path / "pkg"
    done = kgen("export", str(run), "--target", "h100", "--out", str(out), "--name", "run_ops", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert "torch.ops.kgen_run_ops" in done.stdout
    manifest = json.loads((out / "run_ops" / "manifest.json").read_text())
    assert manifest["kernels"][0]["evidence"] == "g1-c02/eval.json" and manifest["kernels"][0]["target"] == "h100"
    assert (out / "run_ops" / "kernels" / "softmax.py").read_bytes() == (SEEDS / "softmax.py").read_bytes()


@pytest.mark.parametrize("verdict", ["rejected", "inconclusive"])
def test_a_winner_that_did_not_pass_is_refused_and_listed_with_its_reason(tmp_path, verdict):
    run = _run_folder(tmp_path / "runs", "softmax", {"h100": ("g1-c05", str(SEEDS / "softmax.py"), verdict)})
    done = kgen("export", str(run), "--out", str(tmp_path / "pkg"), home=tmp_path / "home")
    _one_line_refusal(done, "not verified", verdict, "g1-c05")
    assert not (tmp_path / "pkg").exists()
    listed = kgen("export", str(run), "--list", home=tmp_path / "home")
    words = " ".join(listed.stdout.split())
    assert listed.returncode == 0 and "no:" in words and "not verified" in words and "g1-c05" in words


def test_a_candidate_file_beside_its_rejected_eval_is_refused(tmp_path):
    run = _run_folder(tmp_path / "runs", "softmax", {"h100": ("g2-c01", str(SEEDS / "softmax.py"), "rejected")})
    kernel = run / "candidates" / "g2-c01" / "g2-c01.py"
    done = kgen("export", str(kernel), "--problem", "softmax", "--out", str(tmp_path / "pkg"), home=tmp_path / "home")
    _one_line_refusal(done, "not verified", "g2-c01/eval.json says rejected", "partial output")


def test_an_unverified_kernel_file_is_verified_now_and_refused_when_rejected(tmp_path):
    """No record vouches for it, so kgen verifies it as `kgen eval` does: this planted kernel
    hard-codes a grid for the verifier's sizes and is rejected."""
    planted = REDTEAM / "rt4_thresh_softmax_grid_cap.py"
    done = kgen("export", str(planted), "--problem", "softmax", "--out", str(tmp_path / "pkg"),
                home=tmp_path / "home", timeout=600)
    _one_line_refusal(done, "not verified", "kgen's verification says rejected")


def test_a_run_without_a_winner_is_refused(tmp_path):
    run = _run_folder(tmp_path / "runs", "softmax", {})
    _one_line_refusal(kgen("export", str(run), "--out", str(tmp_path / "pkg"), home=tmp_path / "home"),
                      "no verified winner", "no verified kernel for h100")
    unfinished = tmp_path / "runs2" / "20261122-090000-def456"
    unfinished.mkdir(parents=True)
    (unfinished / "run.json").write_text("{}")
    _one_line_refusal(kgen("export", str(unfinished), "--list", home=tmp_path / "home"), "has not finished")
    _one_line_refusal(kgen("export", "20990101-nosuch", "--list", home=tmp_path / "home"), "no run")


def test_an_unknown_problem_and_a_wrong_target_are_refused(tmp_path):
    _one_line_refusal(kgen("export", str(SEEDS / "softmax.py"), "--problem", "softmaxx", "--out",
                           str(tmp_path / "pkg"), home=tmp_path / "home"), "unknown problem 'softmaxx'", "softmax")
    run = _run_folder(tmp_path / "runs", "softmax", {"h100": ("g1-c02", str(SEEDS / "softmax.py"), "passed")})
    _one_line_refusal(kgen("export", str(run), "--target", "mi300x", "--list", home=tmp_path / "home"),
                      "no winner for target mi300x", "h100")
    _one_line_refusal(kgen("export", str(SEEDS / "softmax.py"), "--list", home=tmp_path / "home"), "--problem")


@pytest.mark.parametrize("text", [
    "import torch\n\nclass Model(torch.nn.Module):\n    pass\n",
    "def ModelNew():\n    return None\n",
    "class ModelNew(:\n",
])
def test_a_kernel_file_without_model_new_is_refused(tmp_path, text):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(text)
    _one_line_refusal(kgen("export", str(kernel), "--problem", "softmax", "--out", str(tmp_path / "pkg"),
                           home=tmp_path / "home"), "defines no class ModelNew")


def test_help_teaches_sources_pairs_and_refusals(tmp_path):
    done = kgen("export", "--help", home=tmp_path / "home")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    for phrase in ("--list", "--problem", "--target", "torch.compile(fullgraph=True)", "autograd", "passed"):
        assert phrase in text, phrase


@pytest.mark.parametrize(("size", "says"), [
    ("7b", "--in-model must be one of tiny, small, 100m, 1b, not '7b'"),
    ("100m", "--in-model needs a GPU"),  # CI has none: which ops win in a compiled model is a GPU timing
])
def test_in_model_needs_a_known_size_and_a_gpu_and_writes_nothing_otherwise(tmp_path, size, says):
    out = tmp_path / "pkg"
    done = kgen("export", str(SEEDS / "softmax.py"), "--problem", "softmax", "--out", str(out), "--in-model", size,
                home=tmp_path / "home")
    _one_line_refusal(done, says)
    assert not out.exists()


def test_an_export_says_which_ops_the_compiler_sees(tmp_path):
    out = tmp_path / "pkg"
    done = kgen("export", str(SEEDS / "softmax.py"), "--problem", "softmax", "--out", str(out), "--name", "seen_ops",
                home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "seen_ops" / "manifest.json").read_text())
    assert [(e["name"], e["registration"], e["registration_note"]) for e in manifest["kernels"]] == [
        ("softmax", "triton_op", "")]
    assert "opaque to torch.compile" not in done.stdout


def test_an_export_into_a_relative_folder_still_probes_the_trace(tmp_path):
    done = kgen("export", str(SEEDS / "softmax.py"), "--problem", "softmax", "--out", "pkg", "--name", "near_ops",
                home=tmp_path / "home", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "pkg" / "near_ops" / "manifest.json").read_text())
    assert manifest["kernels"][0]["registration"] == "triton_op", manifest["kernels"][0]["registration_note"]
    assert "opaque to torch.compile" not in done.stdout


CALL = "import torch, cpu_ops; print(cpu_ops.softmax(torch.randn(4, 8)).sum(dim=1))"


def test_a_package_called_without_a_gpu_says_plainly_what_it_needs_and_what_works(tmp_path):
    """On a machine without a GPU an exported Triton kernel is one clear error naming the
    package and the op, that it needs a CUDA GPU, and what runs without one; never Triton's
    "0 active drivers". With TRITON_INTERPRET=1 (what the error suggests) the same call runs."""
    out = tmp_path / "pkg"
    assert kgen("export", str(SEEDS / "softmax.py"), "--problem", "softmax", "--out", str(out), "--name", "cpu_ops",
                home=tmp_path / "home").returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(out),
                                                                             "CUDA_VISIBLE_DEVICES": ""}
    bare = subprocess.run([sys.executable, "-c", CALL], capture_output=True, text=True, env=env, timeout=300)
    assert bare.returncode == 1 and "active drivers" not in bare.stderr, bare.stderr
    assert bare.stderr.strip().splitlines()[-1] == (
        "cpu_ops._runtime.NoGpuError: cpu_ops.softmax needs a CUDA GPU and this machine has none (torch sees no "
        "CUDA device). Without one: set TRITON_INTERPRET=1 before importing cpu_ops to run its Triton kernels in "
        "Triton's CPU interpreter (slow: for checking, not speed), or run its tests (python -m pytest tests), "
        "which do that")
    interpreted = subprocess.run([sys.executable, "-c", CALL], capture_output=True, text=True, timeout=300,
                                 env=env | {"TRITON_INTERPRET": "1"})
    assert interpreted.returncode == 0, interpreted.stderr
    assert "tensor([1.0000, 1.0000, 1.0000, 1.0000])" in interpreted.stdout


def test_the_list_fits_80_columns_with_every_word_whole(tmp_path):
    """`kgen export RUN --list` at COLUMNS=80 was 90 wide (the run id repeated in every row, the
    reason squeezed to a word a line); each row now names its candidate, and only the speed and
    the reason wrap, at spaces."""
    run = _run_folder(tmp_path / "runs", "softmax", {"h100": ("g1-c02", str(SEEDS / "softmax.py"), "passed"),
                                                      "mi300x": ("g1-c03", str(SEEDS / "softmax.py"), "rejected")})
    listed = subprocess.run([sys.executable, "-m", "kgen.cli", "export", str(run), "--list"], capture_output=True,
                            text=True, timeout=300, env=os.environ | {"KGEN_HOME": str(tmp_path / "home"),
                                                                      "COLUMNS": "80", "TRITON_INTERPRET": "1"})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, listed.stdout
    rows = [line.split() for line in lines if line.split()[:1] in (["g1-c02"], ["g1-c03"])]
    assert [row[:5] for row in rows] == [["g1-c02", "softmax", "h100", "triton", "passed"],
                                         ["g1-c03", "softmax", "mi300x", "triton", "rejected"]]
    words = listed.stdout.split()
    for word in "no: not verified: candidate g1-c03's evaluation says rejected (partial output:".split():
        assert word in words, word
    assert len(lines) <= 12, listed.stdout
