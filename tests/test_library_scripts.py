"""scripts/library_shapes.py and scripts/library_sweep.py: the fast library's other shapes as a
bench suite, and the GPU sweep of its seeds, exercised on the CPU (the sweep's ``--dry``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem, read_problem

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

import library_shapes  # noqa: E402


def _run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_")}
    env["KGEN_HOME"], env["TRITON_INTERPRET"] = str(cwd / "home"), "1"
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def test_every_shape_is_its_problem_at_other_sizes_with_the_same_operation(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for problem in library_shapes.SHAPES:
        (seeds / f"{problem}.py").write_text(f"# a candidate for {problem}\n")
    written = library_shapes.write_suite(tmp_path / "suite", [seeds])
    assert len(written) == sum(len(shapes) for shapes in library_shapes.SHAPES.values())
    for problem, shapes in library_shapes.SHAPES.items():
        default = load_problem(resolve_problem(problem).path)
        for tag, sizes in shapes.items():
            name = library_shapes.variant_name(problem, tag)
            info = read_problem(tmp_path / "suite" / "problems" / f"{name}.py")
            assert info.name == name and info.operation == problem and info.baseline_compute
            loaded = load_problem(info.path)
            assert {k: loaded.sizes[k] for k in sizes} == sizes
            # at least a fifth of the default's bytes: a shape tests the kernel's width, not a tiny launch
            assert loaded.bytes_moved() / default.bytes_moved() > 0.2, name
            assert (tmp_path / "suite" / "candidates" / f"{name}.py").read_text() == f"# a candidate for {problem}\n"


def test_a_shape_that_names_a_constant_the_problem_lacks_is_refused():
    source = resolve_problem("rmsnorm_forward").path.read_text()
    with pytest.raises(ValueError, match="no top-level line 'VOCAB = <int>'"):
        library_shapes.variant_source(source, "rmsnorm_forward", "x", {"VOCAB": 7})


def test_a_problem_without_a_seed_is_skipped_and_said(tmp_path):
    (tmp_path / "seeds").mkdir()
    assert library_shapes.write_suite(tmp_path / "suite", [tmp_path / "seeds"], ["rmsnorm_forward"]) == []


def test_the_sweep_dry_run_builds_kgens_sweep_points_and_keeps_the_hand_picked_source(tmp_path):
    seeds = ROOT / "knowledge_base" / "seed_kernels" / "triton"
    done = _run("library_sweep.py", "--out", str(tmp_path / "out"), "--seeds", str(seeds),
                "--problems", "rmsnorm_backward", "--points", "3", "--dry", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "sweep.json").read_text())[0]
    assert record["problem"] == "rmsnorm_backward" and len(record["points"]) == 3
    assert len({json.dumps(p["config"], sort_keys=True) for p in record["points"]}) == 3
    assert all(p["errors"]["small"] is None for p in record["points"]), record["points"]
    assert (tmp_path / "out" / "swept" / "rmsnorm_backward.py").read_text() == (seeds / "rmsnorm_backward.py").read_text()
    assert "| rmsnorm_backward | small |" in (tmp_path / "out" / "sweep.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_without_a_gpu_a_timed_sweep_is_a_usage_error_that_points_to_the_dry_run(tmp_path):
    done = _run("library_sweep.py", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2 and "--dry" in done.stderr
