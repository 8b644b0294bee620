"""`kgen train-check --export PKG`: the kernels a `kgen export` package holds, called as its torch ops
inside the training run; a package that is no package, or whose kernel changed after export, is
a usage error before any training."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.errors import KgenUsageError
from kgen.export.package import write_package
from kgen.export.sources import find_exportables
from kgen.knowledge_base import SEED_KERNELS_DIR
from kgen.train_check.check import run_check
from kgen.train_check.kernels import KERNEL_PROBLEMS, kernel_files, package_folder
from kgen.train_check.model import ModelSize

SEEDS = Path(SEED_KERNELS_DIR) / "triton"
SIZE = ModelSize(hidden=32, layers=2, heads=2, intermediate=64, vocab=256, batch=4, seq=32)


def _export(out: Path, name: str, problems: tuple[str, ...]) -> Path:
    kernels = [k for p in problems for k in find_exportables(str(SEEDS / f"{p}.py"), problem=p)]
    write_package(kernels, out, name)
    return out


@pytest.mark.slow
def test_every_swapped_kernel_can_come_from_an_exported_package_and_agrees(tmp_path: Path) -> None:
    out = _export(tmp_path / "pkg", "train_check_every_op", KERNEL_PROBLEMS)
    result = run_check(export=out, steps=4, size=SIZE)
    assert result.verdict == "agree", result.reason
    origins = [k for swap in result.swaps for k in swap.kernels]
    assert len(origins) == len(KERNEL_PROBLEMS)
    assert all(k.startswith("torch.ops.kgen_train_check_every_op.") for k in origins), origins
    assert {op.problem for op in result.ops} == set(KERNEL_PROBLEMS) and all(op.ok for op in result.ops)


@pytest.mark.slow
def test_a_package_serves_what_it_holds_and_the_kernels_folder_the_rest(tmp_path: Path) -> None:
    out = _export(tmp_path / "pkg", "train_check_swiglu_only", ("swiglu",))
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "embedding_backward.py").write_bytes((SEEDS / "embedding_backward.py").read_bytes())
    result = run_check(export=out / "train_check_swiglu_only", kernels=folder, steps=2, size=SIZE)
    assert result.verdict == "agree", result.reason
    by_swap = {swap.replaced: swap.kernels for swap in result.swaps}
    assert any(k.startswith("torch.ops.kgen_train_check_swiglu_only.swiglu") for ks in by_swap.values() for k in ks)
    assert str(folder / "embedding_backward.py") in by_swap["the input embedding's backward"]


def test_a_kernels_folder_holding_no_kernel_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "rmsnorm.py").write_text("# not named after a problem\n")
    with pytest.raises(KgenUsageError, match="holds none of rmsnorm_forward.py"):
        kernel_files(tmp_path)


def test_a_folder_without_one_package_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(KgenUsageError, match="no manifest.json there"):
        package_folder(tmp_path)
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    with pytest.raises(KgenUsageError, match="2 packages there"):
        package_folder(tmp_path)


def test_a_kernel_changed_after_export_is_refused_before_training(tmp_path: Path) -> None:
    out = _export(tmp_path / "pkg", "train_check_tampered", ("swiglu",))
    kernel = out / "train_check_tampered" / "kernels" / "swiglu.py"
    kernel.write_text(kernel.read_text() + "\n# changed after export\n")
    done = subprocess.run([sys.executable, "-m", "kgen.cli", "train-check", "--export", str(out), "--steps", "2",
                           "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-1500:] + done.stderr[-1500:]
    assert "--export" in done.stderr and "swiglu" in done.stderr and "changed" in done.stderr.lower(), done.stderr
    # one line of error, after the progress lines (elapsed seconds first), no traceback
    *progress, error = done.stderr.strip().splitlines()
    assert error.startswith("error: ") and all(re.match(r"\s*\d+\.\ds ", line) for line in progress), done.stderr
