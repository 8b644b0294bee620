"""The runtime of a package `kgen export` wrote: its kernels as PyTorch custom ops.

This file is copied verbatim into every exported package (as ``_runtime.py``) and imports
torch and the standard library only, never kgen: the package works where kgen is not
installed. ``manifest.json`` beside it says what each kernel is (``kgen/export/manifest.py``
writes it); this module turns each entry into

* a custom op ``torch.ops.<namespace>.<name>`` (``torch.library.custom_op``) whose real
  implementation runs the exported ``ModelNew`` and whose fake implementation runs the
  problem's reference on the fake tensors: the reference is the one statement of the output's
  shapes and dtypes for every input shape, so ``torch.compile(fullgraph=True)`` traces the op
  without a graph break and never trusts a hand-written shape rule;
* autograd (``torch.library.register_autograd``) where the package also holds the forward's
  paired backward kernel: the backward problem's ``kgen_backward_inputs`` makes the backward
  kernel's inputs, and its outputs are the gradients of the forward's floating-point inputs;
* a plain function and an ``nn.Module`` wrapper.

Every call checks what the verifier checked: each tensor input has the dtype and the number
of dimensions the kernel was verified with (else ``TypeError`` / ``ValueError``, never a
silent cast), and inputs the verifier only gave in plain contiguous layout are made
contiguous before the kernel sees them. Kernel and reference files are loaded only if their
sha256 is the one exported: a file changed after export is refused at import
(``TamperedKernelError``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
MANIFEST_FILE = "manifest.json"
#: an input's layout rule: made contiguous (the verifier gave only plain layouts) or passed as is
CONTIGUOUS, AS_GIVEN = "contiguous", "as_given"


class TamperedKernelError(ImportError):
    """A kernel or reference file whose bytes are not the ones exported."""


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest() -> dict[str, Any]:
    return json.loads((HERE / MANIFEST_FILE).read_text())


def load_checked(relative: str, expected_sha256: str, module_name: str) -> types.ModuleType:
    """Execute the file at ``relative`` (inside the package) as ``module_name`` once its sha256
    is the exported one; ``TamperedKernelError`` names the file when it is not."""
    path = HERE / relative
    found = sha256_of(path)
    if found != expected_sha256:
        raise TamperedKernelError(
            f"{relative}: code hash mismatch (sha256 {found[:12]}, exported {expected_sha256[:12]}): "
            "the file changed after `kgen export`; export the kernel again")
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class Kernel:
    """One exported kernel: its manifest entry, its kernel module and its reference module."""

    def __init__(self, package: str, entry: dict[str, Any]) -> None:
        self.package = package
        self.entry = entry
        self.name: str = entry["name"]
        self.kernel = load_checked(entry["kernel_file"], entry["kernel_sha256"], f"{package}._kernels.{self.name}")
        self.reference = load_checked(entry["reference_file"], entry["reference_sha256"],
                                      f"{package}._references.{self.name}")
        self.inputs: list[dict[str, Any]] = entry["inputs"]
        self.init: list[dict[str, Any]] = entry["init"]
        self._models: dict[tuple[Any, ...], torch.nn.Module] = {}

    @property
    def n_inputs(self) -> int:
        return len(self.inputs)

    def schema(self) -> str:
        """The op's schema: the problem's forward arguments, then its init arguments, all
        required (the plain function and the module supply the problem's values as defaults;
        a schema default would make torch drop the argument when it equals it)."""
        args = [f"{_schema_type(spec)} {spec['name']}" for spec in self.inputs]
        args += [f"{spec['type']} {spec['name']}" for spec in self.init]
        outs = ", ".join(["Tensor"] * self.entry["outputs"])
        return f"({', '.join(args)}) -> " + (outs if self.entry["outputs"] == 1 else f"({outs})")

    def check(self, args: Sequence[Any]) -> list[Any]:
        """The inputs as the kernel was verified with them: dtypes and ranks refused when they
        differ, plain-layout inputs made contiguous."""
        checked = list(args)
        for i, spec in enumerate(self.inputs):
            value = args[i]
            if spec["kind"] != "tensor":
                continue
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{self.qualified}: {spec['name']} must be a tensor, got {type(value).__name__}")
            if str(value.dtype) != spec["dtype"]:
                raise TypeError(f"{self.qualified}: {spec['name']} must be {spec['dtype']} (the dtype kgen "
                                f"verified), got {value.dtype}")
            if value.dim() != spec["ndim"]:
                raise ValueError(f"{self.qualified}: {spec['name']} must have {spec['ndim']} dimensions (as "
                                 f"verified), got shape {tuple(value.shape)}")
            if spec["layout"] == CONTIGUOUS:
                checked[i] = value.contiguous()
        return checked

    @property
    def qualified(self) -> str:
        return f"{self.package}.{self.name}"

    def model(self, init: tuple[Any, ...]) -> torch.nn.Module:
        """The kernel's ``ModelNew`` for these init arguments, made once."""
        if init not in self._models:
            self._models[init] = self.kernel.ModelNew(*init)
        return self._models[init]

    def reference_model(self, init: Sequence[Any]) -> torch.nn.Module:
        return self.reference.Model(*init)

    def split(self, args: Sequence[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        """The op's arguments as (checked forward inputs, init arguments)."""
        return self.check(args[: self.n_inputs]), tuple(args[self.n_inputs:])

    def run(self, *args: Any) -> Any:
        """The real implementation: the exported kernel on checked inputs; fresh outputs."""
        inputs, init = self.split(args)
        out = self.model(init)(*inputs)
        return _fresh(out, inputs)

    def fake(self, *args: Any) -> Any:
        """The fake implementation: the reference on the fake inputs gives shapes and dtypes."""
        inputs, init = self.split(args)
        out = self.reference_model(init)(*inputs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        made = tuple(torch.empty(o.shape, dtype=o.dtype, device=o.device) for o in outs)
        return made if self.entry["outputs"] > 1 else made[0]


def _schema_type(spec: dict[str, Any]) -> str:
    return "Tensor" if spec["kind"] == "tensor" else spec["type"]


def _fresh(out: Any, inputs: Sequence[Any]) -> Any:
    """Outputs as new contiguous tensors: a custom op may not return its inputs' storage, and
    its fake implementation promises contiguous outputs."""
    storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}

    def one(t: torch.Tensor) -> torch.Tensor:
        t = t.contiguous()
        return t.clone() if t.untyped_storage().data_ptr() in storages else t

    if isinstance(out, (tuple, list)):
        return tuple(one(t) for t in out)
    return one(out)


class Package:
    """Every kernel of the package, registered under the namespace ``kgen_<package>``."""

    def __init__(self, package: str) -> None:
        self.manifest = manifest()
        self.package = package
        self.namespace: str = self.manifest["namespace"]
        self.kernels = {e["name"]: Kernel(package, e) for e in self.manifest["kernels"]}
        self.ops: dict[str, Any] = {}
        for kernel in self.kernels.values():
            self._register(kernel)
        for kernel in self.kernels.values():
            backward = kernel.entry.get("backward")
            if backward and backward in self.kernels:
                self._register_autograd(kernel, self.kernels[backward])

    def _register(self, kernel: Kernel) -> None:
        op = torch.library.custom_op(f"{self.namespace}::{kernel.name}", kernel.run, mutates_args=(),
                                     schema=kernel.schema())
        op.register_fake(kernel.fake)
        self.ops[kernel.name] = op

    def _register_autograd(self, forward: Kernel, backward: Kernel) -> None:
        backward_op = self.ops[backward.name]
        n = forward.n_inputs
        float_inputs = [i for i, spec in enumerate(forward.inputs) if spec.get("differentiable")]

        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            ctx.save_for_backward(*[v for v in inputs[:n] if isinstance(v, torch.Tensor)])
            ctx.others = [(i, v) for i, v in enumerate(inputs[:n]) if not isinstance(v, torch.Tensor)]
            ctx.init = list(inputs[n:])

        def gradients(ctx: Any, *grads: Any) -> tuple[Any, ...]:
            saved = list(ctx.saved_tensors)
            for i, value in ctx.others:
                saved.insert(i, value)
            grad_out = grads[0] if len(grads) == 1 else list(grads)
            made = backward.reference.kgen_backward_inputs(grad_out, saved, ctx.init)
            outs = backward_op(*made, *[spec["default"] for spec in backward.init])
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            result: list[Any] = [None] * (n + len(ctx.init))
            for i, grad in zip(float_inputs, outs, strict=True):
                result[i] = grad
            return tuple(result)

        self.ops[forward.name].register_autograd(gradients, setup_context=setup_context)

    def function(self, name: str) -> Callable[..., Any]:
        """The plain function of kernel ``name``: the op, with the problem's init arguments as
        keyword arguments defaulting to the problem's values."""
        op = self.ops[name]
        kernel = self.kernels[name]

        def call(*inputs: Any, **init: Any) -> Any:
            unknown = set(init) - {spec["name"] for spec in kernel.init}
            if unknown:
                raise TypeError(f"{kernel.qualified}() got unexpected keyword arguments {sorted(unknown)}")
            values = [init.get(spec["name"], spec["default"]) for spec in kernel.init]
            return op(*inputs, *values)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = f"{kernel.entry['description']}\n\nInit arguments: " + (
            ", ".join(f"{s['name']}={s['default']!r}" for s in kernel.init) or "none")
        return call

    def module_class(self, name: str) -> type[torch.nn.Module]:
        """An ``nn.Module`` taking the problem's init arguments, whose forward calls the op."""
        function = self.function(name)
        names = [spec["name"] for spec in self.kernels[name].init]

        class Op(torch.nn.Module):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__()
                self.init = dict(zip(names, args, strict=False)) | kwargs

            def forward(self, *inputs: Any) -> Any:
                return function(*inputs, **self.init)

        Op.__name__ = Op.__qualname__ = "".join(part.capitalize() for part in name.split("_"))
        Op.__doc__ = function.__doc__
        return Op


def _small_inputs(kernel: Kernel, seed: int, device: str) -> tuple[list[Any], list[Any]]:
    """Fresh inputs at the manifest's small sizes: the reference's size constants rebound, then
    its own ``get_inputs()`` under ``seed``."""
    for name, value in kernel.entry["small_sizes"].items():
        setattr(kernel.reference, name, value)
    torch.manual_seed(seed)
    inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in kernel.reference.get_inputs()]
    return inputs, list(kernel.reference.get_init_inputs())


def _fp64(values: Sequence[Any]) -> list[Any]:
    return [v.detach().double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in fp64 (0 where both are zero): the verifier's measure."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    norm = ref.norm().item()
    diff = (out - ref).norm().item()
    return diff / norm if norm > 0 else diff


def check_kernel(package: Package, name: str, seed: int, device: str = "cpu") -> list[float]:
    """The kernel's outputs against the fp64 reference on fresh inputs at small sizes; the
    normalised errors, each checked against its dtype's tolerance (``AssertionError``)."""
    kernel = package.kernels[name]
    inputs, init = _small_inputs(kernel, seed, device)
    outs = _as_list(package.ops[name](*inputs, *init))
    refs = _as_list(kernel.reference_model(init)(*_fp64(inputs)))
    assert len(outs) == len(refs), f"{name}: {len(outs)} outputs, the reference has {len(refs)}"
    errors = []
    for i, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        assert out.shape == ref.shape, f"{name} output {i}: shape {tuple(out.shape)}, reference {tuple(ref.shape)}"
        assert torch.isfinite(out).all() or not torch.isfinite(ref).all(), f"{name} output {i}: not finite"
        error = rel_l2(out, ref)
        tolerance = kernel.entry["tolerances"][i]
        assert error <= tolerance, f"{name} output {i}: rel-L2 {error:.3g} > {tolerance:.3g}"
        errors.append(error)
    return errors


def check_gradients(package: Package, name: str, seed: int, device: str = "cpu") -> list[float]:
    """Autograd through the op (forward and backward kernels) against the fp64 reference's own
    autograd, on fresh inputs at small sizes; the normalised errors of each input's gradient."""
    kernel = package.kernels[name]
    inputs, init = _small_inputs(kernel, seed, device)
    leaves = [v.detach().requires_grad_(spec.get("differentiable", False)) if isinstance(v, torch.Tensor) else v
              for v, spec in zip(inputs, kernel.inputs, strict=True)]
    out = package.ops[name](*leaves, *init)
    torch.manual_seed(seed + 1)
    grad_out = torch.randn_like(out, dtype=torch.float32).to(out.dtype)
    wrt = [v for v, spec in zip(leaves, kernel.inputs, strict=True) if spec.get("differentiable")]
    got = torch.autograd.grad(out, wrt, grad_out)
    ref_leaves = [v.detach().double().requires_grad_(True) if isinstance(v, torch.Tensor) and spec.get("differentiable")
                  else v for v, spec in zip(inputs, kernel.inputs, strict=True)]
    ref_out = kernel.reference_model(init)(*ref_leaves)
    ref_wrt = [v for v, spec in zip(ref_leaves, kernel.inputs, strict=True) if spec.get("differentiable")]
    want = torch.autograd.grad(ref_out, ref_wrt, grad_out.double())
    errors = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        error = rel_l2(g, w)
        tolerance = kernel.entry["grad_tolerances"][i]
        assert error <= tolerance, f"{name} gradient {i}: rel-L2 {error:.3g} > {tolerance:.3g}"
        errors.append(error)
    return errors
