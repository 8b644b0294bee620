"""Problem files in KernelBench format, with kgen's optional metadata.

A problem is a Python file defining ``class Model(nn.Module)``, ``get_inputs()``,
``get_init_inputs()`` and module-level size constants (``batch_size = 16``).
kgen's own problems may also define module-level ``KGEN_*`` names that
KernelBench ignores:

``KGEN_NAME``                 catalog name (default: the file's stem)
``KGEN_ALIASES``              other names a person might type
``KGEN_DESCRIPTION``          one line
``KGEN_KIND``                 "forward" or "backward"
``KGEN_SMALL_SIZES``          size constants for CPU runs (the Triton interpreter is slow)
``KGEN_EXTRA_SIZES``          further size sets the verifier should try (odd sizes, ...)
``KGEN_INPUT_DISTRIBUTIONS``  input distributions beyond the defaults, e.g. "zipf_ids"
``KGEN_PROBE_SIZES``          sizes for the CPU precision probes: a long reduction axis and
                              little else, so a narrow accumulator shows in the interpreter
``KGEN_FIXED_SIZES``          size constants the verifier must not perturb (a head dim a
                              kernel may legitimately require to be a power of two); a
                              tuple's name fixes all its elements, ``"shape[1]"`` one
``KGEN_PRECISION``            "ieee" (default) or "tf32" (``evals/problem/policies.py``)
``KGEN_TORCH_OPS``            "strict" or "library" (default: strict for kgen's problems,
                              library for plain KernelBench files)
``KGEN_VARIANT_OF``           the catalog problem this file is another shape of (a benchmark
                              at another hidden size): the same operation, so the same
                              library baselines serve it
``KGEN_BASELINE_COMPUTE``     what eager PyTorch and ``torch.compile`` compute in when a
                              candidate is timed against them ("bf16 GEMM, fp32 accumulation"),
                              stated beside every timing table
``kgen_bytes()``, ``kgen_flops()``  the fewest bytes moved / FLOPs done at the
                              module's current sizes (used for speed-of-light)
``kgen_backward_inputs(grad_out, inputs, init_inputs)``  a backward problem's inputs made
                              from its forward's gradient, inputs and init inputs (the saved
                              statistics recomputed as ``get_inputs()`` computes them): how
                              ``kgen export`` chains a forward kernel to its backward kernel
                              under autograd (the pair: ``evals/problem/catalog.py``)
``class Baseline(nn.Module)``  optional: what eager and ``torch.compile`` run instead of
                              ``Model`` when the reference computes in wider dtypes than a
                              candidate may use (a GEMM's fp32 reference against a bf16 kernel
                              is not like for like). Same inputs and outputs as ``Model``; the
                              fp64 verification still uses ``Model``.

Size constants (``batch_size = 16``, ``height = width = 256``, ``input_shape =
(32768,)``, ...; ``evals/problem/size_constants.py`` says which forms and how they are
keyed) are rebound by rewriting the source before executing it, so constants
derived from them (``N = B * S``) follow along.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kgen.errors import KgenUsageError
from kgen.evals.problem.init_arguments import Number, rebind_arguments
from kgen.evals.problem.policies import Policies, policies_for
from kgen.evals.problem.size_constants import METADATA_PREFIX as _METADATA_PREFIX
from kgen.evals.problem.size_constants import (
    derived_size_names,
    rebind,
    resolved_sizes,
    size_constants,
)

#: Largest value a size constant keeps when a KernelBench file without
#: ``KGEN_SMALL_SIZES`` is scaled down for the CPU interpreter.
CPU_SIZE_CAP = 128


class ProblemError(KgenUsageError):
    """A problem file that cannot be read or does not follow the format."""


class ProblemInfo(BaseModel):
    """What a problem file declares, read without executing it."""

    name: str
    path: Path
    aliases: list[str] = Field(default_factory=list)
    description: str = ""
    kind: str = "forward"
    sizes: dict[str, int] = Field(default_factory=dict)
    #: keys computed from other constants (``K = M * 2``): they follow their bases when those move
    derived_sizes: list[str] = Field(default_factory=list)
    small_sizes: dict[str, int] | None = None
    extra_sizes: list[dict[str, int]] = Field(default_factory=list)
    input_distributions: list[str] = Field(default_factory=list)
    fixed_sizes: list[str] = Field(default_factory=list)
    probe_sizes: dict[str, int] | None = None
    precision: str | None = None
    torch_ops: str | None = None
    #: what the eager and torch.compile baselines compute in (``KGEN_BASELINE_COMPUTE``)
    baseline_compute: str = ""
    #: the catalog problem this file is another shape of (``KGEN_VARIANT_OF``)
    variant_of: str | None = None
    #: the file declares ``class Baseline``: eager and torch.compile run it, not ``Model``
    has_baseline_class: bool = False
    has_kgen_metadata: bool = False

    def policies(self, precision: str | None = None, torch_ops: str | None = None) -> Policies:
        """The policies a candidate for this problem is judged under (flags override the file)."""
        return policies_for(self.precision, self.torch_ops, not self.has_kgen_metadata, precision, torch_ops)

    @property
    def operation(self) -> str:
        """The operation this problem computes: its own name, or the one it is a shape of."""
        return self.variant_of or self.name

    def baseline_statement(self) -> str:
        """What eager PyTorch and torch.compile run and compute in, as tables state it."""
        runs = "Baseline" if self.has_baseline_class else "Model"
        return f"{runs}: {self.baseline_compute or 'the reference as written'}"

    def cpu_sizes(self) -> dict[str, int]:
        """Sizes small enough for the Triton interpreter, consistent with the file's relations.

        A problem's ``KGEN_SMALL_SIZES`` when it has them. KernelBench files carry no
        small set, so each free size constant above ``CPU_SIZE_CAP`` (a name, or one
        element of a tuple: ``input_shape[0]``) is halved until it fits: halving keeps
        the power-of-two relations such files rely on (channels divisible by groups,
        and so on). Derived constants (``K = M * 2``, ``groups = in_channels``) are
        recomputed from the halved ones, never halved on their own, so ``K = 2 * M``
        still holds; a derived one may therefore stay above the cap (``N = B * S``).
        """
        if self.small_sizes is not None:
            rebound = dict(self.small_sizes)
        else:
            derived = set(self.derived_sizes)
            rebound = {k: halved_to_cap(v) for k, v in self.sizes.items() if k not in derived}
        if not self.derived_sizes:
            return {**self.sizes, **rebound}
        return consistent_sizes(self.path, rebound)


def sizes_text(sizes: Mapping[str, int]) -> str:
    """How a set of sizes reads in kgen's messages and reports: ``batch_size=16, dim=4096``."""
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def halved_to_cap(value: int, cap: int = CPU_SIZE_CAP) -> int:
    """``value`` halved until it is at most ``cap`` (a power-of-two factor keeps divisibility)."""
    while value > cap:
        value //= 2
    return value


def consistent_sizes(path: Path, rebound: Mapping[str, int]) -> dict[str, int]:
    """Every size constant of the problem at ``path`` once ``rebound`` are rebound: derived
    constants follow the free ones, except those ``rebound`` names (which override them)."""
    return resolved_sizes(_parse(path), rebound)


class LoadedProblem:
    """A problem file executed at one set of sizes, and with some arguments varied."""

    def __init__(self, info: ProblemInfo, module: types.ModuleType, sizes: dict[str, int],
                 arguments: dict[str, Number] | None = None):
        self.info = info
        self.module = module
        self.sizes = sizes
        #: arguments other than sizes set to other values than the file's (``init_arguments.py``)
        self.arguments = dict(arguments or {})

    @property
    def model_class(self) -> type:
        return self.module.Model

    @property
    def baseline_class(self) -> type:
        """What eager PyTorch and ``torch.compile`` are timed running: ``Baseline`` if declared."""
        return getattr(self.module, "Baseline", None) or self.module.Model

    def get_inputs(self) -> list[Any]:
        return list(self.module.get_inputs())

    def get_init_inputs(self) -> list[Any]:
        return list(self.module.get_init_inputs())

    def bytes_moved(self) -> int | None:
        fn = getattr(self.module, "kgen_bytes", None)
        return int(fn()) if callable(fn) else None

    def flops(self) -> int | None:
        fn = getattr(self.module, "kgen_flops", None)
        return int(fn()) if callable(fn) else None


def flatten_outputs(value: Any) -> list[Any]:
    """A forward may return one tensor or a (nested) tuple/list of them."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten_outputs(item)]
    return [value]


def parse_problem(path: Path) -> ast.Module:
    """A problem file's syntax tree; a file that cannot be read or parsed is a ProblemError."""
    return _parse(path)


def model_method(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """``Model.<name>`` in a problem's syntax tree (``parse_problem``), or None where the file
    defines no ``Model`` class or it no such method: what readers of a reference's interface
    (its arguments, its forward's text) start from without running it."""
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return None
    return next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _parse(path: Path) -> ast.Module:
    try:
        source = path.read_text()
    except OSError as exc:
        raise ProblemError(f"cannot read problem file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ProblemError(f"cannot read problem file {path}: not UTF-8 text (byte {exc.start})") from exc
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"problem file {path} has a syntax error on line {exc.lineno}: {exc.msg}") from exc


def _single_target(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """``NAME = value``: the only form kgen's ``KGEN_*`` metadata takes."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None


def _metadata(tree: ast.Module, path: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in tree.body:
        assigned = _single_target(node)
        if assigned is None or not assigned[0].startswith(_METADATA_PREFIX):
            continue
        try:
            found[assigned[0]] = ast.literal_eval(assigned[1])
        except ValueError as exc:
            raise ProblemError(f"{path}: {assigned[0]} must be a literal ({exc})") from exc
    return found


def read_problem(path: str | Path) -> ProblemInfo:
    """Read a problem's declarations without running it (listing stays fast)."""
    path = Path(path)
    tree = _parse(path)
    defined = {
        n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
    }
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in defined]
    if missing:
        raise ProblemError(f"{path} is not a KernelBench-format problem: missing {', '.join(missing)}")
    meta = _metadata(tree, path)
    return ProblemInfo(
        name=meta.get("KGEN_NAME", path.stem),
        path=path.resolve(),
        aliases=list(meta.get("KGEN_ALIASES", [])),
        description=meta.get("KGEN_DESCRIPTION", ""),
        kind=meta.get("KGEN_KIND", "forward"),
        sizes=size_constants(tree),
        derived_sizes=derived_size_names(tree),
        small_sizes=meta.get("KGEN_SMALL_SIZES"),
        extra_sizes=list(meta.get("KGEN_EXTRA_SIZES", [])),
        input_distributions=list(meta.get("KGEN_INPUT_DISTRIBUTIONS", [])),
        fixed_sizes=list(meta.get("KGEN_FIXED_SIZES", [])),
        probe_sizes=meta.get("KGEN_PROBE_SIZES"),
        precision=meta.get("KGEN_PRECISION"),
        torch_ops=meta.get("KGEN_TORCH_OPS"),
        baseline_compute=meta.get("KGEN_BASELINE_COMPUTE", ""),
        variant_of=meta.get("KGEN_VARIANT_OF"),
        has_baseline_class="Baseline" in defined,
        has_kgen_metadata=bool(meta),
    )


def load_problem(
    path: str | Path, sizes: Mapping[str, int] | None = None, arguments: Mapping[str, Number] | None = None
) -> LoadedProblem:
    """Execute a problem file, with some of its size constants rebound and some of its
    arguments other than sizes set (keys of ``init_arguments.find_arguments``)."""
    info = read_problem(path)
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(info.sizes))
    if unknown:
        raise ProblemError(
            f"{info.name} has no size constant {', '.join(unknown)} "
            f"(it has: {', '.join(info.sizes) or 'none'})"
        )
    arguments = dict(arguments or {})
    tree = rebind_arguments(rebind(_parse(info.path), sizes), arguments)
    named = repr(sorted(sizes.items())) + (repr(sorted(arguments.items())) if arguments else "")
    digest = hashlib.sha1(named.encode()).hexdigest()[:8]
    module_name = f"kgen_problem_{info.path.stem}_{digest}".replace("-", "_")
    module = types.ModuleType(module_name)
    module.__file__ = str(info.path)
    sys.modules[module_name] = module
    try:
        exec(compile(tree, str(info.path), "exec"), module.__dict__)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ProblemError(f"problem {info.name} failed to load: {type(exc).__name__}: {exc}") from exc
    effective = size_constants(tree)
    return LoadedProblem(info, module, effective, arguments)


def input_dtype(info: ProblemInfo) -> str:
    """The dtype of a problem's floating-point inputs ('bfloat16', 'float32', ...), 'none' if it has
    none: the knowledge base keeps one best kernel per dtype, so the slot needs it."""
    import torch

    loaded = load_problem(info.path, info.cpu_sizes())
    torch.manual_seed(0)
    for value in loaded.get_inputs():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return str(value.dtype).removeprefix("torch.")
    return "none"
