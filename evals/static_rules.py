"""AST rules over a candidate's source: what a "Triton kernel" solution may not contain.

``check_candidate_source(source)`` parses the candidate (never regexes: an
``import`` alias, ``getattr(torch, "relu")`` or ``from torch import relu as k``
resolve to the same dotted name ``torch.relu`` here) and returns one
:class:`RuleViolation` per finding, each with a stable ``rule`` id, the line,
a one-line message naming ``file:line``, and the :class:`RejectionClass` it
maps to. An empty list means no rule fired. The rules (ids in :data:`RULES`):

Not a kernel (``NOT_A_KERNEL``):

* ``try-except`` — ``try`` anywhere (a fallback to PyTorch hides a failing
  kernel), ``contextlib.suppress``, and classes defining ``__exit__`` (a
  context manager that can swallow the kernel's exception).
* ``torch-math`` — a ``torch.*`` name, called or passed as a value, that is
  not on the allow list :data:`TORCH_ALLOWED` (allocation: ``empty*``,
  ``zeros*``, ``ones*``, ``full*``, ``arange``, ``tensor``; views/layout;
  dtypes; ``torch.cuda`` device queries; ``nn.Module``/``nn.Parameter``; see
  the list). So ``torch.relu``, ``torch.matmul``, every ``torch.nn.functional``
  name, ``torch.ops.*``, ``torch.compile``, ``torch.jit`` and
  ``torch.Tensor.<compute method>`` fire. Creating ``nn.Linear``/``nn.Conv*``
  (any ``torch.nn.<Class>``) is allowed; calling the instance is not (below).
* ``tensor-method`` — a call of ``.X(...)`` (or ``getattr(obj, "X")``, or
  ``.X`` handed on as a value) where ``X`` is a tensor compute method in
  :data:`COMPUTE_METHODS` (``sum``, ``mean``, ``exp``, ``matmul``, ``mm``,
  ``softmax``, ``index_add_``, ``scatter``, ``where``, ``add``/``mul``..., the
  arithmetic dunders, ``numpy``/``tolist``). Types are unknown statically, so
  receivers that are imported non-torch modules (``math.exp``), ``self``, and
  local lists/sets/dicts (``seen.add``) are exempt.
* ``tensor-operator`` — the ``@`` operator anywhere; arithmetic, unary and
  comparison operators and ``sum``/``abs``/``pow``/``min``/``max``/``round``
  builtins applied to a value known to hold a tensor (``forward``'s
  parameters, tensor-annotated parameters, ``nn.Parameter``/buffer
  attributes of ``self``, results of torch allocations and of view/cast
  methods on tensors, tracked in statement order, and across the
  candidate's own helpers: parameters that are passed tensors and helpers
  that return them, ``autograd.Function.apply`` included);
  ``operator.add`` & co.
* ``torch-module-call`` — calling an instance of a ``torch.nn`` class
  (``self.linear(x)`` for ``self.linear = nn.Linear(...)``, ``nn.ReLU()(x)``,
  ``self.layers[i](x)``, ``.forward(...)`` on one).
* ``torch-in-kernel`` — any ``torch`` name inside a ``@triton.jit`` function
  (under the CPU interpreter a kernel body is plain Python and could call
  torch; compiled for a GPU it cannot).
* ``compute-library`` — importing numpy, cupy, jax, scipy, numba, pycuda,
  cuda-python, tensorflow...: compute done outside the kernel.

Forbidden constructs (``FORBIDDEN_CONSTRUCT``):

* ``module-cache`` — module-level state written from a function: stores or
  mutating calls (``append``, ``update``, ``setdefault``, in-place tensor ops,
  ...) through a module-level name, attribute stores on module-level
  objects/classes/functions, class-level mutable attributes mutated through
  ``self``/the class, mutable default arguments that the function writes to
  (``def f(x, _cache={})``), and closure variables of a factory that
  outlives the call (``def make(): cache = {}; def run(x): cache[k] = ...``).
  Read-only module constants (ints, floats, tuples, even lists that nobody
  mutates) are fine.
* ``global-statement`` — ``global`` and ``nonlocal``.
* ``cache-decorator`` — ``functools.lru_cache``/``cache``/``cached_property``.
* ``instance-state`` — writing to ``self`` on the forward path (any method
  reachable from ``forward``/``__call__``, ``__init__`` excepted):
  ``self.calls += 1``, ``self._out = out``, ``self._memo[k] = v``,
  ``setattr(self, ...)``, ``self.register_buffer(...)``, in-place ops on
  ``self.X`` other than ``zero_``/``fill_``; also attributes stored on a
  tensor (``x._out = out``). Re-laying out an attribute in place
  (``self.w.data = self.w.data.contiguous()``) is allowed. State carried
  from one call to the next is how outputs get cached and how checks get
  told apart from timing.
* ``stream`` — ``torch.cuda.Stream``/``stream``/``ExternalStream``/
  ``set_stream``/``current_stream``/``default_stream``/``Event``/
  ``graph``/``CUDAGraph``, ``torch.Stream``/``Event``, and the
  ``record_stream``/``wait_stream``/``wait_event`` methods. Nothing
  stream-related is allowed (``torch.cuda.synchronize`` is not stream
  switching and is allowed).
* ``monkey-patch`` — assigning or deleting through an imported name
  (``torch.x = ...``, ``triton.testing.do_bench = ...``,
  ``Event.elapsed_time = ...`` after ``from torch.cuda import Event``), any
  store to a dunder attribute, ``setattr``/``delattr`` on anything but
  ``self``, touching ``builtins``.
* ``forbidden-import`` — importing os, sys, subprocess, socket, threading,
  multiprocessing, concurrent, asyncio, ctypes, cffi, signal, shutil,
  pathlib, io, builtins, importlib, pickle, gc, inspect, network clients,
  weakref, tempfile, kgen itself, ``__main__`` ... (:data:`FORBIDDEN_MODULES`),
  torch's own escape hatches (``torch.multiprocessing``,
  ``torch.utils.cpp_extension``, ``torch.distributed``, ``torch.library``,
  ...), and star imports (they hide which names are used).
* ``forbidden-call`` — ``open``, ``exec``, ``eval``, ``compile``,
  ``__import__``, ``globals``, ``vars``, ``locals``, ``breakpoint``, ``input``
  (called or not), ``getattr``/``hasattr`` with a computed name on anything
  but ``self`` (an f-string on a non-module object whose fixed prefix
  starts no compute name, ``getattr(lstm, f"weight_ih_l{i}")``, is allowed),
  ``getattr`` handed on as a value, ``operator.attrgetter`` /
  ``methodcaller``, torch's file and escape functions (``torch.load``,
  ``torch.save``, ``torch.hub``...), and stdlib modules reached through
  another module's attributes (``torch.os``, ``typing.sys``,
  ``dataclasses.builtins``).
* ``dunder-access`` — ``__dict__``, ``__globals__``, ``__builtins__``,
  ``__code__``, ``__subclasses__``, ``__getattribute__``, ``__wrapped__`` ...
  (:data:`DUNDER_DENY`), defining ``__torch_function__``/``__torch_dispatch__``.
* ``tensor-subclass`` — a class deriving from ``torch.Tensor`` or a torch
  function/dispatch mode.
* ``torch-private`` — any ``torch._*`` name (``torch._C``, ``torch._dynamo``,
  ...): the way around the dispatcher and around these rules (except
  ``nn.init._calculate_fan_in_and_fan_out``/``_calculate_correct_fan``,
  which KernelBench code copies from ``nn.Linear``).

Parse errors give one ``syntax-error`` violation (``LOAD_ERROR``). Code
under a module-level ``if __name__ == "__main__":`` is skipped (it never
runs when the candidate is imported), unless the module assigns
``__name__``.

Scope: the torch-math family (``torch-math``, ``tensor-method``,
``tensor-operator``, ``torch-module-call``) applies to the whole module
except the bodies of ``@triton.jit`` functions (``tl.*`` there *is* the
kernel) and code reachable only from ``__init__`` (parameter
initialisation such as ``nn.init.kaiming_uniform_`` or
``torch.randn(...) * 0.02`` is not on the forward path; the evaluation
loads the reference's weights afterwards anyway). Every other rule applies
everywhere.

``clone()`` is allowed: a copy does no math (the dynamic twin,
``kgen.evals.torch_usage``, classifies ``aten.clone`` as allowed too), and an
output that is merely a copy of an input still has to match the reference.

Known limits, covered by the dynamic checks: types are guessed, so tensor
arithmetic on a value the tracker lost (an element of a container, the
result of a method it does not know) is not seen here, nor an ``nn.Module``
reached indirectly (``next(self.children())(x)``);
``kgen.evals.torch_usage.record_torch_ops`` sees every aten op the forward
dispatches, however it was reached. Stateful references (BatchNorm in
training mode updating running statistics) trip ``instance-state``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pydantic import BaseModel

from kgen.evals.result import RejectionClass


class RuleViolation(BaseModel):
    rule: str
    line: int
    message: str
    rejection: RejectionClass


_NK = RejectionClass.NOT_A_KERNEL
_FC = RejectionClass.FORBIDDEN_CONSTRUCT

#: rule id -> (rejection class, what it forbids)
RULES: dict[str, tuple[RejectionClass, str]] = {
    "syntax-error": (RejectionClass.LOAD_ERROR, "the source does not parse"),
    "try-except": (_NK, "try/except (or suppress, or an exception-swallowing __exit__): a fallback hides a failing kernel"),
    "torch-math": (_NK, "a torch function that computes, called on or passed into the forward path"),
    "tensor-method": (_NK, "a tensor compute method (.sum(), .exp(), .matmul() ...)"),
    "tensor-operator": (_NK, "the @ operator, or arithmetic/comparison operators on tensors"),
    "torch-module-call": (_NK, "calling a torch.nn module (nn.Linear, nn.Conv2d ...) instead of a kernel"),
    "torch-in-kernel": (_NK, "torch used inside a @triton.jit function"),
    "compute-library": (_NK, "numpy/cupy/jax/numba/... imported: compute outside the kernel"),
    "module-cache": (_FC, "module- or class-level state written from a function (caching across calls)"),
    "global-statement": (_FC, "global/nonlocal statement (state kept across calls)"),
    "cache-decorator": (_FC, "functools.lru_cache/cache/cached_property (caching across calls)"),
    "instance-state": (_FC, "writing to self on the forward path (state kept across calls)"),
    "stream": (_FC, "stream/event/graph creation or switching"),
    "monkey-patch": (_FC, "assignment to an attribute of an imported module/object, setattr, builtins"),
    "forbidden-import": (_FC, "an import that escapes the sandbox (os, sys, subprocess, threading, network, ...)"),
    "forbidden-call": (_FC, "open/exec/eval/compile/__import__/globals/vars or a computed getattr"),
    "dunder-access": (_FC, "introspection dunders (__dict__, __globals__, __builtins__, ...)"),
    "tensor-subclass": (_FC, "a torch.Tensor subclass or torch function/dispatch mode"),
    "torch-private": (_FC, "a private torch name (torch._C, torch._dynamo, ...)"),
}

# ----------------------------------------------------------------------------------------
# Name lists
# ----------------------------------------------------------------------------------------

_DTYPES = (
    "float16 half bfloat16 float32 float float64 double int8 int16 short int32 int int64 long "
    "uint8 uint16 uint32 uint64 bool complex64 complex128 cfloat cdouble chalf complex32 "
    "float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 "
    "qint8 quint8 qint32"
).split()

#: tensor methods that allocate, view, cast, copy or read metadata (no math)
ALLOWED_METHODS: frozenset[str] = frozenset(
    (
        "contiguous view view_as reshape reshape_as flatten unflatten ravel unsqueeze squeeze permute "
        "transpose t expand expand_as stride size numel nelement dim ndimension is_contiguous data_ptr "
        "element_size storage_offset to float half bfloat16 double int long short bool byte char cuda "
        "cpu type type_as clone detach detach_ narrow select split tensor_split chunk unbind unfold "
        "movedim moveaxis swapaxes swapdims as_strided new_empty new_empty_strided new_zeros new_ones "
        "new_full new_tensor zero_ fill_ copy_ item get_device is_floating_point is_complex "
        "requires_grad_ untyped_storage dim_order is_pinned pin_memory diagonal view_as_real "
        "view_as_complex resize_ resize_as_"
    ).split()
)

#: torch.* dotted names that may be called or referenced anywhere
TORCH_ALLOWED: frozenset[str] = frozenset(
    [
        "torch", "torch.nn", "torch.cuda", "torch.autograd", "torch.version", "torch.version.cuda",
        "torch.version.hip", "torch.__version__",
        "torch.nn.Module", "torch.nn.Module.__init__", "torch.nn.Parameter", "torch.nn.Buffer",
        "torch.nn.ParameterList", "torch.nn.ParameterDict", "torch.nn.ModuleList", "torch.nn.ModuleDict",
        "torch.autograd.Function", "torch.autograd.function", "torch.autograd.function.FunctionCtx",
        "torch.autograd.function.once_differentiable",
        "torch.Tensor", "torch.Size", "torch.device", "torch.dtype", "torch.layout", "torch.memory_format",
        "torch.finfo", "torch.iinfo", "torch.is_tensor", "torch.is_floating_point", "torch.is_complex",
        "torch.numel", "torch.get_default_dtype", "torch.get_default_device", "torch.promote_types",
        "torch.result_type", "torch.can_cast", "torch.broadcast_shapes",
        "torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.set_grad_enabled",
        "torch.is_grad_enabled",
        # allocation
        "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like",
        "torch.ones", "torch.ones_like", "torch.full", "torch.full_like", "torch.arange",
        "torch.tensor", "torch.as_tensor",
        # views and layout
        "torch.reshape", "torch.flatten", "torch.unflatten", "torch.unsqueeze", "torch.squeeze",
        "torch.permute", "torch.transpose", "torch.t", "torch.narrow", "torch.select", "torch.split",
        "torch.tensor_split", "torch.chunk", "torch.unbind", "torch.movedim", "torch.moveaxis",
        "torch.swapaxes", "torch.swapdims", "torch.as_strided", "torch.broadcast_to", "torch.clone",
        "torch.detach", "torch.view_as_real", "torch.view_as_complex",
        "torch.contiguous_format", "torch.channels_last", "torch.channels_last_3d",
        "torch.preserve_format", "torch.strided",
        # device queries
        "torch.cuda.get_device_properties", "torch.cuda.current_device", "torch.cuda.device_count",
        "torch.cuda.is_available", "torch.cuda.get_device_capability", "torch.cuda.get_device_name",
        "torch.cuda.synchronize", "torch.cuda.device", "torch.cuda.set_device", "torch.cuda.nvtx",
        "torch.cuda.nvtx.range_push", "torch.cuda.nvtx.range_pop", "torch.cuda.nvtx.range",
    ]
    + [f"torch.{d}" for d in _DTYPES]
    + [f"torch.Tensor.{m}" for m in ALLOWED_METHODS]
)

#: torch.nn classes that hold parameters or modules and are not called on data
_NN_NOT_CALLABLE = frozenset({"Parameter", "Buffer", "ParameterList", "ParameterDict", "Module"})

_COMPUTE_METHOD_NAMES = """
abs absolute acos arccos acosh arccosh add addbmm addcdiv addcmul addmm addmv addr all allclose amax
amin aminmax angle any apply_ argmax argmin argsort argwhere asin arcsin asinh arcsinh atan arctan
atan2 arctan2 atanh arctanh baddbmm bernoulli bincount bitwise_and bitwise_not bitwise_or bitwise_xor
bitwise_left_shift bitwise_right_shift bmm bucketize cauchy ceil cholesky clamp clamp_max clamp_min
clip conj_physical copysign corrcoef cos cosh count_nonzero cov cross cummax cummin cumprod cumsum
cumulative_trapezoid deg2rad diag diag_embed diff digamma dist div divide dot eq equal erf erfc erfinv
exp exp2 expm1 exponential fix float_power floor floor_divide fmax fmin fmod frac frexp gather gcd ge
geometric ger greater greater_equal gt heaviside histc histogram hypot i0 igamma igammac index_add
index_copy index_fill index_put index_reduce index_select inner inverse isclose isfinite isinf isnan
isneginf isposinf isreal kron kthvalue lcm ldexp le lerp less less_equal lgamma log log10 log1p log2
log_normal logaddexp logaddexp2 logcumsumexp logdet logical_and logical_not logical_or logical_xor
logit logsumexp lt lu map_ masked_fill masked_scatter masked_select matmul matrix_exp matrix_power
max maximum mean median min minimum mm mode msort mul multinomial multiply mv mvlgamma nan_to_num
nanmean nanmedian nanquantile nansum narrow_copy ne neg negative nextafter nonzero norm not_equal
outer pinverse polygamma positive pow prod put quantile rad2deg random reciprocal relu remainder
renorm repeat repeat_interleave roll rot90 round rsqrt scatter scatter_add scatter_reduce sgn sigmoid
sign signbit sin sinc sinh slogdet softmax log_softmax sort sqrt square std sub subtract sum
sum_to_size svd take take_along_dim tan tanh tile topk trace tril triu true_divide trunc unique
unique_consecutive var vdot where xlogy flip fliplr flipud searchsorted
gelu silu mish elu selu celu leaky_relu hardtanh hardswish hardsigmoid relu6 prelu rrelu glu
logsigmoid softsign softmin softshrink hardshrink tanhshrink threshold softplus linear bilinear
conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d layer_norm rms_norm
group_norm batch_norm instance_norm local_response_norm normalize dropout embedding embedding_bag
one_hot pad interpolate grid_sample avg_pool1d avg_pool2d avg_pool3d max_pool1d max_pool2d max_pool3d
adaptive_avg_pool1d adaptive_avg_pool2d adaptive_max_pool1d adaptive_max_pool2d cross_entropy
nll_loss mse_loss l1_loss smooth_l1_loss huber_loss kl_div binary_cross_entropy
binary_cross_entropy_with_logits cosine_similarity pairwise_distance cdist pdist
scaled_dot_product_attention einsum tensordot chain_matmul cat concat concatenate stack hstack vstack
dstack cartesian_prod segment_reduce
numpy tolist
__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ __matmul__
__rmatmul__ __imatmul__ __truediv__ __rtruediv__ __itruediv__ __floordiv__ __rfloordiv__
__ifloordiv__ __mod__ __rmod__ __imod__ __pow__ __rpow__ __ipow__ __neg__ __pos__ __abs__
__invert__ __and__ __rand__ __iand__ __or__ __ror__ __ior__ __xor__ __rxor__ __ixor__ __lshift__
__rlshift__ __ilshift__ __rshift__ __rrshift__ __irshift__ __lt__ __le__ __gt__ __ge__ __eq__ __ne__
__round__ __floor__ __ceil__ __trunc__ __array__ __dlpack__
"""
#: tensor / torch.nn.functional compute names (in-place "X_" variants are covered through "X")
COMPUTE_METHODS: frozenset[str] = frozenset(_COMPUTE_METHOD_NAMES.split())

_HOST_ESCAPES = frozenset({"numpy", "tolist", "__array__", "__dlpack__"})
#: deny-listed names that are also common plain attributes (finfo.max): flagged only when called
_ATTRIBUTE_LOOKALIKES = frozenset({"max", "min", "mode"})
#: deny-listed names that are also methods of Python's own containers (set.add, list.sort)
_CONTAINER_METHODS = frozenset({"add", "sort"})

#: top-level modules whose import escapes the sandbox or carries state out of a call
FORBIDDEN_MODULES: frozenset[str] = frozenset(
    """
    os posix nt sys subprocess socket socketserver ssl select selectors threading _thread
    multiprocessing concurrent asyncio ctypes cffi signal shutil pathlib io builtins importlib
    pkgutil zipimport runpy code codeop pdb bdb pickle cPickle _pickle marshal shelve dbm dill
    cloudpickle copyreg gc inspect tempfile glob fileinput mmap pty tty fcntl resource sysconfig site
    atexit sched weakref sqlite3 zipfile tarfile webbrowser requests urllib urllib3 http httpx aiohttp
    ftplib smtplib telnetlib xmlrpc wsgiref email mailbox imaplib poplib websocket websockets grpc
    paramiko psutil faulthandler tracemalloc trace sys_monitoring kgen __main__ pytest
    """.split()
)
#: stdlib modules that other modules re-export (torch.os, typing.sys, dataclasses.builtins):
#: reaching one through an attribute chain is as good as importing it
_ESCAPE_SEGMENTS = frozenset(
    """
    os sys subprocess builtins importlib threading _thread multiprocessing inspect gc ctypes socket
    shutil pickle io pathlib asyncio concurrent tempfile weakref marshal runpy pty
    """.split()
)
#: dotted torch/triton modules that are escape hatches (compiled extensions, processes, files)
FORBIDDEN_SUBMODULES: tuple[str, ...] = (
    "torch.multiprocessing", "torch.utils.cpp_extension", "torch.distributed", "torch.library",
    "torch.hub", "torch.utils.data", "torch.utils.dlpack", "torch.utils.benchmark", "torch.overrides",
    "torch.cuda.streams", "torch.cuda.graphs", "torch.profiler", "torch.package", "torch.serialization",
    "torch.fx", "torch.export", "triton.runtime.interpreter",
)
#: private torch helpers KernelBench code copies from nn.Linear/nn.Conv (shape arithmetic only)
_TORCH_PRIVATE_OK = frozenset(
    {"torch.nn.init._calculate_fan_in_and_fan_out", "torch.nn.init._calculate_correct_fan"}
)
#: torch functions that read/write files or spawn work: forbidden-call rather than torch-math
_TORCH_ESCAPE_CALLS = frozenset(
    {"torch.load", "torch.save", "torch.from_file", "torch.ops.load_library", "torch.set_default_device"}
)
#: libraries that compute outside the kernel
COMPUTE_LIBRARIES: frozenset[str] = frozenset(
    "numpy cupy jax jaxlib scipy numba pycuda tensorflow mlx tvm pandas sklearn".split()
)

#: builtins that run code, touch files or expose namespaces
FORBIDDEN_BUILTINS: frozenset[str] = frozenset(
    {"open", "exec", "eval", "compile", "__import__", "globals", "vars", "locals", "breakpoint", "input"}
)

#: attribute names that open a way around the rules (introspection, unwrapping, namespaces)
DUNDER_DENY: frozenset[str] = frozenset(
    """
    __dict__ __globals__ __builtins__ __code__ __closure__ __subclasses__ __bases__ __mro__ __base__
    __getattribute__ __getattr__ __setattr__ __delattr__ __import__ __loader__ __spec__ __reduce__
    __reduce_ex__ __wrapped__ __defaults__ __kwdefaults__ __torch_function__ __torch_dispatch__
    __array_interface__ __cuda_array_interface__ __self__ __func__ __set__ __get__ __delete__
    __init_subclass__ __class_getitem__ __new__ __setitem__ __delitem__
    """.split()
)

#: tensor-stream names under torch (any torch.*.<name> with one of these segments)
_STREAM_SEGMENTS = frozenset(
    {
        "Stream", "stream", "ExternalStream", "StreamContext", "set_stream", "current_stream",
        "default_stream", "Event", "graph", "CUDAGraph", "graphs", "streams",
        "make_graphed_callables", "graph_pool_handle",
    }
)
_STREAM_METHODS = frozenset({"record_stream", "wait_stream", "wait_event", "record_event"})

_CACHE_DECORATORS = frozenset(
    {"functools.lru_cache", "functools.cache", "functools.cached_property", "functools._lru_cache_wrapper"}
)

#: calls that build a mutable container
_MUTABLE_FACTORIES = frozenset(
    {
        "dict", "list", "set", "bytearray", "collections.OrderedDict", "collections.defaultdict",
        "collections.deque", "collections.Counter", "collections.ChainMap", "types.SimpleNamespace",
        "OrderedDict", "defaultdict", "deque", "Counter", "ChainMap", "SimpleNamespace", "object",
    }
)
#: methods that mutate a container
_MUTATORS = frozenset(
    {
        "append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear", "remove",
        "discard", "appendleft", "extendleft", "popleft", "move_to_end", "__setitem__", "__delitem__",
        "sort", "reverse", "register_buffer", "register_parameter", "add_module",
        "register_module", "set_",
    }
)

_TENSOR_ALLOC = frozenset(
    {
        "torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like",
        "torch.ones", "torch.ones_like", "torch.full", "torch.full_like", "torch.arange", "torch.tensor",
        "torch.as_tensor", "torch.reshape", "torch.flatten", "torch.unsqueeze", "torch.squeeze",
        "torch.permute", "torch.transpose", "torch.t", "torch.narrow", "torch.select", "torch.clone",
        "torch.as_strided", "torch.broadcast_to", "torch.movedim", "torch.detach",
    }
)
_TENSOR_SEQUENCE_METHODS = frozenset({"split", "chunk", "unbind", "tensor_split"})
_TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad"})
_TENSOR_BUILTINS = frozenset({"abs", "sum", "pow", "round", "divmod", "min", "max", "sorted", "all", "any"})
_NON_TENSOR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "bytes", "complex", "tuple", "list", "dict"})
_ARITH_CMP = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)

_OPERATOR_ARITH = frozenset(
    """
    abs add and_ concat floordiv iadd iand iconcat ifloordiv ilshift imatmul imod imul inv invert
    ior ipow irshift isub itruediv ixor lshift matmul mod mul neg or_ pos pow rshift sub truediv xor
    lt le gt ge eq ne __abs__ __add__ __mul__ __matmul__ __sub__ __truediv__ __neg__ __pow__
    """.split()
)
_OPERATOR_INDIRECT = frozenset({"attrgetter", "methodcaller", "call"})

# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------


def _parent(node: ast.AST) -> ast.AST | None:
    return getattr(node, "_kgen_parent", None)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _literal_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _is_getattr_literal(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) == 2
        and not node.keywords
        and _literal_str(node.args[1]) is not None
    )


def _root_name(node: ast.AST) -> ast.Name | None:
    """The Name at the bottom of an attribute/subscript/call chain (``a`` in ``a.b[c].d()``)."""
    while True:
        if isinstance(node, ast.Name):
            return node
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


def _relayout_of(value: ast.AST, target: ast.AST) -> bool:
    """Whether ``value`` is ``target`` (e.g. ``self.w.data``) passed through view/cast/copy methods only."""
    text = ast.dump(target, include_attributes=False).replace("ctx=Store()", "ctx=Load()")
    seen_method = False
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr not in ALLOWED_METHODS:
            return False
        seen_method = True
        value = value.func.value
    return seen_method and ast.dump(value, include_attributes=False) == text


def _is_main_test(test: ast.AST) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _self_attr_root(node: ast.AST) -> bool:
    """Whether ``node`` is ``self.X...`` (an attribute/subscript chain whose root is ``self``)."""
    root = _root_name(node)
    return root is not None and root.id == "self" and node is not root


def _mutable_value(node: ast.AST, resolve) -> bool:
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        name = resolve(node.func)
        if name is None and isinstance(node.func, ast.Name):
            name = node.func.id
        return name in _MUTABLE_FACTORIES
    return False


def _walk_own(node: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function body, not descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(child))


def _params(fn: ast.AST) -> list[ast.arg]:
    args = fn.args  # type: ignore[attr-defined]
    out = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if args.vararg:
        out.append(args.vararg)
    if args.kwarg:
        out.append(args.kwarg)
    return out


def _assignment_targets(node: ast.AST) -> list[ast.AST]:
    """What an assignment, augmented assignment or ``del`` statement stores into."""
    if isinstance(node, (ast.Assign, ast.Delete)):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _target_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _local_names(fn: ast.AST) -> set[str]:
    """Names a function binds locally (parameters, assignments, loop/with/except targets, imports)."""
    names = {a.arg for a in _params(fn)}
    declared_global: set[str] = set()
    for node in _walk_own(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared_global.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names - declared_global


@dataclass
class _ClassInfo:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    mutable_attrs: set[str] = field(default_factory=set)


# ----------------------------------------------------------------------------------------
# The checker
# ----------------------------------------------------------------------------------------


class _Checker:
    def __init__(self, tree: ast.Module, filename: str):
        self.tree = tree
        self.filename = filename
        self.violations: list[RuleViolation] = []
        self._seen: set[tuple[str, int, str]] = set()
        self.nodes: list[ast.AST] = list(ast.walk(tree))
        self.functions = [n for n in self.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        for node in self.nodes:
            for child in ast.iter_child_nodes(node):
                child._kgen_parent = node  # type: ignore[attr-defined]
        self.bindings: dict[str, str] = {}  # local name -> dotted path it was imported as / aliases
        self.imported: set[str] = set()  # names bound by import statements
        self.module_names: dict[str, str] = {}  # module-level name -> "mutable"/"value"/"def"/"class"
        self.classes: dict[str, _ClassInfo] = {}
        self.jit_functions: set[ast.AST] = set()
        self.nn_instances: set[str] = set()  # names / self-attributes holding torch.nn modules
        self.self_tensors: set[str] = set()  # "self.X" assigned a Parameter / buffer / allocation
        self.returns_tensor: set[ast.AST] = set()  # functions seen returning a tensor
        self.tensor_params: dict[ast.AST, set[str]] = {}  # function -> parameters passed tensors
        self.owner: dict[ast.AST, _ClassInfo | None] = {}  # function -> class it is a method of
        self.forward_path: set[ast.AST] = set()
        self.init_only: set[ast.AST] = set()
        self.enclosing: dict[ast.AST, ast.AST | None] = {}  # node -> innermost enclosing function
        self.never_run: set[ast.AST] = self._main_guard_nodes()
        self._locals_cache: dict[ast.AST, set[str]] = {}

    def _main_guard_nodes(self) -> set[ast.AST]:
        """Nodes under a module-level ``if __name__ == "__main__":``, which never runs when imported.

        Only when nothing in the module assigns ``__name__`` (which would make the block run).
        """
        for node in self.nodes:
            if isinstance(node, ast.Name) and node.id == "__name__" and not isinstance(node.ctx, ast.Load):
                return set()
        out: set[ast.AST] = set()
        for stmt in self.tree.body:
            if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
                for child in stmt.body:
                    out.update(ast.walk(child))
        return out

    # -- reporting -------------------------------------------------------------------
    def report(self, rule: str, node: ast.AST, text: str) -> None:
        if node in self.never_run:
            return
        line = getattr(node, "lineno", 0) or 0
        message = f"{self.filename}:{line}: {text}"
        key = (rule, line, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.violations.append(
            RuleViolation(rule=rule, line=line, message=message, rejection=RULES[rule][0])
        )

    # -- name resolution ---------------------------------------------------------------
    def resolve(self, node: ast.AST | None) -> str | None:
        """Dotted name of a Name/Attribute/getattr-literal chain rooted at an import, else None."""
        if isinstance(node, ast.Name):
            return self.bindings.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if node is not None and _is_getattr_literal(node):
            base = self.resolve(node.args[0])  # type: ignore[attr-defined]
            return f"{base}.{_literal_str(node.args[1])}" if base else None  # type: ignore[attr-defined]
        return None

    def _collect_bindings(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.bindings[alias.asname] = alias.name
                        self.imported.add(alias.asname)
                    else:
                        top = alias.name.split(".")[0]
                        self.bindings[top] = top
                        self.imported.add(top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    local = alias.asname or alias.name
                    self.bindings[local] = f"{node.module}.{alias.name}"
                    self.imported.add(local)
        # simple aliases: name = <resolvable chain>, to a fixed point
        for _ in range(4):
            changed = False
            for node in self.nodes:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    chain = self.resolve(node.value)
                    if chain is None:
                        continue
                    for target in targets:
                        if isinstance(target, ast.Name) and self.bindings.get(target.id) != chain:
                            self.bindings[target.id] = chain
                            changed = True
            if not changed:
                break

    def _collect_structure(self) -> None:
        for stmt in self._module_statements():
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                kind = "mutable" if stmt.value is not None and _mutable_value(stmt.value, self.resolve) else "value"
                for target in targets:
                    for name in _target_names(target):
                        if name not in self.imported:
                            self.module_names[name] = kind
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.module_names[stmt.name] = "def"
            elif isinstance(stmt, ast.ClassDef):
                self.module_names[stmt.name] = "class"
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                info = _ClassInfo(node)
                self.classes.setdefault(node.name, info)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        info.methods[item.name] = item
                        self.owner[item] = info
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None:
                        if _mutable_value(item.value, self.resolve):
                            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                            for target in targets:
                                info.mutable_attrs.update(_target_names(target))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._is_jit(node):
                self.jit_functions.add(node)
            # kernel = triton.jit(py_fn)
            if isinstance(node, ast.Call) and self.resolve(node.func) in ("triton.jit", "triton.language.jit"):
                for arg in node.args:
                    if isinstance(arg, ast.Name):
                        for fn in self.nodes:
                            if isinstance(fn, ast.FunctionDef) and fn.name == arg.id:
                                self.jit_functions.add(fn)
        # torch.nn module instances: x = nn.Linear(...), self.fc = nn.Linear(...)
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                if not self._is_nn_class(node.value.func):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                in_class_body = isinstance(_parent(node), ast.ClassDef)
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.nn_instances.add(target.id)
                        if in_class_body:
                            self.nn_instances.add(f"self.{target.id}")
                    elif isinstance(target, ast.Attribute) and _is_self(target.value):
                        self.nn_instances.add(f"self.{target.attr}")
        for node in self.nodes:
            # for layer in self.layers: layer(x)
            if isinstance(node, (ast.For, ast.comprehension)) and self._is_nn_holder(node.iter):
                self.nn_instances.update(_target_names(node.target))
            # self.weight = nn.Parameter(...), self.buf = torch.empty(...), self.register_buffer("buf", ...)
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                name = self.resolve(node.value.func)
                if name in _TENSOR_ALLOC or name in ("torch.nn.Parameter", "torch.nn.Buffer"):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Attribute) and _is_self(target.value):
                            self.self_tensors.add(f"self.{target.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("register_buffer", "register_parameter")
                and _is_self(node.func.value)
                and node.args
                and _literal_str(node.args[0])
            ):
                self.self_tensors.add(f"self.{_literal_str(node.args[0])}")
        # enclosing function of every node
        self._set_enclosing(self.tree, None)

    def _is_nn_holder(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.nn_instances
        if isinstance(node, ast.Attribute) and _is_self(node.value):
            return f"self.{node.attr}" in self.nn_instances
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("children", "modules", "values"):
            return self._is_nn_holder(node.func.value)
        return False

    def _set_enclosing(self, node: ast.AST, fn: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            self.enclosing[child] = fn
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else fn
            self._set_enclosing(child, inner)

    def _module_statements(self) -> Iterator[ast.stmt]:
        stack = list(self.tree.body)
        while stack:
            stmt = stack.pop(0)
            yield stmt
            if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                for name in ("body", "orelse", "finalbody"):
                    stack.extend(getattr(stmt, name, []) or [])
                for handler in getattr(stmt, "handlers", []) or []:
                    stack.extend(handler.body)

    def _is_jit(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self.resolve(target) in ("triton.jit", "triton.language.jit", "triton.runtime.jit.jit"):
                return True
        return False

    def _is_nn_class(self, func: ast.AST) -> bool:
        name = self.resolve(func)
        if not name or not name.startswith("torch.nn."):
            return False
        parts = name.split(".")
        return len(parts) >= 3 and parts[-1][:1].isupper() and parts[-1] not in _NN_NOT_CALLABLE

    # -- reachability ------------------------------------------------------------------
    def _function_of(self, node: ast.AST) -> ast.AST | None:
        """The outermost function or method (module-level def or class method) containing node."""
        is_fn = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        fn = node if is_fn else self.enclosing.get(node)
        outer = None
        while fn is not None:
            outer = fn
            fn = self.enclosing.get(fn)
        return outer

    def _callees(self, fn: ast.AST) -> set[ast.AST]:
        out: set[ast.AST] = set()
        cls = self.owner.get(fn)
        module_defs = self._module_defs
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in module_defs:
                    out.add(module_defs[node.id])
                elif node.id in self.classes and self.module_names.get(node.id) == "class":
                    out.update(self.classes[node.id].methods.values())
            elif isinstance(node, ast.Attribute) and _is_self(node.value) and cls is not None:
                if node.attr in cls.methods:
                    out.add(cls.methods[node.attr])
        return out

    def _reach(self, roots: Iterable[ast.AST]) -> set[ast.AST]:
        seen: set[ast.AST] = set()
        stack = list(roots)
        while stack:
            fn = stack.pop()
            if fn in seen:
                continue
            seen.add(fn)
            stack.extend(self._callees(fn))
        return seen

    def _compute_paths(self) -> None:
        self._module_defs = {
            s.name: s for s in self.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        forward_roots, init_roots = [], []
        for info in self.classes.values():
            for name, method in info.methods.items():
                if name in ("forward", "__call__", "backward"):
                    forward_roots.append(method)
                elif name == "__init__":
                    init_roots.append(method)
        self.forward_path = self._reach(forward_roots)
        self.init_only = self._reach(init_roots) - self.forward_path

    def _in_jit(self, node: ast.AST) -> bool:
        fn = self.enclosing.get(node)
        while fn is not None:
            if fn in self.jit_functions:
                return True
            fn = self.enclosing.get(fn)
        return node in self.jit_functions

    def _math_exempt(self, node: ast.AST) -> bool:
        """True where the torch-math family does not apply: kernels and __init__-only code."""
        return self._in_jit(node) or self._function_of(node) in self.init_only

    # -- main ----------------------------------------------------------------------------
    def run(self) -> list[RuleViolation]:
        self._collect_bindings()
        self._collect_structure()
        self._compute_paths()
        for node in self.nodes:
            self._check_node(node)
        self._check_module_state()
        self._check_instance_state()
        flows = [
            fn
            for fn in self.functions
            if not isinstance(fn, ast.Lambda) and not self._math_exempt(fn) and fn not in self.jit_functions
        ]
        # which helpers take and return tensors (out = triton_relu(x); out * 2): a fixed point, silently
        for _ in range(6):
            before = (set(self.returns_tensor), {k: set(v) for k, v in self.tensor_params.items()})
            for fn in flows:
                _TensorFlow(self, fn, silent=True).run()
            if (self.returns_tensor, self.tensor_params) == before:
                break
        for fn in flows:
            _TensorFlow(self, fn).run()
        self.violations.sort(key=lambda v: (v.line, v.rule))
        return self.violations

    def _check_node(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            kind = "try/except" if getattr(node, "handlers", None) else "try/finally"
            self.report("try-except", node, f"{kind} in a candidate: a fallback can hide a failing kernel; let errors surface")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self._check_import(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            word = "global" if isinstance(node, ast.Global) else "nonlocal"
            self.report("global-statement", node, f"`{word} {', '.join(node.names)}` keeps state across calls")
        elif isinstance(node, ast.ClassDef):
            self._check_class(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._check_function_def(node)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and not self._math_exempt(node):
            self.report("tensor-operator", node, "the @ operator is a torch matmul, not a Triton kernel")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult) and not self._math_exempt(node):
                self.report("tensor-operator", node, "the @= operator is a torch matmul, not a Triton kernel")
            self._check_store(node)
        elif isinstance(node, ast.Call):
            self._check_call(node)
        if isinstance(node, (ast.Name, ast.Attribute)) or _is_getattr_literal(node):
            self._check_chain(node)

    # -- individual rules ----------------------------------------------------------------
    def _check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif node.module and not node.level:
            if any(a.name == "*" for a in node.names):
                self.report("forbidden-import", node, f"`from {node.module} import *` hides which names the candidate uses")
                return
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for module in modules:
            top = module.split(".")[0]
            if top in FORBIDDEN_MODULES:
                self.report("forbidden-import", node, f"import of `{module}` is not allowed in a candidate (sandbox escape / state)")
                return
            if top in COMPUTE_LIBRARIES:
                self.report("compute-library", node, f"import of `{module}`: compute outside a Triton kernel")
                return
            if any(module == p or module.startswith(p + ".") for p in FORBIDDEN_SUBMODULES):
                self.report("forbidden-import", node, f"import of `{module}` is not allowed in a candidate")
                return
            if top == "torch" and any(part.startswith("_") and not _is_dunder(part) for part in module.split(".")):
                self.report("torch-private", node, f"import of private `{module}`")
                return
            if module in _CACHE_DECORATORS:
                self.report("cache-decorator", node, f"`{module}` caches results across calls")
                return

    def _check_class(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.resolve(base) or ""
            if name in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase") or name.startswith(
                ("torch.overrides.", "torch.utils._python_dispatch.")
            ):
                self.report("tensor-subclass", node, f"class {node.name} derives from {name}")
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if item.name in ("__torch_function__", "__torch_dispatch__"):
                    self.report("dunder-access", item, f"{node.name} defines {item.name}: it would intercept torch calls")
                elif item.name in ("__exit__", "__aexit__"):
                    self.report("try-except", item, f"{node.name} defines {item.name}: a context manager can swallow a kernel's exception")

    def _check_function_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            if _mutable_value(default, self.resolve) and self._mutated_in(node, arg.arg):
                self.report(
                    "module-cache", default,
                    f"mutable default argument `{arg.arg}` of {node.name}() is written to: it persists across calls",
                )

    def _mutated_in(self, fn: ast.AST, name: str) -> bool:
        """Whether ``name`` is stored into (``name[k] = v``, ``name.a = v``) or mutated by a method call."""
        for node in ast.walk(fn):
            targets = _assignment_targets(node)
            for target in targets:
                for sub in self._store_targets(target):
                    root = _root_name(sub)
                    if isinstance(sub, (ast.Attribute, ast.Subscript)) and root is not None and root.id == name:
                        return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                method = node.func.attr
                root = _root_name(node.func.value)
                if root is not None and root.id == name and (
                    method in _MUTATORS or (method.endswith("_") and not method.endswith("__"))
                ):
                    return True
        return False

    def _check_store(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> None:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.Delete):
            targets = node.targets
        else:
            targets = [node.target]
        for target in targets:
            for sub in self._store_targets(target):
                if not isinstance(sub, (ast.Attribute, ast.Subscript)):
                    continue
                if isinstance(sub, ast.Attribute) and _is_dunder(sub.attr):
                    self.report("monkey-patch", node, f"assignment to dunder attribute `{sub.attr}`")
                    continue
                root = _root_name(sub)
                if root is None:
                    continue
                if root.id in ("__builtins__", "builtins"):
                    self.report("monkey-patch", node, "modifies builtins")
                elif root.id in self.imported or (root.id in self.bindings and root.id not in self._locals_at(node)):
                    where = self.resolve(sub.value) if isinstance(sub, ast.Attribute) else self.resolve(root)
                    shown = f"{where}.{sub.attr}" if isinstance(sub, ast.Attribute) and where else (where or root.id)
                    self.report("monkey-patch", node, f"assignment to `{shown}` patches an imported module or object")

    def _store_targets(self, target: ast.AST) -> Iterator[ast.AST]:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                yield from self._store_targets(elt)
        elif isinstance(target, ast.Starred):
            yield from self._store_targets(target.value)
        else:
            yield target

    def _locals_at(self, node: ast.AST) -> set[str]:
        fn = self.enclosing.get(node)
        return self._locals_of(fn) if fn is not None else set()

    def _locals_of(self, fn: ast.AST) -> set[str]:
        found = self._locals_cache.get(fn)
        if found is None:
            found = self._locals_cache[fn] = _local_names(fn)
        return found

    def _check_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id not in self.bindings:
            name = func.id
            if name in ("getattr", "hasattr") and node.args:
                attr = node.args[1] if len(node.args) > 1 else None
                literal = _literal_str(attr)
                if literal is None and not _is_self(node.args[0]) and not self._harmless_computed_name(node.args[0], attr):
                    self.report("forbidden-call", node, f"{name}() with a computed attribute name")
                elif literal is not None and _is_dunder(literal) and literal in DUNDER_DENY:
                    self.report("dunder-access", node, f"{name}(..., {literal!r})")
                elif (
                    literal is not None
                    and name == "getattr"
                    and self._compute_method(literal)
                    and not self._exempt_receiver(node.args[0])
                    and self.resolve(node.args[0]) is None
                    and not self._math_exempt(node)
                ):
                    self.report("tensor-method", node, f"getattr(..., {literal!r}) reaches a tensor compute method")
            elif name in ("setattr", "delattr") and node.args:
                if not _is_self(node.args[0]):
                    self.report("monkey-patch", node, f"{name}() on something other than self")
        if isinstance(func, ast.Attribute):
            if func.attr in _STREAM_METHODS:
                self.report("stream", node, f".{func.attr}() synchronises with another stream")
        # calling a torch.nn module instance
        if not self._math_exempt(node) and self._calls_nn_module(func):
            self.report("torch-module-call", node, f"`{ast.unparse(func)}(...)` runs a torch.nn module, not a Triton kernel")

    def _harmless_computed_name(self, receiver: ast.AST, attr: ast.AST | None) -> bool:
        """getattr(lstm, f"weight_ih_l{i}"): an f-string whose fixed prefix names no compute or dunder.

        The receiver must not be an imported module or object (getattr(torch, f"...") stays
        forbidden), and no name the rules care about may start with the fixed prefix.
        """
        if not isinstance(attr, ast.JoinedStr) or not attr.values or self.resolve(receiver) is not None:
            return False
        first = attr.values[0]
        prefix = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
        if len(prefix) < 3 or prefix.startswith("_"):
            return False
        names = COMPUTE_METHODS | _STREAM_METHODS | _MUTATORS | {"forward", "apply", "register_buffer"}
        return not any(name.startswith(prefix) or prefix.startswith(name) for name in names)

    def _calls_nn_module(self, func: ast.AST) -> bool:
        if isinstance(func, ast.Call) and self._is_nn_class(func.func):
            return True  # nn.ReLU()(x)
        if isinstance(func, ast.Attribute) and func.attr in ("forward", "__call__"):
            func = func.value
        while isinstance(func, ast.Subscript):  # self.layers[0](x)
            func = func.value
        if isinstance(func, ast.Name):
            return func.id in self.nn_instances
        if isinstance(func, ast.Attribute) and _is_self(func.value):
            return f"self.{func.attr}" in self.nn_instances
        return False

    def _compute_method(self, name: str) -> bool:
        if name in COMPUTE_METHODS:
            return True
        return name.endswith("_") and not name.endswith("__") and name[:-1] in COMPUTE_METHODS

    def _exempt_receiver(self, receiver: ast.AST) -> bool:
        if _is_self(receiver):
            return True
        if isinstance(receiver, ast.Name) and self.module_names.get(receiver.id) in ("def", "class"):
            return True
        name = self.resolve(receiver)
        return name is not None and not name.startswith("torch")

    def _check_chain(self, node: ast.AST) -> None:
        parent = _parent(node)
        if isinstance(node, ast.Attribute) and node.attr in DUNDER_DENY and isinstance(node.ctx, ast.Load):
            self.report("dunder-access", node, f"`.{node.attr}` opens a way around the rules")
        # only maximal chains: not the .value of a longer attribute chain or getattr literal
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if self.resolve(parent) is not None:
                return
        if _is_getattr_literal(parent) and parent.args[0] is node:  # type: ignore[union-attr]
            return
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                return
            self._check_name(node)
        elif isinstance(node, ast.Attribute):
            if not isinstance(node.ctx, ast.Load):
                return
            if node.attr in _STREAM_METHODS:
                return  # reported at the call
            if self.resolve(node) is None:
                self._check_method_reference(node, parent)
                return
        chain = self.resolve(node)
        if chain is None:
            return
        self._check_dotted(node, chain, parent)

    def _bound_locally(self, node: ast.AST, name: str) -> bool:
        fn = self.enclosing.get(node)
        while fn is not None:
            if name in self._locals_of(fn):
                return True
            fn = self.enclosing.get(fn)
        return name in self.bindings or name in self.module_names

    def _check_name(self, node: ast.Name) -> None:
        if node.id in ("__builtins__", "__loader__", "__spec__"):
            self.report("dunder-access", node, f"`{node.id}`")
        elif node.id in FORBIDDEN_BUILTINS and not self._bound_locally(node, node.id):
            self.report("forbidden-call", node, f"`{node.id}` is not allowed in a candidate")
        elif node.id in ("getattr", "setattr", "delattr") and not self._bound_locally(node, node.id):
            parent = _parent(node)
            if not (isinstance(parent, ast.Call) and parent.func is node):
                self.report("forbidden-call", node, f"`{node.id}` handed on as a value")

    def _check_method_reference(self, node: ast.Attribute, parent: ast.AST | None) -> None:
        if not self._compute_method(node.attr) or self._math_exempt(node):
            return
        receiver = node.value
        if self._exempt_receiver(receiver):
            return
        called = isinstance(parent, ast.Call) and parent.func is node
        if node.attr in _CONTAINER_METHODS and isinstance(receiver, ast.Name) and self._is_local_container(receiver):
            return
        if called:
            if node.attr in _HOST_ESCAPES:
                self.report("tensor-method", node, f"`.{node.attr}()` hands the data to another library to compute on")
            else:
                self.report("tensor-method", node, f"`.{node.attr}(...)` computes in PyTorch, not in a Triton kernel")
            return
        if node.attr in _ATTRIBUTE_LOOKALIKES:
            return
        handed_on = isinstance(
            parent,
            (ast.Call, ast.keyword, ast.Assign, ast.AnnAssign, ast.Return, ast.Tuple, ast.List, ast.Set,
             ast.Dict, ast.Lambda, ast.NamedExpr, ast.IfExp, ast.BoolOp, ast.Starred, ast.Yield),
        )
        if handed_on:
            self.report("tensor-method", node, f"`.{node.attr}` (a tensor compute method) handed on as a value")

    def _is_local_container(self, name: ast.Name) -> bool:
        fn = self.enclosing.get(name)
        scope = fn if fn is not None else self.tree
        nodes = _walk_own(scope) if fn is not None else ast.walk(scope)
        for node in nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name.id for t in targets):
                    value = node.value
                    if _mutable_value(value, self.resolve) or (
                        isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "sorted"
                    ):
                        return True
        return False

    def _check_dotted(self, node: ast.AST, chain: str, parent: ast.AST | None) -> None:
        parts = chain.split(".")
        top = parts[0]
        called = isinstance(parent, ast.Call) and parent.func is node
        shown = f"{chain}(...)" if called else chain
        if chain in _CACHE_DECORATORS:
            self.report("cache-decorator", node, f"`{chain}` caches results across calls")
            return
        if top == "operator" and len(parts) == 2:
            if parts[1] in _OPERATOR_ARITH and not self._math_exempt(node):
                self.report("tensor-operator", node, f"`{chain}` is tensor arithmetic outside a kernel")
            elif parts[1] in _OPERATOR_INDIRECT:
                self.report("forbidden-call", node, f"`{chain}` reaches attributes by computed name")
            return
        if top == "contextlib" and chain == "contextlib.suppress":
            self.report("try-except", node, "contextlib.suppress swallows exceptions: a fallback can hide a failing kernel")
            return
        if top in ("builtins", "__builtins__"):
            return  # reported at the import
        escape = next((p for p in parts[1:] if p in _ESCAPE_SEGMENTS), None)
        if escape is not None and top not in FORBIDDEN_MODULES:  # those are reported at the import
            self.report("forbidden-call", node, f"`{chain}` reaches the `{escape}` module")
            return
        if top != "torch":
            return
        if self._in_jit(node):
            self.report("torch-in-kernel", node, f"`{chain}` inside a @triton.jit function")
            return
        if chain not in _TORCH_PRIVATE_OK and any(p.startswith("_") and not _is_dunder(p) for p in parts[1:]):
            self.report("torch-private", node, f"`{chain}` is a private torch name")
            return
        if any(p in _STREAM_SEGMENTS for p in parts[1:]):
            self.report("stream", node, f"`{shown}`: streams, events and graphs are not allowed")
            return
        if chain in _TORCH_ESCAPE_CALLS or any(chain == p or chain.startswith(p + ".") for p in FORBIDDEN_SUBMODULES):
            self.report("forbidden-call", node, f"`{shown}` is not allowed in a candidate")
            return
        if self._math_exempt(node):
            return
        if chain in TORCH_ALLOWED:
            return
        if chain.startswith(("torch.cuda.nvtx.", "torch.backends.")):
            return  # profiler ranges; reading backend flags (setting one is monkey-patch)
        if len(parts) == 3 and parts[1] == "nn" and parts[2][:1].isupper():
            return  # creating nn.Linear & co. (calling the instance is torch-module-call)
        if chain == "torch.nn.functional" or chain.startswith("torch.nn.functional."):
            self.report("torch-math", node, f"`{shown}` is torch.nn.functional: compute belongs in a Triton kernel")
            return
        self.report("torch-math", node, f"`{shown}` computes in PyTorch (not on the allocation/view allow list)")

    # -- state across calls ------------------------------------------------------------------
    def _check_module_state(self) -> None:
        class_attrs = {name: info.mutable_attrs for name, info in self.classes.items()}
        for fn in self.functions:
            if fn in self.jit_functions:
                continue
            local = self._locals_of(fn)
            info = self.owner.get(fn)
            for node in _walk_own(fn):
                targets = _assignment_targets(node)
                for target in targets:
                    for sub in self._store_targets(target):
                        self._check_state_store(sub, node, local, info, class_attrs)
                        self._check_closure_state(fn, sub, node, local)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    self._check_state_mutator(node, local, info, class_attrs)
                    name = node.func.attr
                    if name in _MUTATORS or (name.endswith("_") and not name.endswith("__")):
                        self._check_closure_state(fn, node.func.value, node, local, allow_root=True)

    def _check_closure_state(self, fn, sub, node, local, allow_root: bool = False) -> None:
        """Writes into a variable captured from an enclosing function that outlives the call."""
        if not allow_root and not isinstance(sub, (ast.Attribute, ast.Subscript)):
            return
        root = _root_name(sub)
        if root is None or root.id in local or root.id == "self":
            return
        owner = self.enclosing.get(fn)
        while owner is not None and root.id not in self._locals_of(owner):
            owner = self.enclosing.get(owner)
        if owner is None or self._function_of(owner) in self.forward_path:
            return  # not a closure variable, or one created afresh on every call
        owner_name = getattr(owner, "name", "<lambda>")
        self.report("module-cache", node, f"writes into `{root.id}` captured from {owner_name}() (state kept across calls)")

    def _module_level(self, root: ast.Name, local: set[str]) -> bool:
        return root.id in self.module_names and root.id not in local and root.id not in self.imported

    def _check_state_store(self, sub, node, local, info, class_attrs) -> None:
        if not isinstance(sub, (ast.Attribute, ast.Subscript)):
            return
        root = _root_name(sub)
        if root is None:
            return
        if self._module_level(root, local):
            self.report("module-cache", node, f"writes into module-level `{root.id}` (state kept across calls)")
            return
        # class-level mutable attribute written through self / the class: self.CACHE[k] = v
        attr = self._class_attr(sub, info, class_attrs)
        if attr and isinstance(sub, ast.Subscript):
            self.report("module-cache", node, f"writes into class-level `{attr}` (state kept across calls)")

    def _class_attr(self, sub: ast.AST, info: _ClassInfo | None, class_attrs) -> str | None:
        base = sub.value if isinstance(sub, (ast.Subscript, ast.Attribute)) else None
        while isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            owner = base.value.id
            if owner in ("self", "cls") and info is not None and base.attr in info.mutable_attrs:
                return f"{info.node.name}.{base.attr}"
            if owner in class_attrs and base.attr in class_attrs[owner]:
                return f"{owner}.{base.attr}"
        return None

    def _check_state_mutator(self, node: ast.Call, local, info, class_attrs) -> None:
        func = node.func
        assert isinstance(func, ast.Attribute)
        name = func.attr
        inplace = name.endswith("_") and not name.endswith("__")
        if name not in _MUTATORS and not inplace:
            return
        receiver = func.value
        root = _root_name(receiver)
        if root is None:
            return
        if self._module_level(root, local):
            self.report("module-cache", node, f"`.{name}()` mutates module-level `{root.id}` (state kept across calls)")
            return
        probe = ast.Subscript(value=receiver, slice=ast.Constant(0), ctx=ast.Load())
        attr = self._class_attr(probe, info, class_attrs)
        if attr:
            self.report("module-cache", node, f"`.{name}()` mutates class-level `{attr}` (state kept across calls)")

    def _check_instance_state(self) -> None:
        for fn in self.forward_path:
            if getattr(fn, "name", "") == "__init__":
                continue
            for node in ast.walk(fn):
                targets = _assignment_targets(node)
                for target in targets:
                    for sub in self._store_targets(target):
                        if isinstance(sub, (ast.Attribute, ast.Subscript)) and _self_attr_root(sub):
                            if isinstance(node, ast.Assign) and _relayout_of(node.value, sub):
                                continue  # self.w.data = self.w.data.contiguous(): same values, new layout
                            self.report("instance-state", node, f"`{ast.unparse(sub)}` written on the forward path (state kept across calls)")
                if isinstance(node, ast.Call):
                    func = node.func
                    if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args and _is_self(node.args[0]):
                        self.report("instance-state", node, f"{func.id}(self, ...) on the forward path (state kept across calls)")
                    elif isinstance(func, ast.Attribute) and _self_attr_root(func.value) or (
                        isinstance(func, ast.Attribute) and _is_self(func.value)
                    ):
                        name = func.attr
                        inplace = name.endswith("_") and not name.endswith("__") and name not in ("zero_", "fill_")
                        if name in _MUTATORS or inplace:
                            self.report("instance-state", node, f"`{ast.unparse(func)}(...)` mutates self on the forward path (state kept across calls)")


# ----------------------------------------------------------------------------------------
# Tensor arithmetic through operators: a small statement-order type tracker
# ----------------------------------------------------------------------------------------


class _TensorFlow:
    """Tracks which local names hold tensors in one function and flags operators on them."""

    def __init__(
        self,
        checker: _Checker,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        inherited: set[str] | None = None,
        silent: bool = False,
    ):
        self.c = checker
        self.fn = fn
        self.silent = silent
        self.tensors: set[str] = set(inherited or ())
        params = _params(fn)
        for arg in params:
            self.tensors.discard(arg.arg)
        is_forward = fn.name == "forward" and checker.owner.get(fn) is not None
        passed = checker.tensor_params.get(fn, set())
        for arg in params:
            if arg.arg in ("self", "cls", "ctx"):
                continue
            if arg.arg in passed and not self._non_tensor_annotation(arg.annotation):
                self.tensors.add(arg.arg)
                continue
            if self._tensor_annotation(arg.annotation) or (is_forward and not self._non_tensor_annotation(arg.annotation)):
                self.tensors.add(arg.arg)

    def _tensor_annotation(self, ann: ast.AST | None) -> bool:
        if ann is None:
            return False
        name = self.c.resolve(ann) or (ann.id if isinstance(ann, ast.Name) else "")
        return name in ("torch.Tensor", "Tensor", "torch.nn.Parameter")

    def _non_tensor_annotation(self, ann: ast.AST | None) -> bool:
        if ann is None:
            return False
        if isinstance(ann, ast.Name) and ann.id in _NON_TENSOR_ANNOTATIONS:
            return True
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value in _NON_TENSOR_ANNOTATIONS
        return not self._tensor_annotation(ann) and not isinstance(ann, (ast.BinOp, ast.Subscript))

    def run(self) -> None:
        self.block(self.fn.body)

    # -- classification --------------------------------------------------------------------
    def is_tensor(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.tensors
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        if isinstance(node, ast.Attribute):
            if _is_self(node.value):
                return f"self.{node.attr}" in self.c.self_tensors
            return node.attr in _TENSOR_ATTRS and self.is_tensor(node.value)
        if isinstance(node, ast.Call):
            name = self.c.resolve(node.func)
            if name in _TENSOR_ALLOC:
                return True
            if self._callee(node.func) in self.c.returns_tensor:
                return True
            if isinstance(node.func, ast.Attribute) and name is None:
                attr = node.func.attr
                if attr in ALLOWED_METHODS - {"stride", "size", "numel", "nelement", "dim", "ndimension", "is_contiguous", "data_ptr", "element_size", "storage_offset", "item", "get_device", "is_floating_point", "is_complex", "untyped_storage", "dim_order", "is_pinned"}:
                    return attr not in _TENSOR_SEQUENCE_METHODS and self.is_tensor(node.func.value)
                if self.c._compute_method(attr):
                    return self.is_tensor(node.func.value)
            return False
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self.is_tensor(node.operand)
        if isinstance(node, ast.Compare):
            return any(isinstance(op, _ARITH_CMP) for op in node.ops) and any(
                self.is_tensor(x) for x in [node.left, *node.comparators]
            )
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body) or self.is_tensor(node.orelse)
        if isinstance(node, ast.NamedExpr):
            return self.is_tensor(node.value)
        return False

    def _callee(self, func: ast.AST) -> ast.AST | None:
        """The candidate's own function a call goes to: helper(...), self.helper(...), Fn.apply(...)."""
        c = self.c
        if isinstance(func, ast.Name) and c.module_names.get(func.id) == "def":
            return c._module_defs.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner == "self":
                info = c.owner.get(c._function_of(self.fn))
                return info.methods.get(func.attr) if info else None
            if owner in c.classes and c.module_names.get(owner) == "class":
                method = "forward" if func.attr == "apply" else func.attr
                return c.classes[owner].methods.get(method)
        return None

    def _note_tensor_arguments(self, call: ast.Call) -> None:
        """Remember which parameters of the candidate's own functions receive tensors."""
        callee = self._callee(call.func)
        if callee is None or callee in self.c.jit_functions:
            return
        params = [a.arg for a in [*callee.args.posonlyargs, *callee.args.args]]  # type: ignore[attr-defined]
        bound_first = isinstance(call.func, ast.Attribute) and (
            _is_self(call.func.value) or call.func.attr == "apply"
        )
        if bound_first or (params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute)):
            params = params[1:]
        found = self.c.tensor_params.setdefault(callee, set())
        for name, arg in zip(params, call.args, strict=False):
            if self.is_tensor(arg):
                found.add(name)
        for keyword in call.keywords:
            if keyword.arg and self.is_tensor(keyword.value):
                found.add(keyword.arg)

    def _tensor_elements(self, node: ast.AST) -> bool:
        """A list/tuple/comprehension of tensors (sum(row for row in x), max([a, b]))."""
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            return self.is_tensor(node.elt)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return any(self.is_tensor(e) for e in node.elts)
        return self._is_tensor_sequence(node)

    def _is_tensor_sequence(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _TENSOR_SEQUENCE_METHODS
            and self.is_tensor(node.func.value)
        )

    # -- binding -------------------------------------------------------------------------------
    def bind(self, target: ast.AST, value: ast.AST | None, element_tensor: bool | None = None) -> None:
        if isinstance(target, ast.Name):
            tensor = element_tensor if element_tensor is not None else self.is_tensor(value)
            (self.tensors.add if tensor else self.tensors.discard)(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self.bind(t, v)
            else:
                elem = value is not None and (self._is_tensor_sequence(value) or self.is_tensor(value))
                for t in target.elts:
                    self.bind(t, None, element_tensor=bool(elem))
        elif isinstance(target, ast.Starred):
            self.bind(target.value, None, element_tensor=False)

    # -- statements ------------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt not in self.c.jit_functions:
                _TensorFlow(self.c, stmt, inherited=self.tensors, silent=self.silent).run()
            return
        if isinstance(stmt, ast.ClassDef):
            return
        if isinstance(stmt, ast.Assign):
            self.scan(stmt.value)
            for target in stmt.targets:
                self.scan_target(target)
                self._tensor_attribute_store(stmt, target)
                self.bind(target, stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            self.scan(stmt.value)
            if stmt.value is not None:
                self.bind(stmt.target, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self.scan(stmt.value)
            self.scan_target(stmt.target)
            self._tensor_attribute_store(stmt, stmt.target)
            if not isinstance(stmt.op, ast.MatMult) and (self.is_tensor(stmt.target) or self.is_tensor(stmt.value)):
                self.report("tensor-operator", stmt, f"`{ast.unparse(stmt)}` is tensor arithmetic outside a kernel")
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.scan(stmt.iter)
            elem = self.is_tensor(stmt.iter) or self._is_tensor_sequence(stmt.iter)
            self.bind(stmt.target, None, element_tensor=elem)
            self.block(stmt.body)
            self.block(stmt.orelse)
        elif isinstance(stmt, (ast.While, ast.If)):
            self.scan(stmt.test)
            self.block(stmt.body)
            self.block(stmt.orelse)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self.scan(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, None, element_tensor=False)
            self.block(stmt.body)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.block(stmt.body)  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                self.block(handler.body)
            self.block(stmt.orelse)  # type: ignore[attr-defined]
            self.block(stmt.finalbody)  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.Return):
            self.scan(stmt.value)
            value = stmt.value
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            if any(self.is_tensor(v) for v in values):
                self.c.returns_tensor.add(self.fn)
        elif isinstance(stmt, ast.Match):
            self.scan(stmt.subject)
            for case in stmt.cases:
                self.block(case.body)
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self.scan(child)

    def _tensor_attribute_store(self, stmt: ast.stmt, target: ast.AST) -> None:
        """x._out = out: state parked on an input tensor survives to the next call with that tensor."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._tensor_attribute_store(stmt, elt)
        elif isinstance(target, ast.Attribute) and not _self_attr_root(target) and self.is_tensor(target.value):
            self.report("instance-state", stmt, f"`{ast.unparse(target)}` stores state on a tensor")

    def scan_target(self, target: ast.AST) -> None:
        if isinstance(target, ast.Subscript):
            self.scan(target.slice)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.scan_target(elt)

    # -- expressions ------------------------------------------------------------------------------
    def scan(self, expr: ast.AST | None) -> None:
        if expr is None:
            return
        saved = set(self.tensors)
        for node in ast.walk(expr):
            if isinstance(node, ast.comprehension):
                elem = self.is_tensor(node.iter) or self._is_tensor_sequence(node.iter)
                self.bind(node.target, None, element_tensor=elem)
        for node in ast.walk(expr):
            self.check_expr(node)
        # comprehension targets do not leak; walrus targets do
        named = {n.target.id: self.is_tensor(n.value) for n in ast.walk(expr) if isinstance(n, ast.NamedExpr)}
        self.tensors = saved | {k for k, v in named.items() if v}

    def report(self, rule: str, node: ast.AST, text: str) -> None:
        if not self.silent:
            self.c.report(rule, node, text)

    def check_expr(self, node: ast.AST) -> None:
        report = self.report
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            if self.is_tensor(node.left) or self.is_tensor(node.right):
                report("tensor-operator", node, f"`{_short(node)}` is tensor arithmetic outside a kernel")
        elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            if self.is_tensor(node.operand):
                report("tensor-operator", node, f"`{_short(node)}` is tensor arithmetic outside a kernel")
        elif isinstance(node, ast.Compare):
            if self.is_tensor(node):
                report("tensor-operator", node, f"`{_short(node)}` is a tensor comparison outside a kernel")
        if isinstance(node, ast.Call):
            self._note_tensor_arguments(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in _TENSOR_BUILTINS and name not in self.c.bindings and name not in self.c.module_names:
                if any(self.is_tensor(a) or self._tensor_elements(a) for a in node.args):
                    report("tensor-operator", node, f"`{name}()` on a tensor computes in PyTorch")


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------
# API
# ----------------------------------------------------------------------------------------


def check_candidate_source(source: str, filename: str = "<candidate>") -> list[RuleViolation]:
    """Every rule violation in a candidate's source, ordered by line (empty: none)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        line = exc.lineno or 0
        return [
            RuleViolation(
                rule="syntax-error",
                line=line,
                message=f"{filename}:{line}: syntax error: {exc.msg}",
                rejection=RejectionClass.LOAD_ERROR,
            )
        ]
    return _Checker(tree, filename).run()


def check_candidate_file(path) -> list[RuleViolation]:
    """:func:`check_candidate_source` on a file, reported under its base name."""
    from pathlib import Path

    path = Path(path)
    return check_candidate_source(path.read_text(), filename=path.name)
