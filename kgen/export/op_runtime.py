"""The runtime of a package `kgen export` wrote: its kernels as PyTorch ops the compiler can see.

This file is copied verbatim into every exported package (as ``_runtime.py``) and imports
torch, the standard library and (for Triton kernels) triton only, never kgen: the package
works where kgen is not installed. ``manifest.json`` beside it says what each kernel is
(``kgen/export/manifest.py`` writes it); this module turns each entry into

* an op ``torch.ops.<namespace>.<name>`` registered one of two ways, as the manifest's
  ``registration`` says (`kgen export` decided it by tracing the kernel, ``probe_traceable``):

  - ``triton_op`` (``torch.library.triton_op``): a Triton kernel whose launches trace. Called
    eagerly it runs the exported ``ModelNew`` and its raw launches; under ``torch.compile`` its
    body is traced with every ``kernel[grid](...)`` recorded as a ``wrap_triton`` launch, so
    Inductor sees the Triton kernels themselves, fuses the casts and views around them and pays
    no opaque-op boundary. The traced body's output shapes and dtypes are checked against the
    problem's reference on the same fake tensors: the reference stays the one statement of what
    the op returns;
  - ``custom_op`` (``torch.library.custom_op``): opaque to the compiler (CuTe DSL kernels, and
    Triton kernels whose Python wrapper does something tracing cannot follow); its fake
    implementation runs the problem's reference on the fake tensors, never a hand-written shape
    rule;
* autograd (``register_autograd``) where the package also holds the forward's paired backward
  kernel: the backward problem's ``kgen_backward_inputs`` makes the backward kernel's inputs,
  and its outputs are the gradients of the forward's floating-point inputs;
* a plain function and an ``nn.Module`` wrapper.

Every call checks what the verifier checked: each tensor input has the dtype and the number
of dimensions the kernel was verified with (else ``TypeError`` / ``ValueError``, never a
silent cast), and inputs the verifier only gave in plain contiguous layout are made
contiguous before the kernel sees them. Kernel and reference files are loaded only if their
sha256 is the one exported: a file changed after export is refused at import
(``TamperedKernelError``).

Run as a script (``python _runtime.py --probe``) it prints, as JSON, whether each Triton kernel
of the package traces: what `kgen export` asks before it writes the registration.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import json
import logging
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
MANIFEST_FILE = "manifest.json"
#: an input's layout rule: made contiguous (the verifier gave only plain layouts) or passed as is
CONTIGUOUS, AS_GIVEN = "contiguous", "as_given"
#: how an op is registered (the manifest's ``registration``): traceable Triton, or opaque
TRITON_OP, CUSTOM_OP = "triton_op", "custom_op"


class TamperedKernelError(ImportError):
    """A kernel or reference file whose bytes are not the ones exported."""


class NoGpuError(RuntimeError):
    """A kernel called where it cannot run: no CUDA GPU, and (for Triton) no interpreter asked
    for. Said before the launch, in words, instead of the backend's own failure deep in its
    driver lookup (Triton's "0 active drivers")."""


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


# --- Triton launches recorded while an op's body is traced --------------------------------------
#
# A kernel file launches its Triton kernels as ``kernel[grid](...)``, on real tensors. While
# torch.compile traces a ``triton_op``'s body the tensors are fake, and a launch must instead be
# recorded as ``wrap_triton(kernel)[grid](...)``, which is what lets Inductor see the kernel. The
# exported file is never edited (its hash is the verified one), so the launch itself is redirected:
# ``KernelInterface.__getitem__`` (every JIT, autotuned and interpreted Triton kernel) is wrapped
# while at least one thread traces, and it redirects only in the thread that traces.

_TRACING = threading.local()
_PATCH_LOCK = threading.Lock()
_PATCH_USERS = [0]
_ORIGINAL_GETITEM: list[Any] = []
#: the JIT twins of interpreted kernels, by the interpreted kernel's id (kept alive with it)
_TWINS: dict[int, tuple[Any, Any]] = {}


def _interpreted(kernel: Any) -> bool:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return False
    return isinstance(kernel, InterpretedFunction)


def _interprets(value: Any) -> bool:
    """``value`` is an interpreted Triton kernel, or wraps one (``triton.autotune`` and
    ``triton.heuristics`` keep the kernel they wrap as ``fn``)."""
    for _ in range(4):
        if _interpreted(value):
            return True
        value = getattr(value, "fn", None)
        if value is None:
            return False
    return False


def _twin(kernel: Any) -> Any:
    """A ``JITFunction`` standing for an interpreted kernel (``TRITON_INTERPRET=1``, as CI runs):
    torch records launches only of JIT kernels, and the twin, when the recorded launch runs,
    hands it to the interpreter. It is traced like the GPU's kernel and runs on the CPU."""
    if id(kernel) not in _TWINS:
        from triton.runtime.jit import JITFunction

        class InterpretedTwin(JITFunction):  # type: ignore[misc, valid-type]
            def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
                return kernel.run(*args, grid=grid, warmup=warmup, **kwargs)

        _TWINS[id(kernel)] = (kernel, InterpretedTwin(kernel.fn))
        _quiet_mutation_analysis()
    return _TWINS[id(kernel)][1]


def _quiet_mutation_analysis() -> None:
    """torch cannot analyse which arguments an interpreted kernel writes (there is no target to
    compile it for), so it assumes every one, which is right, and logs a traceback per launch
    saying so: that one message is dropped (a filter: torch's logging setup resets levels)."""
    logger = logging.getLogger("torch._dynamo")  # the logger triton_kernel_wrap.py writes to
    if not any(isinstance(f, _AssumedMutation) for f in logger.filters):
        logger.addFilter(_AssumedMutation())


class _AssumedMutation(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "assuming every input is mutated" not in record.getMessage()


def _recorded(kernel: Any) -> Any:
    """``kernel`` as a launch the tracer records, or None where torch records none of its kind."""
    from torch._higher_order_ops.triton_kernel_wrap import TraceableTritonKernelWrapper
    from torch._library.triton import is_wrap_triton_enabled
    from torch.library import wrap_triton

    if not is_wrap_triton_enabled():
        return None
    if _interpreted(kernel):
        return TraceableTritonKernelWrapper(_twin(kernel), None, None)
    wrapped = wrap_triton(kernel)
    return None if wrapped is kernel else wrapped


def _launch_getitem(self: Any, grid: Any) -> Any:
    if getattr(_TRACING, "depth", 0) > 0:
        recorded = _recorded(self)
        if recorded is not None:
            return recorded[grid]
    return _ORIGINAL_GETITEM[0](self, grid)


@contextlib.contextmanager
def recorded_launches() -> Iterator[None]:
    """Within it, this thread's ``kernel[grid](...)`` launches on traced tensors are recorded as
    ``wrap_triton`` launches (eager launches on real tensors run as always)."""
    from triton.runtime.jit import KernelInterface

    with _PATCH_LOCK:
        if _PATCH_USERS[0] == 0:
            _ORIGINAL_GETITEM[:] = [KernelInterface.__getitem__]
            KernelInterface.__getitem__ = _launch_getitem  # type: ignore[method-assign]
        _PATCH_USERS[0] += 1
    _TRACING.depth = getattr(_TRACING, "depth", 0) + 1
    try:
        yield
    finally:
        _TRACING.depth -= 1
        with _PATCH_LOCK:
            _PATCH_USERS[0] -= 1
            if _PATCH_USERS[0] == 0:
                KernelInterface.__getitem__ = _ORIGINAL_GETITEM[0]  # type: ignore[method-assign]


def _traced(values: Sequence[Any]) -> bool:
    """Whether these are a tracer's tensors (fake or functional), not real ones."""
    from torch._subclasses.fake_tensor import FakeTensor, is_fake
    from torch._subclasses.functional_tensor import FunctionalTensor

    return any(isinstance(v, (FakeTensor, FunctionalTensor)) or (isinstance(v, torch.Tensor) and is_fake(v))
               for v in values)


def _fake_only(values: Sequence[Any]) -> bool:
    """Fake tensors that are not functional ones: shape propagation, where running the reference
    adds nothing to a graph."""
    from torch._subclasses.functional_tensor import FunctionalTensor

    return _traced(values) and not any(isinstance(v, FunctionalTensor) for v in values)


class Kernel:
    """One exported kernel: its manifest entry, its kernel module and its reference module."""

    def __init__(self, package: str, entry: dict[str, Any]) -> None:
        self.package = package
        self.entry = entry
        self.name: str = entry["name"]
        self.kernel = load_checked(entry["kernel_file"], entry["kernel_sha256"], f"{package}._kernels.{self.name}")
        self.reference = load_checked(entry["reference_file"], entry["reference_sha256"],
                                      f"{package}._references.{self.name}")
        #: TRITON_OP or CUSTOM_OP: what `kgen export` found (packages older than the field: opaque)
        self.registration: str = entry.get("registration", CUSTOM_OP)
        self.inputs: list[dict[str, Any]] = entry["inputs"]
        self.init: list[dict[str, Any]] = entry["init"]
        self._models: dict[tuple[Any, ...], torch.nn.Module] = {}
        #: its Triton kernels were made for Triton's CPU interpreter (TRITON_INTERPRET=1 at import)
        self.interpreted = any(_interprets(value) for value in vars(self.kernel).values())

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
        """The exported kernel on checked inputs; fresh outputs. On a tracer's tensors (a
        ``triton_op``'s body under torch.compile) its launches are recorded, not run, and the
        outputs' shapes and dtypes must be the reference's on the same fake tensors."""
        inputs, init = self.split(args)
        if not _traced(inputs):
            self.check_device()
            return _fresh(self.model(init)(*inputs), inputs)
        with recorded_launches():
            out = self.model(init)(*inputs)
        if _fake_only(inputs):
            self._check_like_reference(out, inputs, init)
        return _fresh(out, inputs)

    @functools.cached_property
    def _runs_here(self) -> bool:
        """Asked once: a process does not gain or lose its GPU, and every eager call checks."""
        return self.interpreted or torch.cuda.is_available()

    def check_device(self) -> None:
        """``NoGpuError`` when this kernel cannot run here: no CUDA GPU (torch sees none) and its
        kernels are not the interpreter's; the message says what works without one."""
        if self._runs_here:
            return
        if self.entry.get("backend") == "triton":
            instead = (f"set TRITON_INTERPRET=1 before importing {self.package} to run its Triton kernels in "
                       "Triton's CPU interpreter (slow: for checking, not speed), or run its tests (python -m pytest "
                       "tests), which do that")
        else:
            instead = (f"its {self.entry.get('backend', 'kernel')} kernels do not run on a CPU; the problem's "
                       f"reference ({self.entry['reference_file']}) computes the same on any device")
        raise NoGpuError(f"{self.qualified} needs a CUDA GPU and this machine has none (torch sees no CUDA device). "
                         f"Without one: {instead}")

    def _check_like_reference(self, out: Any, inputs: Sequence[Any], init: tuple[Any, ...]) -> None:
        """The traced outputs' shapes and dtypes against the reference's on the same fake inputs."""
        got, want = _as_list(out), _as_list(self.fake(*inputs, *init))
        found = [(tuple(t.shape), t.dtype) for t in got]
        expected = [(tuple(t.shape), t.dtype) for t in want]
        if found != expected:
            raise RuntimeError(f"{self.qualified}: the kernel returns {found} where its problem's reference "
                               f"returns {expected}")

    def signature(self) -> inspect.Signature:
        """The op's Python signature, as ``triton_op`` reads the schema from it: the same schema
        as ``schema()``."""
        kinds = {"Tensor": torch.Tensor, "float": float, "int": int, "bool": bool}
        names = [(spec["name"], _schema_type(spec)) for spec in self.inputs]
        names += [(spec["name"], spec["type"]) for spec in self.init]
        params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kinds[t]) for n, t in names]
        outputs = self.entry["outputs"]
        returned = torch.Tensor if outputs == 1 else typing.Tuple[(torch.Tensor,) * outputs]  # noqa: UP006
        return inspect.Signature(params, return_annotation=returned)

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
    """Outputs as new contiguous tensors: an op may return neither its inputs' storage nor one
    storage twice, and its fake implementation promises contiguous outputs (``_is_alias_of``
    also answers for fake tensors)."""
    taken = [t for t in inputs if isinstance(t, torch.Tensor)]

    def one(t: torch.Tensor) -> torch.Tensor:
        t = t.contiguous()
        if any(torch._C._is_alias_of(t, other) for other in taken):
            t = t.clone()
        taken.append(t)
        return t

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
        name = f"{self.namespace}::{kernel.name}"
        if kernel.registration == TRITON_OP and hasattr(torch.library, "triton_op"):
            def body(*args: Any) -> Any:
                return kernel.run(*args)

            body.__signature__ = kernel.signature()  # type: ignore[attr-defined]
            body.__name__ = body.__qualname__ = kernel.name
            self.ops[kernel.name] = torch.library.triton_op(name, body, mutates_args=())
            return
        op = torch.library.custom_op(name, kernel.run, mutates_args=(), schema=kernel.schema())
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
    outs = _as_list(package.ops[name](*leaves, *init))
    torch.manual_seed(seed + 1)  # one upstream gradient per output (a fused add + norm returns two)
    grad_outs = [torch.randn_like(o, dtype=torch.float32).to(o.dtype) for o in outs]
    wrt = [v for v, spec in zip(leaves, kernel.inputs, strict=True) if spec.get("differentiable")]
    got = torch.autograd.grad(outs, wrt, grad_outs)
    ref_leaves = [v.detach().double().requires_grad_(True) if isinstance(v, torch.Tensor) and spec.get("differentiable")
                  else v for v, spec in zip(inputs, kernel.inputs, strict=True)]
    ref_outs = _as_list(kernel.reference_model(init)(*ref_leaves))
    ref_wrt = [v for v, spec in zip(ref_leaves, kernel.inputs, strict=True) if spec.get("differentiable")]
    want = torch.autograd.grad(ref_outs, ref_wrt, [g.double() for g in grad_outs])
    errors = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        error = rel_l2(g, w)
        tolerance = kernel.entry["grad_tolerances"][i]
        assert error <= tolerance, f"{name} gradient {i}: rel-L2 {error:.3g} > {tolerance:.3g}"
        errors.append(error)
    return errors


def probe_traceable(kernel: Kernel, device: str) -> str:
    """"" when torch.compile can trace ``kernel``'s op, else why not, in one line: its body traced
    by ``make_fx`` over fake tensors at the problem's small sizes, every launch recorded as a
    ``wrap_triton`` launch, at least one launch seen, and the reference's shapes and dtypes
    returned. The kernel passed kgen's verifier already; this asks only whether its Python
    wrapper does something a tracer cannot follow (``data_ptr()``, ``.item()``, NumPy)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    inputs, init = _small_inputs(kernel, 0, device)

    def body(*values: Any) -> Any:
        return kernel.run(*values, *init)

    try:
        graph = make_fx(body, tracing_mode="fake")(*inputs)
    except Exception as exc:  # noqa: BLE001 - any failure to trace is the answer, in words
        text = " ".join(str(exc).split())
        return f"its launch does not trace: {type(exc).__name__}: {text[:300]}"
    launches = sum(1 for node in graph.graph.nodes if "triton_kernel_wrapper" in str(node.target))
    return "" if launches else "no Triton launch was recorded while tracing it"


def _probe_package() -> dict[str, str]:
    """Each kernel the manifest registers as a ``triton_op``: "" where it traces, else why not."""
    found = manifest()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {entry["name"]: probe_traceable(Kernel(found["package"], entry), device)
            for entry in found["kernels"] if entry.get("registration") == TRITON_OP}


if __name__ == "__main__":  # `kgen export` asks: python _runtime.py --probe
    if sys.argv[1:] != ["--probe"]:
        raise SystemExit("usage: python _runtime.py --probe")
    print(json.dumps(_probe_package()))
