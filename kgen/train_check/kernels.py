"""Which kernel serves each swapped problem: a file of a `--kernels` folder, an op of a package
`kgen export` wrote (`--export`), or else the library's seed kernel.

A kernel file defines ``ModelNew`` (the catalog problem's interface) and is named after its
problem (``rmsnorm_forward.py``, ...). An exported package is used as its users use it: imported
by name from the folder above it, each kernel called as ``torch.ops.kgen_PKG.<problem>`` through
the package's plain function, with the dtype and rank checks the package makes. Either way every
kernel is one callable taking the problem's forward inputs, and the swaps cannot tell them apart.
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from kgen.errors import KgenUsageError
from kgen.export.manifest import MANIFEST_FILE

#: the kernels a swap needs, by problem name
KERNEL_PROBLEMS = (
    "rmsnorm_forward", "rmsnorm_backward", "swiglu", "cross_entropy_forward", "cross_entropy_backward",
    "embedding_backward",
)
#: the fused seams a check with ``fused`` swaps in as well: each block's residual add + RMSNorm,
#: and the LM head + loss (which then serves the loss instead of the cross-entropy pair)
FUSED_PROBLEMS = ("fused_add_rmsnorm_forward", "fused_add_rmsnorm_backward", "fused_linear_cross_entropy")


class Kernel(BaseModel):
    """One problem's kernel as the swap calls it, with the init arguments its reference is built with."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    problem: str
    origin: str
    init_args: tuple[Any, ...] = ()
    call: Callable[..., Any]


def prepare_process(device: str) -> None:
    """Run kernels in this process as kgen's verifier runs them: on a CPU in Triton's interpreter
    patched to compute as a GPU does (bf16 and TF32 rounding, autotune turns, loop indices:
    `backends/triton/interpreter_compat.py`; a kernel right on a GPU can compute garbage in the
    bare interpreter), on a GPU compiled. Before any kernel file or package is imported."""
    from kgen.backends.device import Device
    from kgen.backends.registry import get_backend

    get_backend("triton").prepare_process(Device.CPU if device == "cpu" else Device.CUDA)


@contextmanager
def interpreter_arithmetic_quiet() -> Iterator[None]:
    """Kernels run here without the RuntimeWarnings of Triton's CPU interpreter: it computes
    every lane with numpy, the masked-off ones too, so a kernel right on a GPU warns of log(0)
    or 0/0 in lanes whose results are never stored (a passing check's output began with them).
    Only that category from only that module, only inside; every other warning is as it was."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
        yield


def seed_kernel_dir() -> Path:
    """The library's Triton seed kernels."""
    from kgen.knowledge_base import SEED_KERNELS_DIR

    return Path(SEED_KERNELS_DIR) / "triton"


def seed_kernel(problem: str) -> Path:
    """The library's seed for ``problem``: the shipped one, else one waiting for its GPU run (a
    fused seam's seed until a GPU verified it; the swap's origin says so)."""
    from kgen.knowledge_base import UNVERIFIED_SEEDS_DIR

    shipped = seed_kernel_dir() / f"{problem}.py"
    waiting = Path(UNVERIFIED_SEEDS_DIR) / "triton" / f"{problem}.py"
    return shipped if shipped.is_file() or not waiting.is_file() else waiting


def swapped_problems(fused: bool) -> tuple[str, ...]:
    return KERNEL_PROBLEMS + FUSED_PROBLEMS if fused else KERNEL_PROBLEMS


def kernel_files(override: Path | None, fused: bool = False) -> dict[str, Path]:
    """Problem -> kernel file: ``override``'s file where it has one, else the seed's."""
    problems = swapped_problems(fused)
    if override is not None and not override.is_dir():
        raise KgenUsageError(f"--kernels {override}: no such folder")
    if override is not None and not any((override / f"{problem}.py").is_file() for problem in problems):
        raise KgenUsageError(f"--kernels {override}: holds none of {', '.join(p + '.py' for p in problems)} "
                             "(a kernel file is named after its problem)")
    files = {}
    for problem in problems:
        given = override / f"{problem}.py" if override is not None else None
        files[problem] = given if given is not None and given.is_file() else seed_kernel(problem)
    return files


def load_kernel(path: Path, *init_args: Any) -> Any:
    """``ModelNew(*init_args)`` from the file at ``path``, imported as kgen imports candidates
    (`backends.module_loading`); a file that does not import is a usage error naming why."""
    from kgen.backends.module_loading import CandidateLoadError, load_module_from_file

    try:
        module = load_module_from_file(path, prefix="kgen_train_check_kernel")
    except CandidateLoadError as exc:
        raise KgenUsageError(str(exc)) from exc
    if not hasattr(module, "ModelNew"):
        raise KgenUsageError(f"{path}: defines no ModelNew")
    return module.ModelNew(*init_args)


def package_folder(given: Path) -> Path:
    """The package's own folder (the one holding ``manifest.json``): ``given`` itself, or the one
    package folder inside the folder `kgen export --out` wrote."""
    if not given.is_dir():
        raise KgenUsageError(f"--export {given}: no such folder (a package `kgen export --out` wrote)")
    if (given / MANIFEST_FILE).is_file():
        return given
    inside = sorted(p.parent for p in given.glob(f"*/{MANIFEST_FILE}"))
    if len(inside) != 1:
        found = f"{len(inside)} packages" if inside else f"no {MANIFEST_FILE}"
        raise KgenUsageError(f"--export {given}: {found} there; give the folder `kgen export --out` wrote, or its "
                             "package folder")
    return inside[0]


def import_package(folder: Path) -> Any:
    """The exported package, imported by name from the folder above it (as an installed one would be)."""
    name = folder.name
    if name in sys.modules:
        loaded = sys.modules[name]
        if Path(getattr(loaded, "__file__", "") or "").resolve().parent != folder.resolve():
            raise KgenUsageError(f"--export {folder}: another package named {name} is already imported here")
        return loaded
    sys.path.insert(0, str(folder.parent))
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # TamperedKernelError is one: a kernel changed after export
        raise KgenUsageError(f"--export {folder}: cannot be imported: {exc}") from exc
    finally:
        sys.path.remove(str(folder.parent))


def _exported(module: Any, problem: str, init_args: tuple[Any, ...]) -> Callable[..., Any]:
    """The package's plain function for ``problem``, its init arguments bound in the manifest's order."""
    names = [spec["name"] for spec in module.package.kernels[problem].init]
    function = module.package.function(problem)
    bound = dict(zip(names, init_args, strict=True))
    return lambda *inputs: function(*inputs, **bound)


def choose_kernels(vocab: int, eps: float, kernels: Path | None = None, export: Path | None = None,
                   fused: bool = False) -> dict[str, Kernel]:
    """Each swapped problem's kernel (with ``fused``, the fused seams' too): the exported package's
    op where it has one, else the ``kernels`` folder's file, else the seed's. ``vocab`` and ``eps``
    are the model's (the embedding backward's and RMSNorm's init arguments)."""
    init = {"rmsnorm_forward": (eps,), "embedding_backward": (vocab,), "fused_add_rmsnorm_forward": (eps,)}
    files = kernel_files(kernels, fused)
    module, folder, declared = None, None, set()
    if export is not None:
        folder = package_folder(export)
        module = import_package(folder)
        declared = {entry["name"] for entry in json.loads((folder / MANIFEST_FILE).read_text())["kernels"]}
    chosen = {}
    for problem in swapped_problems(fused):
        args = init.get(problem, ())
        if module is not None and problem in declared:
            chosen[problem] = Kernel(problem=problem, origin=f"torch.ops.kgen_{folder.name}.{problem} ({folder})",
                                     init_args=args, call=_exported(module, problem, args))
        else:
            waiting = "" if files[problem].parent.parent.name != "seed_kernels_unverified" else (
                " (a seed waiting for its GPU verification)")
            chosen[problem] = Kernel(problem=problem, origin=f"{files[problem]}{waiting}", init_args=args,
                                     call=load_kernel(files[problem], *args))
    return chosen
