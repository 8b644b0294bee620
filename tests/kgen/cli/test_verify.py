"""`kgen eval --bundle` then `kgen verify`, as a person runs them: a seed kernel's pass and a
planted kernel's rejection re-verify as the same verdict with the same seeds; an edited
bundle is refused in one line (exit 2); a forged one (digests recomputed) is exposed by the
re-run; a problem that differs from this kgen's catalog is said so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.evals.bundle import part_digests, whole_digest
from kgen.evals.problem.catalog import resolve_problem

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
RELU = str(FIXTURES / "problems" / "relu_kernelbench.py")
GELU_SEED = ROOT / "knowledge_base" / "seed_kernels" / "triton" / "gelu.py"


def kgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, timeout=300)


def _bundle(problem: str, kernel: Path, out: Path, expect: int) -> Path:
    made = kgen("eval", problem, str(kernel), "--device", "cpu", "--seeds", "2", "--bundle", str(out))
    assert made.returncode == expect, made.stdout + made.stderr
    path = out / "bundle.json" if out.suffix != ".json" else out
    assert path.is_file() and f"wrote the evidence bundle {path}" in made.stderr
    return path


def _seeds(path: Path) -> list[int]:
    return json.loads(path.read_text())["settings"]["seeds"]


def test_a_seed_kernels_bundle_re_verifies_and_agrees(tmp_path):
    path = _bundle("gelu", GELU_SEED, tmp_path / "gelu", expect=0)
    out = kgen("verify", str(path.parent))
    assert out.returncode == 0, out.stdout + out.stderr
    seeds = ", ".join(str(s) for s in _seeds(path))
    assert f"re-ran gelu.py on gelu (cpu, seeds {seeds}," in out.stdout and "): passed" in out.stdout
    assert out.stdout.splitlines()[1].startswith("AGREES: same verdict: passed; worst rel-L2 error")
    assert "differs" not in out.stdout  # the catalog's gelu is the bundle's


def test_a_planted_kernels_rejection_re_verifies_as_the_same_rejection(tmp_path):
    path = _bundle(RELU, FIXTURES / "candidates" / "relu_wrong_math.py", tmp_path / "bad.json", expect=1)
    seeds = _seeds(path)
    assert len(seeds) == 2  # every seed drawn, though the rejection stopped at the first
    out = kgen("verify", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"(cpu, seeds {seeds[0]}, " in out.stdout and "): numerical_mismatch" in out.stdout
    assert "AGREES: same verdict: numerical_mismatch" in out.stdout


@pytest.fixture(scope="module")
def relu_bundle(tmp_path_factory) -> Path:
    return _bundle(RELU, FIXTURES / "candidates" / "relu_kernelbench_solution.py",
                   tmp_path_factory.mktemp("relu") / "bundle.json", expect=0)


@pytest.mark.parametrize(("field", "value", "named"), [
    ("verdict", "rejected", "results"), ("seeds", [1], "verifier settings"), ("sha256", "ab" * 32, "sha256"),
])
def test_a_tampered_bundle_is_refused_with_exit_2_in_one_line(relu_bundle, tmp_path, field, value, named):
    data = json.loads(relu_bundle.read_text())
    {"verdict": data["result"], "seeds": data["settings"], "sha256": data}[field][field] = value
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    out = kgen("verify", str(edited))
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert "was changed after it was written" in out.stderr and named in out.stderr


def _forge(path: Path, out: Path, change) -> Path:
    """What someone who recomputes every digest could write: only a re-run exposes it."""
    data = json.loads(path.read_text())
    change(data)
    data["digests"] = part_digests(data)
    data["sha256"] = whole_digest(data)
    out.write_text(json.dumps(data))
    return out


def test_a_forged_problem_is_exposed_by_the_re_run_and_a_gpu_bundle_is_re_checked_on_the_cpu(relu_bundle, tmp_path):
    def leaky(data: dict) -> None:
        data["problem_source"] = data["problem_source"].replace(
            "torch.relu(x)", "torch.nn.functional.leaky_relu(x, 0.1)")
        data["settings"]["device"] = "cuda"
        data["device_name"] = "NVIDIA H100 80GB HBM3"

    out = kgen("verify", str(_forge(relu_bundle, tmp_path / "forged.json", leaky)))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "DISAGREES: recorded passed, re-run numerical_mismatch" in out.stdout
    assert "verified on NVIDIA H100 80GB HBM3; no GPU here: correctness is re-checked on the CPU" in out.stderr
    assert "note: recorded on NVIDIA H100 80GB HBM3, re-run on cpu" in out.stdout


def test_a_problem_file_that_differs_from_the_catalogs_is_verified_as_the_bundle_recorded_it(tmp_path):
    problem = tmp_path / "gelu.py"
    problem.write_text(resolve_problem("gelu").path.read_text() + "\n# a local copy\n")
    path = _bundle(str(problem), GELU_SEED, tmp_path / "out", expect=0)
    out = kgen("verify", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "note: this kgen's catalog problem gelu differs from the bundle's problem file; verified against " \
           "the bundle's" in out.stdout


def test_what_is_not_a_bundle_is_bad_usage(tmp_path):
    (tmp_path / "x.json").write_text("{")
    for target, why in ((tmp_path / "x.json", "is not a bundle"), (tmp_path / "none", "bundle not found")):
        out = kgen("verify", str(target))
        assert out.returncode == 2 and why in out.stderr
