"""Record the torch ops a candidate's forward dispatches: the dynamic twin of the AST torch-math rule.

Static rules read the candidate's source and can be fooled by what the AST
cannot see (a name built at run time, a module handed in from outside). This
recorder cannot: every eager torch op, however it was reached (``torch.relu``,
``getattr(torch, "rel" + "u")``, ``x * (x > 0)``, ``F.linear``, an
``nn.Linear`` module, a ``torch.ops`` handle), reaches the dispatcher, and a
``TorchDispatchMode`` sees it there as an aten overload (``aten.relu.default``).
Composite ops arrive decomposed (``einsum`` shows up as ``bmm``), which is still
compute. Triton launches do not go through the dispatcher at all, so a forward
whose work is all in Triton kernels shows no compute ops::

    with record_torch_ops() as usage:
        out = model(*inputs)
    if usage.compute_ops: ...  # torch did (part of) the work

Classification (by the aten op's base name, any overload):

* **allowed** — :data:`ALLOWED_ATEN_OPS`: allocation (``empty*``, ``zeros*``,
  ``ones*``, ``full*``, ``new_*``, ``arange`` for index buffers, ``fill_``,
  ``zero_``, ``resize_``, ``scalar_tensor``, ``lift_fresh`` from
  ``torch.tensor``), views and layout (``view``, ``_unsafe_view``,
  ``as_strided``, ``permute``, ``transpose``, ``t``, ``expand``, ``squeeze``,
  ``unsqueeze``, ``slice``, ``select``, ``split``, ``unbind``, ``unfold``,
  ``diagonal``, ``alias``, ``detach``, ...), single-tensor copies and casts
  (``clone`` — what ``contiguous()`` dispatches —, ``copy_``, ``_to_copy`` for
  ``.to(dtype/device)``, ``.float()``/``.half()``) and metadata reads
  (``_local_scalar_dense`` from ``.item()``, ``sym_size`` ...). None of these
  does arithmetic on values.
* **compute** — everything else, including data-movement ops that implement
  a problem by themselves (``cat``, ``stack``, ``gather``, ``index_select``,
  ``flip``, ``roll``, ``repeat``, ``index`` with a mask), random number
  generation, ops of other namespaces (``prims``, custom ``torch.library``
  ops) and ``set_``. The list is an allow list on purpose: an op nobody
  classified counts as compute.
* **host escapes** — ``Tensor.numpy()``, ``.tolist()``, ``__array__``,
  ``__dlpack__`` and ``__cuda_array_interface__`` dispatch no aten op, yet hand
  the data to numpy/Python/another library to compute on. A
  ``TorchFunctionMode`` records them, as ``"Tensor.numpy"`` etc., among the
  compute ops.

Triton's CPU interpreter (``TRITON_INTERPRET=1``) does call torch on the
kernel's tensor arguments: before running a grid it aliases each argument's
storage on the host (``new_empty`` + ``set_``; ``storage.cpu()`` for a device
tensor) and afterwards copies the host storages back (``empty`` + ``set_`` +
``copy_``). Those ops are Triton's, not the candidate's, and are ignored: an
op is ignored exactly when the nearest Python frame that dispatched it, once
torch's own frames and this module's are skipped, is one of those
interpreter functions (``GridExecutor._init_args_hst`` / ``_restore_args_dev``
and their nested helpers), matched by code object identity. Nothing else is
ignored: the kernel body itself runs under the interpreter as the
candidate's own (rewritten) code, so a torch call hidden inside a
``@triton.jit`` function is recorded; a torch function handed to Triton as a
callback (a pre-run hook) is dispatched from a frame that is not on the list,
so it is recorded too. ``triton.testing.do_bench`` and the autotuner only
allocate and ``zero_()`` a cache buffer and ``clone``/``copy_`` arguments
(allowed ops), so nothing of theirs needs ignoring.

Two more things are recorded for the policies (:mod:`kgen.evals.problem.policies`), and
:func:`judge_torch_ops` applies them:

* **library ops** — the compute ops of vendor matmul, convolution and attention
  calls (:data:`~kgen.evals.static_rules.names.LIBRARY_ATEN_OPS` wherever they
  are dispatched, and every op dispatched inside a torch-level call named in
  :data:`~kgen.evals.static_rules.names.LIBRARY_ATTRIBUTED_CALLS`, such as the
  bias ``add`` of ``F.linear`` on a non-contiguous input). They stay in
  ``compute_ops`` (``strict`` rejects them) and are also counted in
  ``library_ops`` (``library`` admits them).
* **glue size** — for every other compute op, the elements of the largest
  tensor it reads or writes (:attr:`TorchOpUsage.touched`): ``library`` admits
  those ops as glue when their sum stays within ``GLUE_SHARE`` of the elements
  of the forward's outputs (never less than :func:`~kgen.evals.problem.policies.glue_budget`'s floors:
  a fixed minimum and two of the module's per-channel vectors). Charging the largest tensor, not just the result,
  keeps a reduction of the big input (``x.mean(-1)``) from passing as glue.
* **host arithmetic** — a compute op on host-made tensors only (made from
  Python values by ``torch.tensor``/``scalar_tensor`` or filled with a constant,
  and what such ops and views make of them), every tensor of it at most
  :data:`HOST_ARITHMETIC_MAX_ELEMENTS` elements: ``torch.prod(torch.tensor(shape))``
  counts elements, it does not compute on the problem's data, so it is
  ``host_ops``, not compute. Host-made status is kept per storage and given up
  when anything not host-made writes into it (the Triton interpreter's copy-back
  of a kernel's result included); a kernel on a GPU writes unseen, which the
  size limit bounds.

The recorder only observes: every op is passed through unchanged, so results
are bit-identical with and without it, on CPU and CUDA tensors alike. Modes
are per-thread, so work a candidate pushes to another thread is not seen (the
static rules forbid threads). Nested recorders each see every op.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

from pydantic import BaseModel, Field

from kgen.backends.registry import tensor_handoff_modules
from kgen.evals.problem.policies import GLUE_SHARE, Policies, TorchOps, glue_budget
from kgen.evals.static_rules.names import (
    LIBRARY_ATEN_OPS,
    LIBRARY_ATTRIBUTED_CALLS,
    LIBRARY_CALLS_TEXT,
)

#: aten ops (base names; every overload) that allocate, view, copy or cast but compute nothing
ALLOWED_ATEN_OPS: frozenset[str] = frozenset(
    {
        # allocation and filling with a constant
        "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
        "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones",
        "full", "full_like", "new_full", "scalar_tensor", "arange",
        "fill", "fill_", "zero", "zero_", "resize_", "resize_as_",
        "lift", "lift_fresh", "lift_fresh_copy",
        # views and layout
        "view", "_unsafe_view", "_reshape_alias", "reshape", "view_as",
        "as_strided", "as_strided_", "permute", "transpose", "transpose_", "t", "t_",
        "expand", "expand_as", "squeeze", "squeeze_", "unsqueeze", "unsqueeze_",
        "slice", "select", "narrow", "split", "split_with_sizes", "unsafe_split",
        "unsafe_split_with_sizes", "unbind", "chunk", "unfold", "diagonal",
        "alias", "detach", "detach_", "view_as_real", "view_as_complex",
        "flatten", "unflatten", "movedim", "swapaxes", "swapdims", "contiguous",
        # copies and casts of a single tensor
        "clone", "copy_", "copy", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
        "_local_scalar_dense",
        # metadata reads (dispatched only for some tensor kinds)
        "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride",
        "numel", "dim", "is_contiguous", "is_same_size", "is_non_overlapping_and_dense",
    }
)

#: torch-function-level calls that move a tensor's data out of torch to be computed on elsewhere
HOST_ESCAPES: frozenset[str] = frozenset(
    {"numpy", "tolist", "__array__", "__array_wrap__", "__dlpack__", "__cuda_array_interface__"}
)


#: the most elements a tensor of host arithmetic may hold (shapes have a handful of dimensions)
HOST_ARITHMETIC_MAX_ELEMENTS = 64
#: aten ops whose results are host-made whatever they were handed: torch.tensor(python values)
_HOST_SOURCES = frozenset({"lift", "lift_fresh", "lift_fresh_copy", "scalar_tensor"})
#: aten ops whose results are never host-made: uninitialised memory and random numbers
_NOT_HOST = ("empty", "new_empty", "rand", "normal", "bernoulli", "multinomial", "poisson", "uniform",
             "exponential", "geometric", "cauchy", "log_normal", "random", "native_dropout", "set_")


class TorchOpUsage(BaseModel):
    """The torch ops one ``record_torch_ops()`` block dispatched, by name, with counts."""

    #: ops that compute (or are not known not to), e.g. {"aten.relu.default": 1}
    compute_ops: dict[str, int] = Field(default_factory=dict)
    #: allocation / view / copy / cast ops, e.g. {"aten.empty_like.default": 1}
    allowed_ops: dict[str, int] = Field(default_factory=dict)
    #: scalars read to the host (``.item()``, ``int(t)``, ``float(t)``, ``bool(t)``)
    host_reads: int = 0
    #: the part of ``compute_ops`` that vendor matmul/convolution/attention calls dispatched
    library_ops: dict[str, int] = Field(default_factory=dict)
    #: compute ops other than library ops -> elements of the largest tensor each call touched, summed
    touched: dict[str, int] = Field(default_factory=dict)
    #: arithmetic on small host-made tensors (shape arithmetic such as torch.prod(torch.tensor(shape)))
    host_ops: dict[str, int] = Field(default_factory=dict)

    @property
    def computes(self) -> bool:
        return bool(self.compute_ops)

    def summary(self, limit: int = 5) -> str:
        """One line naming the compute ops, most frequent first ("" when there are none)."""
        items = sorted(self.compute_ops.items(), key=lambda kv: (-kv[1], kv[0]))
        text = ", ".join(f"{name} x{count}" for name, count in items[:limit])
        more = len(items) - limit
        return text + (f" and {more} more" if more > 0 else "")


def is_allowed_aten_op(name: str) -> bool:
    """Whether an op name like "aten.view.default" (or "aten::view") is on the allow list."""
    text = name.replace("::", ".")
    parts = text.split(".")
    return len(parts) >= 2 and parts[0] == "aten" and parts[1] in ALLOWED_ATEN_OPS


class TorchOpsVerdict(BaseModel):
    """What one forward's torch ops come to under the torch-ops policy."""

    policy: TorchOps = TorchOps.STRICT
    #: ops the policy does not allow (empty: the forward passes this check)
    compute_ops: dict[str, int] = Field(default_factory=dict)
    #: vendor matmul/convolution/attention ops the ``library`` policy allowed
    library_ops: dict[str, int] = Field(default_factory=dict)
    #: other compute ops the ``library`` policy allowed as glue
    glue_ops: dict[str, int] = Field(default_factory=dict)
    #: what the non-library compute ops touched (largest tensor per call, summed), and the most allowed
    glue_elements: int = 0
    glue_budget: int = 0

    def describe(self) -> str:
        """The ops not allowed, and under ``library`` why (the rejection's words)."""
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(self.compute_ops.items()))
        if self.policy is not TorchOps.LIBRARY:
            return ops
        return (
            f"{ops} (torch ops policy library allows only {LIBRARY_CALLS_TEXT} calls, plus glue touching "
            f"at most {GLUE_SHARE:.0%} of the elements the forward returns or two per-channel vectors: "
            f"{self.glue_elements} touched, "
            f"{self.glue_budget} allowed)"
        )


def judge_torch_ops(usage: TorchOpUsage, policies: Policies, produced: int, channels: int = 0) -> TorchOpsVerdict:
    """``usage`` under ``policies``, for a forward that returned ``produced`` elements in all,
    of a module whose largest 1-D parameter or buffer holds ``channels`` elements.

    ``strict``: every compute op is disallowed. ``library``: library ops are allowed; the
    other compute ops are allowed together, as glue, when the elements they touched (the
    largest tensor of each call, summed) are within :func:`~kgen.evals.problem.policies.glue_budget`
    and none
    hands data out of torch (``Tensor.numpy`` ...); otherwise all of them are disallowed.
    """
    if policies.torch_ops is not TorchOps.LIBRARY:
        return TorchOpsVerdict(policy=policies.torch_ops, compute_ops=dict(usage.compute_ops))
    rest = {
        op: n - usage.library_ops.get(op, 0)
        for op, n in usage.compute_ops.items()
        if n > usage.library_ops.get(op, 0)
    }
    verdict = TorchOpsVerdict(
        policy=TorchOps.LIBRARY,
        library_ops=dict(usage.library_ops),
        glue_elements=sum(usage.touched.values()),
        glue_budget=glue_budget(produced, channels),
    )
    escapes = any(not op.startswith("aten.") for op in rest)
    if escapes or verdict.glue_elements > verdict.glue_budget:
        verdict.compute_ops = rest
    else:
        verdict.glue_ops = rest
    return verdict


# ----------------------------------------------------------------------------------------
# Whose op is it: skip torch's frames and ours, then check the dispatching frame
# ----------------------------------------------------------------------------------------

_THIS_FILE = os.path.normcase(os.path.abspath(__file__))
_ignored_lock = threading.Lock()
_ignored_codes: set[CodeType] | None = None
_torch_dir: str | None = None


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_objects(const)


def _interpreter_codes() -> set[CodeType]:
    """Code objects of Triton's interpreter functions that copy kernel arguments to and from the host."""
    global _ignored_codes
    if _ignored_codes is not None:
        return _ignored_codes
    with _ignored_lock:
        if _ignored_codes is not None:
            return _ignored_codes
        codes: set[CodeType] = set()
        # Imported by triton itself once a kernel is decorated in interpreter mode; not imported
        # at all on a GPU, where there is nothing to ignore.
        module = sys.modules.get("triton.runtime.interpreter")
        executor = getattr(module, "GridExecutor", None) if module is not None else None
        names = [n for n in vars(executor) if n.startswith(("_init_args", "_restore_args"))] if executor else []
        for name in names:
            fn = getattr(executor, name, None)
            while fn is not None and hasattr(fn, "__wrapped__"):
                fn = fn.__wrapped__
            code = getattr(fn, "__code__", None)
            if isinstance(code, CodeType):
                codes.update(_code_objects(code))
        # Only cache a complete answer: triton may be imported after the first recorder.
        if module is not None:
            _ignored_codes = codes
        return codes


def _torch_prefix() -> str:
    global _torch_dir
    if _torch_dir is None:
        import torch

        _torch_dir = os.path.normcase(os.path.dirname(os.path.abspath(torch.__file__))) + os.sep
    return _torch_dir


def dispatched_by_triton_interpreter(frame: FrameType | None) -> bool:
    """Whether the op being dispatched from ``frame`` is the Triton interpreter's own
    host copy of a kernel argument (skipping torch's frames and kgen's own)."""
    ignored = _interpreter_codes()
    if not ignored:
        return False
    caller = _caller_outside_torch(frame)
    return caller is not None and caller.f_code in ignored


def _caller_outside_torch(frame: FrameType | None) -> FrameType | None:
    """The nearest frame from ``frame`` up that is neither torch's nor this module's."""
    torch_prefix = _torch_prefix()
    while frame is not None:
        filename = os.path.normcase(frame.f_code.co_filename)
        if filename != _THIS_FILE and not filename.startswith(torch_prefix):
            return frame
        frame = frame.f_back
    return None


def handed_to_kernel_runtime(frame: FrameType | None) -> bool:
    """Whether a tensor export (``__dlpack__``) from ``frame`` is a backend's runtime wrapping
    the tensor for its kernels (CuTe DSL's ``from_dlpack``), not data leaving for numpy or
    another library to compute on: the nearest frame outside torch and this module belongs
    to a module the registry names as a backend's tensor hand-off."""

    caller = _caller_outside_torch(frame)
    module = caller.f_globals.get("__name__", "") if caller is not None else ""
    return any(module == p or module.startswith(p + ".") for p in tensor_handoff_modules())


# ----------------------------------------------------------------------------------------
# The modes
# ----------------------------------------------------------------------------------------


def _count(table: dict[str, int], name: str) -> None:
    table[name] = table.get(name, 0) + 1


def _function_name(func: Any) -> str | None:
    """The bare name of a torch-function-level callable (a method, or a property's getter)."""
    name = getattr(func, "__name__", None)
    if name == "__get__":  # a property / getset descriptor read: name it by its descriptor
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", None) or getattr(getattr(owner, "fget", None), "__name__", None)
    return name


def _tensors(tree: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


class _HostMade:
    """Storages (by address) that hold only host-made values: see "host arithmetic" above.

    Every op's results are re-marked, so an address reused by a later allocation never
    inherits the status of a freed host-made tensor."""

    def __init__(self) -> None:
        self.storages: set[int] = set()

    @staticmethod
    def _key(tensor: Any) -> int | None:
        """The storage's address; None for a tensor without ordinary storage (meta, sparse)."""
        import torch

        if tensor.layout != torch.strided or tensor.device.type == "meta":
            return None
        return tensor.untyped_storage().data_ptr()

    def holds(self, tensor: Any) -> bool:
        if tensor.numel() == 0:
            return True  # holds no values at all
        key = self._key(tensor)
        return key is not None and key in self.storages

    def mark(self, tensors: list[Any], host: bool) -> None:
        for tensor in tensors:
            key = self._key(tensor)
            if key is not None:
                (self.storages.add if host else self.storages.discard)(key)


def _host_arithmetic(base: str, inputs: list[Any], results: list[Any], host_made: _HostMade) -> bool:
    """Whether an op's results are host-made: a source of Python values, or an op (not random,
    not uninitialised) on host-made tensors only, every tensor small."""
    if base.startswith(_NOT_HOST) or any(t.numel() > HOST_ARITHMETIC_MAX_ELEMENTS for t in inputs + results):
        return False
    return base in _HOST_SOURCES or all(host_made.holds(t) for t in inputs)


def _make_modes(usage: TorchOpUsage):
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    library_depth = [0]  # torch-level library calls in progress (their ops are the library's)
    host_made = _HostMade()

    class _Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if dispatched_by_triton_interpreter(sys._getframe(1)):
                out = func(*args, **kwargs)
                host_made.mark(_tensors(out), host=False)  # the interpreter's copy-back of a kernel's work
                return out
            name = str(func)
            base = func.overloadpacket.__name__
            inputs = _tensors((args, kwargs))
            out = func(*args, **kwargs)
            results = _tensors(out)
            host = _host_arithmetic(base, inputs, results, host_made)
            host_made.mark(results, host)
            if is_allowed_aten_op(name):
                _count(usage.allowed_ops, name)
            elif library_depth[0] or base in LIBRARY_ATEN_OPS:
                _count(usage.compute_ops, name)
                _count(usage.library_ops, name)
            elif host:
                _count(usage.host_ops, name)
            else:
                _count(usage.compute_ops, name)
                largest = max((t.numel() for t in inputs + results), default=0)
                usage.touched[name] = usage.touched.get(name, 0) + largest
            if base == "_local_scalar_dense":
                usage.host_reads += 1
            return out

    class _Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = _function_name(func)
            caller = sys._getframe(1)
            if name in HOST_ESCAPES and not dispatched_by_triton_interpreter(caller) \
                    and not handed_to_kernel_runtime(caller):
                _count(usage.compute_ops, f"Tensor.{name}")
            if name not in LIBRARY_ATTRIBUTED_CALLS:
                return func(*args, **(kwargs or {}))
            library_depth[0] += 1
            try:
                return func(*args, **(kwargs or {}))
            finally:
                library_depth[0] -= 1

    return _Dispatch(), _Function()


@contextmanager
def record_torch_ops() -> Iterator[TorchOpUsage]:
    """Record every torch op dispatched on this thread inside the block (see the module docstring).

    The yielded :class:`TorchOpUsage` is complete when the block exits (it fills
    as ops run). Results are unchanged: every op is passed straight through.
    """
    usage = TorchOpUsage()
    dispatch_mode, function_mode = _make_modes(usage)
    with function_mode, dispatch_mode:
        yield usage
