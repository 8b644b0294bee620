"""`kgen train-check` as a person runs it: usage errors are one line and exit 2; a short CPU
check prints JSON and exits by its verdict."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kgen.errors import KgenUsageError
from kgen.train_check.model import require_transformers


def kgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("args", "says"), [
    (["--size", "huge"], "--size must be one of tiny, small, 100m, 1b"),
    (["--steps", "1"], "--steps must be at least 2"),
    (["--kernels", "/no/such/folder"], "no such folder"),
    (["--export", "/no/such/package"], "--export /no/such/package: no such folder"),
    (["--plot", "/no/such/folder/curves.svg"], "no folder /no/such/folder to write it in"),
    (["--profile", "/no/such/folder/step.md"], "--profile /no/such/folder/step.md: no folder /no/such/folder"),
    (["--device", "tpu"], "unknown device"),
])
def test_bad_usage_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = kgen("train-check", *args)
    assert done.returncode == 2
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_missing_transformers_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(KgenUsageError, match=r"pip install .kgen\[train\]. \(or pip install transformers\)"):
        require_transformers()


def test_a_short_cpu_check_of_the_seed_kernels_agrees_prints_json_and_draws_the_curves(tmp_path: Path) -> None:
    picture = tmp_path / "curves.svg"
    done = kgen("train-check", "--steps", "2", "--device", "cpu", "--json", "--plot", str(picture))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["verdict"] == "agree" and len(result["kernel"]) == 2 and result["size"] == "tiny"
    assert result["band"]["noise"][-1] > 0
    assert {op["problem"] for op in result["ops"]} >= {"embedding_backward", "swiglu"}
    assert ET.parse(picture).getroot().tag.endswith("svg")
    # --json keeps stdout one document: the picture is named on stderr, beside the progress
    assert f"loss curves: {picture}" in done.stderr
    progress = [line for line in done.stderr.splitlines() if re.match(r" *\d+\.\ds ", line)]
    assert any("stock" in line for line in progress) and any("step 2 of 2" in line for line in progress), done.stderr
    # the interpreter's arithmetic on masked lanes (log(0), 0/0) is no news on a passing run
    assert "RuntimeWarning" not in done.stderr, done.stderr


def test_ctrl_c_says_it_was_interrupted_and_exits_130(tmp_path: Path) -> None:
    picture = tmp_path / "curves.svg"
    proc = subprocess.Popen([sys.executable, "-m", "kgen.cli", "train-check", "--steps", "2", "--device", "cpu",
                             "--plot", str(picture)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # the first progress line: the check is at work
        seen.append(line)
        if "stock" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert err.strip().splitlines()[-1].startswith("interrupted:"), "".join(seen) + err
    assert "Traceback" not in err and out == "" and not picture.exists()


@pytest.mark.slow
def test_the_fused_seams_check_agrees_and_the_profile_of_both_compiled_steps_is_written(tmp_path: Path) -> None:
    profile = tmp_path / "step.md"
    done = kgen("train-check", "--steps", "2", "--device", "cpu", "--fused", "--profile", str(profile))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fused_linear_cross_entropy" in done.stdout and f"profile of the compiled step: {profile}" in done.stdout
    table = profile.read_text()
    assert "| stock compiled |" in table and "| kernels compiled |" in table and "| matmul |" in table
