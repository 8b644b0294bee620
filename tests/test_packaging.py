"""The built wheel carries every package under the kgen namespace, and no generic top-level names."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# one test process runs the module: one wheel built for the module
pytestmark = pytest.mark.xdist_group("packaging")

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"kgen": "kgen", "agent": "kgen/agent", "backends": "kgen/backends",
           "knowledge_base": "kgen/knowledge_base", "prompts": "kgen/prompts", "evals": "kgen/evals"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel, built from a private copy of the checkout: setuptools builds in the source's
    own build/ folder, and two test processes building there at once break each other's build
    (the xdist group above does not keep them apart under every pytest and xdist version)."""
    source = tmp_path_factory.mktemp("source") / "kgen"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".whl", "tests", "docs"))
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    (path,) = out.glob("kgen-*.whl")
    return zipfile.ZipFile(path)


@pytest.fixture(scope="module")
def wheel_names(wheel) -> set[str]:
    return set(wheel.namelist())


def test_every_package_folder_is_in_the_wheel_under_kgen(wheel_names):
    for folder, installed in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.relative_to(ROOT / folder).as_posix()
            assert f"{installed}/{relative}" in wheel_names, f"{folder}/{relative} missing from the wheel"
    assert not any(name.split("/")[0] in {"agent", "backends", "evals", "prompts", "tests"} for name in wheel_names)


def test_wheel_carries_problems_seed_kernels_guidance_prompts_and_config(wheel_names):
    problems = list((ROOT / "evals" / "problem" / "problems").glob("*.py"))
    assert len(problems) > 10
    for path in problems:
        assert f"kgen/evals/problem/problems/{path.name}" in wheel_names
    shipped = [
        *(ROOT / "knowledge_base" / "seed_kernels").rglob("*.py"),
        *(ROOT / "knowledge_base" / "seed_kernels").rglob("*.json"),
        *(ROOT / "knowledge_base" / "guidance").glob("*.md"),
    ]
    assert len(shipped) > 10
    for path in shipped:
        assert f"kgen/knowledge_base/{path.relative_to(ROOT / 'knowledge_base').as_posix()}" in wheel_names
    for path in (ROOT / "prompts").glob("*.j2"):
        assert f"kgen/prompts/{path.name}" in wheel_names
    assert "kgen/core/default_config.toml" in wheel_names


def test_console_script_is_declared(wheel, wheel_names):
    entry_points = next(n for n in wheel_names if n.endswith(".dist-info/entry_points.txt"))
    assert "kgen = kgen.cli.main:main" in wheel.read(entry_points).decode()


def test_ci_runs_exactly_the_readme_test_command():
    """CI must run the README's own second quick-start command, so it cannot hide a failure
    of the command a new user types (bare `pytest` differs from `python -m pytest`)."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    commands = [line.strip() for line in readme.splitlines() if line.strip().startswith("pip install")]
    assert len(commands) == 2, commands
    ci_lines = [line.strip() for line in (root / ".ci" / "run").read_text().splitlines()]
    assert commands[1] in ci_lines
