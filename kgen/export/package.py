"""Write the installable package `kgen export` makes of verified kernels.

```
OUT/
  pyproject.toml                 an installable distribution named PKG (needs torch, the backend)
  PKG/__init__.py                a plain function and an nn.Module class per kernel
  PKG/_runtime.py                ``kgen/export/op_runtime.py`` verbatim: ops, checks, autograd
  PKG/manifest.json              ``kgen/export/manifest.py``: verdict, hashes, dtypes, layouts
  PKG/kernels/<problem>.py       the kernel source, verbatim
  PKG/references/<problem>.py    the problem file, verbatim (the fake implementation and tests)
  tests/test_PKG.py              each kernel against its reference on fresh inputs (pytest)
```

The package never imports kgen. A kernel is written only after ``sources.py`` found it
verified; a forward and its catalog-paired backward exported together get autograd.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from kgen.backends.registry import backend_info
from kgen.core.version import __version__
from kgen.evals.problem.catalog import paired_backward, resolve_problem
from kgen.export.manifest import CUSTOM_OP, MANIFEST_FILE, TRITON_OP, KernelEntry, Manifest
from kgen.export.problem_signature import ExportError, read_signature
from kgen.export.sources import Exportable

RUNTIME_SOURCE = Path(__file__).resolve().parent / "op_runtime.py"
#: seconds the trace probe of one package may take (it compiles nothing; tracing is seconds)
PROBE_TIMEOUT_S = 300
#: a package name: a Python identifier, lower case (it is also the torch.library namespace's tail)
NAME_PATTERN = re.compile(r"^[a-z_][a-z0-9_]*$")


def check_package_name(name: str) -> str:
    if not NAME_PATTERN.match(name) or keyword.iskeyword(name):
        raise ExportError(f"--name {name!r} is no package name: lower-case letters, digits and _, not first a digit")
    return name


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry(kernel: Exportable, package_dir: Path) -> KernelEntry:
    """Copy the kernel and its problem into the package; the manifest entry that describes them."""
    info_signature = read_signature(resolve_problem(kernel.problem_path))
    name = kernel.problem
    kernel_file, reference_file = f"kernels/{name}.py", f"references/{name}.py"
    (package_dir / kernel_file).write_bytes(kernel.kernel_path.read_bytes())
    (package_dir / reference_file).write_bytes(kernel.problem_path.read_bytes())
    info = info_signature.info
    traceable = backend_info(kernel.backend).compiler_traceable
    return KernelEntry(
        name=name, problem=info.name, description=info.description or info.name, kind=info.kind,
        backend=kernel.backend, target=kernel.target, verdict=kernel.verdict, evidence=kernel.evidence,
        speed=kernel.speed, code_hash=kernel.code_hash,
        kernel_file=kernel_file, kernel_sha256=_sha256(package_dir / kernel_file),
        reference_file=reference_file, reference_sha256=_sha256(package_dir / reference_file),
        inputs=info_signature.inputs, init=info_signature.init, outputs=len(info_signature.output_dtypes),
        tolerances=info_signature.tolerances(), small_sizes=info_signature.small_sizes,
        registration=TRITON_OP if traceable else CUSTOM_OP,
        registration_note="" if traceable else f"{backend_info(kernel.backend).label} kernels are opaque to torch.compile",
    )


def _probe_registrations(manifest: Manifest, package_dir: Path) -> None:
    """Ask the written package's runtime whether each would-be ``triton_op`` traces (in a child
    process: the kernel's module runs there, not in kgen); one that does not, or a probe that
    cannot answer, is registered as an opaque ``custom_op`` with the reason."""
    candidates = [e for e in manifest.kernels if e.registration == TRITON_OP]
    if not candidates:
        return
    try:
        # the script's path absolute: it runs in the package's folder, where a relative one is not
        done = subprocess.run([sys.executable, str(package_dir.resolve() / "_runtime.py"), "--probe"], cwd=package_dir,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        answers = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
        failure = "" if answers is not None else (done.stderr.strip().splitlines() or ["no output"])[-1]
    except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        answers, failure = None, f"{type(exc).__name__}"
    for entry in candidates:
        reason = answers.get(entry.name, "not probed") if answers is not None else f"the trace probe failed: {failure}"
        if reason:
            entry.registration, entry.registration_note = CUSTOM_OP, reason


def _pair(entries: list[KernelEntry]) -> None:
    """A forward whose catalog-paired backward is in the package gets it as its ``backward``;
    the gradients are then judged with the backward's output tolerances."""
    by_name = {e.name: e for e in entries}
    for entry in entries:
        backward = paired_backward(resolve_problem(entry.problem))
        if backward is None or backward.name not in by_name:
            continue
        grads = [spec for spec in entry.inputs if spec.differentiable]
        made = by_name[backward.name]
        if len(grads) != made.outputs:
            raise ExportError(f"{backward.name} returns {made.outputs} gradients, {entry.name} has {len(grads)} "
                              "floating-point inputs")
        entry.backward = backward.name
        entry.grad_tolerances = made.tolerances


def _init_text(manifest: Manifest) -> str:
    lines = [
        f'"""{manifest.package}: kernels exported by kgen {manifest.kgen_version} as PyTorch custom ops.',
        "",
        f"Each is ``torch.ops.{manifest.namespace}.<name>``, a plain function and an nn.Module here.",
        "manifest.json says what each kernel is, how it was verified and what it accepts.",
        '"""',
        "",
        "from ._runtime import NoGpuError, Package, TamperedKernelError",
        "",
        f"package = Package({manifest.package!r})",
    ]
    names = ["package", "NoGpuError", "TamperedKernelError"]
    for entry in manifest.kernels:
        cls = "".join(part.capitalize() for part in entry.name.split("_"))
        lines += [f"{entry.name} = package.function({entry.name!r})", f"{cls} = package.module_class({entry.name!r})"]
        names += [entry.name, cls]
    lines += ["", f"__all__ = {names!r}", ""]
    return "\n".join(lines)


def _test_text(manifest: Manifest) -> str:
    """The package's own tests: every kernel against its reference (fp64) on fresh inputs at the
    problem's small sizes, and autograd through each paired forward; no kgen needed."""
    pkg = manifest.package
    return f'''"""{pkg}: each exported kernel against its problem's reference, on fresh inputs at small sizes.

Without a GPU, Triton kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1).
"""

import os
import random

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

import {pkg}
from {pkg}._runtime import check_gradients, check_kernel

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KERNELS = sorted({pkg}.package.kernels)
PAIRED = sorted(name for name, kernel in {pkg}.package.kernels.items()
                if kernel.entry.get("backward") in {pkg}.package.kernels)


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_matches_reference(name):
    for seed in random.sample(range(2**31), 2):  # fresh inputs every run
        check_kernel({pkg}.package, name, seed, DEVICE)


@pytest.mark.parametrize("name", PAIRED)
def test_gradients_match_reference(name):
    check_gradients({pkg}.package, name, random.randrange(2**31), DEVICE)
'''


def _pyproject_text(manifest: Manifest) -> str:
    requires = sorted({"torch", *(r for e in manifest.kernels for r in backend_info(e.backend).requires)})
    return f'''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{manifest.package}"
version = "0.1.0"
description = "Kernels exported by kgen {manifest.kgen_version}: {", ".join(e.name for e in manifest.kernels)}"
requires-python = ">=3.10"
dependencies = {json.dumps(requires)}

[tool.setuptools]
packages = ["{manifest.package}"]

[tool.setuptools.package-data]
"{manifest.package}" = ["manifest.json", "kernels/*.py", "references/*.py"]
'''


def write_package(kernels: list[Exportable], out: Path, name: str) -> Manifest:
    """Write the package for ``kernels`` (each verified) into ``out``; its manifest."""
    check_package_name(name)
    refused = [k for k in kernels if not k.exportable]
    if refused:
        raise ExportError(f"{refused[0].source}: {refused[0].reason}")
    problems = [k.problem for k in kernels]
    twice = sorted({p for p in problems if problems.count(p) > 1})
    if twice:
        raise ExportError(f"two kernels for {', '.join(twice)}: export one per problem (pick one with --target)")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--out {out} exists and is not empty")
    package_dir = out / name
    for folder in (package_dir / "kernels", package_dir / "references", out / "tests"):
        folder.mkdir(parents=True, exist_ok=True)
    entries = [_entry(kernel, package_dir) for kernel in kernels]
    _pair(entries)
    manifest = Manifest(package=name, namespace=f"kgen_{name}", kgen_version=__version__,
                        exported_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"), kernels=entries)
    (package_dir / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=1))
    (package_dir / "_runtime.py").write_bytes(RUNTIME_SOURCE.read_bytes())
    _probe_registrations(manifest, package_dir)
    (package_dir / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=1))
    (package_dir / "__init__.py").write_text(_init_text(manifest))
    (out / "tests" / f"test_{name}.py").write_text(_test_text(manifest))
    (out / "pyproject.toml").write_text(_pyproject_text(manifest))
    return manifest
