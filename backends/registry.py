"""The one list of kernel backends kgen knows, and what each is called and needs.

Everything outside ``backends/`` asks this module: the request parser which words name a
backend, the prompts how to label it, the knowledge base which backends to index, the
static rules which decorators mark kernel code, ``kgen doctor`` what to install. A new
backend is its folder under ``backends/`` (implementing ``base.Backend``) plus one
``BackendInfo`` below.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from importlib import metadata

from pydantic import BaseModel, ConfigDict

from kgen.backends.base import Backend
from kgen.backends.targets import HardwareTarget, all_targets
from kgen.errors import KgenUsageError


class UnknownBackendError(KgenUsageError, LookupError):
    """A backend name kgen does not know."""


class BackendUnavailableError(KgenUsageError, RuntimeError):
    """A known backend that cannot be used here: its toolchain is not installed, or it does
    not compile for a target asked for."""


class BackendInfo(BaseModel):
    """What kgen must know of a backend without importing its toolchain."""

    model_config = ConfigDict(frozen=True)

    #: the name used everywhere (options, knowledge base, seed folders): "triton"
    name: str
    #: how people write it: "Triton", "CuTe DSL"
    label: str
    #: words of a request that name it (lower case, spaces allowed): "cute dsl", "cutlass"
    words: tuple[str, ...]
    #: ``module:Class`` of its ``Backend`` implementation, imported on first use
    factory: str
    #: top-level modules its candidates need importable (``kgen doctor``, availability)
    requires: tuple[str, ...]
    #: the pip command that installs what ``requires`` names
    install: str
    #: dotted names of the decorators that mark kernel (device or traced host) code
    kernel_decorators: tuple[str, ...]
    #: the modules a candidate imports for its kernels (the prompts list them)
    candidate_imports: tuple[str, ...]
    #: whether kernels run on a CPU (an interpreter); if not, a CPU evaluation compiles
    #: them for the targets and ends "compiled, not run", never "passed"
    runs_on_cpu: bool
    #: modules whose export of a torch tensor (``__dlpack__``) hands it to the backend's
    #: kernels rather than out of torch to compute on (the torch-ops watch allows those)
    tensor_handoff_modules: tuple[str, ...] = ()
    #: dotted names of the calls that compile a kernel ahead of its launch (``cute.compile``):
    #: keeping their results from one call to the next is a compile cache, not an output
    #: cache, and the state rules allow it
    compile_functions: tuple[str, ...] = ()
    #: the environment variable that points its compiler's on-disk cache at a folder
    #: (kgen keeps one per backend across evaluations; the sandbox lets the compiler write there)
    cache_env: str | None = None
    #: GPU vendors it compiles for (``HardwareTarget.vendor``)
    vendors: tuple[str, ...]
    #: whether torch.compile can trace its launches into the graph (``torch.library.triton_op``
    #: with ``wrap_triton``): `kgen export` then registers such a kernel so Inductor sees it,
    #: and any other as an opaque custom op
    compiler_traceable: bool = False
    #: the lowest compute capability it compiles for on NVIDIA (80 = Ampere), if any
    min_nvidia_arch: int | None = None


#: The data: one entry per backend. Keep it sorted by name.
_BACKENDS: tuple[BackendInfo, ...] = (
    BackendInfo(
        name="cute",
        label="CuTe DSL",
        words=("cute", "cute dsl", "cutedsl", "cute-dsl", "cutlass", "cutlass dsl"),
        factory="kgen.backends.cute:CuteBackend",
        requires=("cutlass",),
        install="pip install 'kgen[cute]'",
        kernel_decorators=("cutlass.cute.kernel", "cutlass.cute.jit"),
        candidate_imports=("cutlass", "cutlass.cute", "cutlass.cute.runtime"),
        runs_on_cpu=False,
        tensor_handoff_modules=("cutlass.cute.runtime", "cutlass.base_dsl", "cutlass.cutlass_dsl", "tvm_ffi"),
        cache_env="CUTE_DSL_CACHE_DIR",
        compile_functions=("cutlass.cute.compile",),
        vendors=("nvidia",),
        min_nvidia_arch=80,
    ),
    BackendInfo(
        name="triton",
        label="Triton",
        words=("triton",),
        factory="kgen.backends.triton:TritonBackend",
        requires=("triton",),
        install="pip install triton",
        kernel_decorators=("triton.jit", "triton.language.jit", "triton.runtime.jit.jit"),
        candidate_imports=("triton", "triton.language"),
        runs_on_cpu=True,
        cache_env="TRITON_CACHE_DIR",
        vendors=("nvidia", "amd"),
        compiler_traceable=True,
    ),
)

#: The backend a request that names none gets.
DEFAULT_BACKEND = "triton"


def known_backends() -> list[str]:
    return sorted(b.name for b in _BACKENDS)


def all_backend_info() -> list[BackendInfo]:
    return sorted(_BACKENDS, key=lambda b: b.name)


def backend_info(name: str) -> BackendInfo:
    """The entry for ``name`` (any case); raises UnknownBackendError listing the known ones."""
    key = name.strip().lower() if isinstance(name, str) else name
    for info in _BACKENDS:
        if info.name == key:
            return info
    raise UnknownBackendError(f"unknown backend {name!r}; known backends: {', '.join(known_backends())}")


def all_compile_functions() -> frozenset[str]:
    """Every backend's ahead-of-launch compile calls (``BackendInfo.compile_functions``)."""
    return frozenset(f for info in _BACKENDS for f in info.compile_functions)


def tensor_handoff_modules() -> tuple[str, ...]:
    """Every backend's tensor hand-off modules (``BackendInfo.tensor_handoff_modules``)."""
    return tuple(m for info in _BACKENDS for m in info.tensor_handoff_modules)


def backend_for_word(word: str) -> str | None:
    """The backend a request's word (or two-word phrase) names, or None."""
    key = " ".join(word.strip().lower().split())
    for info in _BACKENDS:
        if key in info.words:
            return info.name
    return None


def backend_words() -> dict[str, str]:
    """Every word or phrase that names a backend, mapped to its name (names included)."""
    words: dict[str, str] = {}
    for info in all_backend_info():
        for word in (info.name, *info.words):
            words.setdefault(" ".join(word.lower().split()), info.name)
    return words


def all_kernel_decorators() -> frozenset[str]:
    """The dotted decorator names of every backend: what marks a function as kernel code."""
    return frozenset(d for info in _BACKENDS for d in info.kernel_decorators)


def target_problem(name: str, target: HardwareTarget) -> str | None:
    """Why the backend cannot compile for ``target`` (wrong vendor, too old an NVIDIA GPU),
    naming the targets it can use; None when it can. Data-driven from ``vendors`` and
    ``min_nvidia_arch``, so a run refuses up front instead of failing in the compiler."""
    info = backend_info(name)
    reason = _target_reason(info, target)
    if reason is None:
        return None
    usable = [t.name for t in all_targets() if _target_reason(info, t) is None]
    can = ", ".join(usable) if usable else "none"
    return f"the {info.label} backend does not compile for {target.name} ({reason}); targets it can use: {can}"


def _target_reason(info: BackendInfo, target: HardwareTarget) -> str | None:
    if target.vendor not in info.vendors:
        return {"amd": "AMD", "nvidia": "NVIDIA"}.get(target.vendor, target.vendor)
    if target.vendor == "nvidia" and info.min_nvidia_arch is not None:
        arch = target.arch
        if isinstance(arch, int) and arch < info.min_nvidia_arch:
            return f"compute capability {arch}; it needs {info.min_nvidia_arch} or newer"
    return None


def missing_requirement(name: str) -> str | None:
    """Why the backend cannot be used here (its toolchain is not installed), or None."""
    info = backend_info(name)
    missing = [m for m in info.requires if importlib.util.find_spec(m) is None]
    if missing:
        return f"the {info.label} backend needs {', '.join(missing)}, which is not installed: {info.install}"
    return None


def require_usable(name: str, targets: list[HardwareTarget]) -> str:
    """The backend's canonical name, once it is known, installed and able to compile for every
    target; raises UnknownBackendError or BackendUnavailableError with a message a person can
    act on (the install command, the targets it can use). The one check ``kgen eval`` and a
    run both make before any work starts."""
    info = backend_info(name)
    for problem in [missing_requirement(info.name), *(target_problem(info.name, t) for t in targets)]:
        if problem is not None:
            raise BackendUnavailableError(problem)
    return info.name


@cache
def _factory(name: str):
    module_name, _, class_name = backend_info(name).factory.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def get_backend(name: str) -> Backend:
    """A fresh backend instance; raises UnknownBackendError listing the known backends.
    Importing the implementation imports no toolchain: each backend imports its own
    (triton, cutlass) only when a method needs it."""
    return _factory(backend_info(name).name)()


def toolchain_versions(backend: str) -> dict[str, str]:
    """torch's and the backend's toolchains' installed versions, read from the distributions'
    metadata (nothing is imported); a module whose distribution has another name is found
    through ``packages_distributions``."""
    versions: dict[str, str] = {}
    names = ("torch", *backend_info(backend).requires)
    owners = None
    for name in names:
        try:
            versions[name] = metadata.version(name)
            continue
        except metadata.PackageNotFoundError:
            pass
        owners = owners if owners is not None else metadata.packages_distributions()
        dists = owners.get(name, [])
        versions[name] = ",".join(sorted(metadata.version(d) for d in dists)) if dists else "not installed"
    return versions
