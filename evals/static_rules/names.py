"""Name lists the static rules consult: allow lists, deny lists and the names each family looks for."""

from __future__ import annotations

import ast

_DTYPES = (
    "float16 half bfloat16 float32 float float64 double int8 int16 short int32 int int64 long "
    "uint8 uint16 uint32 uint64 bool complex64 complex128 cfloat cdouble chalf complex32 "
    "float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 "
    "qint8 quint8 qint32"
).split()

#: tensor methods that allocate, view, cast, copy or read metadata (no math); not the storage
#: (``untyped_storage``/``storage``: inspecting the allocator is ``clock-env``)
ALLOWED_METHODS: frozenset[str] = frozenset(
    (
        "contiguous view view_as reshape reshape_as flatten unflatten ravel unsqueeze squeeze permute "
        "transpose t expand expand_as stride size numel nelement dim ndimension is_contiguous data_ptr "
        "element_size storage_offset to float half bfloat16 double int long short bool byte char cuda "
        "cpu type type_as clone detach detach_ narrow select split tensor_split chunk unbind unfold "
        "movedim moveaxis swapaxes swapdims as_strided new_empty new_empty_strided new_zeros new_ones "
        "new_full new_tensor zero_ fill_ copy_ item get_device is_floating_point is_complex "
        "requires_grad_ dim_order is_pinned pin_memory diagonal view_as_real "
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


def is_compute_method(name: str) -> bool:
    """A tensor compute method by name, its in-place ``X_`` variant included."""
    if name in COMPUTE_METHODS:
        return True
    return name.endswith("_") and not name.endswith("__") and name[:-1] in COMPUTE_METHODS

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
    pkgutil pydoc doctest unittest zipimport runpy code codeop pdb bdb pickle cPickle _pickle marshal shelve dbm dill
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
    "torch.fx", "torch.export", "triton.runtime.interpreter", "logging.config",
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

#: library functions that build code objects or evaluate text as Python: ``exec`` by another
#: name (a function over a code object of the candidate's choosing, a string annotation
#: evaluated with the module's globals)
CODE_BUILDERS: frozenset[str] = frozenset(
    {"types.FunctionType", "types.CodeType", "types.LambdaType", "types.MethodType", "types.CellType",
     "typing.get_type_hints", "typing.ForwardRef", "typing.evaluate_forward_ref",
     "annotationlib.get_annotations", "annotationlib.call_evaluate_function"}
)
#: methods of a ``torch.ops`` overload that register a Python implementation of the op
TORCH_OPS_REGISTRATION: frozenset[str] = frozenset({"py_impl", "py_kernels", "register_kernel", "register_fake", "impl"})

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

# -- clock-env ---------------------------------------------------------------------------

#: modules that tell a kernel when, where, how and by whom it runs: clocks and dates,
#: randomness, host/user/locale facts, the call stack, profilers. (``sched``, ``resource``,
#: ``psutil``, ``sysconfig``, ``site``, ``faulthandler``, ``tracemalloc`` and ``atexit`` are
#: in :data:`FORBIDDEN_MODULES` already and stay ``forbidden-import``; ``os``/``sys`` too.)
CLOCK_ENV_MODULES: frozenset[str] = frozenset(
    """
    time datetime _datetime _pydatetime _strptime calendar zoneinfo _zoneinfo timeit platform
    getpass uuid _uuid secrets random _random locale _locale pwd grp traceback cProfile profile
    _lsprof
    """.split()
)
#: those modules, and the state-reading ones FORBIDDEN_MODULES holds, reached through another
#: module's attributes (``torch.platform``, ``torch.cuda.traceback``,
#: ``triton.runtime.autotuner.time``); not ``random`` (``triton.language.random`` is Triton's
#: in-kernel RNG; ``torch.random`` is in :data:`_TORCH_STATE_SEGMENTS`)
_CLOCK_ENV_SEGMENTS = (
    CLOCK_ENV_MODULES
    | {"sched", "resource", "psutil", "sysconfig", "site", "faulthandler", "tracemalloc", "atexit"}
) - {"random", "_random"}
#: torch names (any ``torch.*.<segment>``) that read the allocator, the RNG, the GPU's sensors,
#: profilers or the process: how a candidate would tell the checker's calls from timing calls
_TORCH_STATE_SEGMENTS = frozenset(
    """
    memory memory_allocated max_memory_allocated memory_reserved max_memory_reserved memory_cached
    max_memory_cached memory_stats memory_stats_as_nested_dict memory_summary memory_snapshot
    memory_usage mem_get_info device_memory_used host_memory_stats host_memory_stats_as_nested_dict
    reset_peak_memory_stats reset_accumulated_memory_stats reset_max_memory_allocated
    reset_max_memory_cached reset_peak_host_memory_stats reset_accumulated_host_memory_stats
    get_per_process_memory_fraction list_gpu_processes get_allocator_backend
    caching_allocator_alloc caching_allocator_delete
    utilization temperature power_draw clock_rate is_current_stream_capturing
    random get_rng_state get_rng_state_all set_rng_state set_rng_state_all initial_seed seed
    seed_all default_generator default_generators fork_rng
    profiler profiler_util profiler_legacy monitor collect_env __config__
    storage untyped_storage UntypedStorage TypedStorage
    """.split()
)
#: attributes that inspect a tensor's allocation (the storage behind a view, its size): a
#: padded or guarded check buffer looks different from a timing buffer
STORAGE_ATTRS: frozenset[str] = frozenset({"untyped_storage", "storage", "_typed_storage", "_base"})
#: attributes that reach interpreter frames: the call stack says who is calling
FRAME_ATTRS: frozenset[str] = frozenset(
    {"gi_frame", "cr_frame", "ag_frame", "tb_frame", "f_back", "f_globals", "f_locals", "f_builtins", "f_code"}
)
#: the one ``triton.testing`` name that is not benchmarking or host probing
_TRITON_TESTING_OK = frozenset({"assert_close"})

# -- the ``library`` torch-ops policy -------------------------------------------------------
# One list, read by the static rules (torch_math) and by the runtime recorder (torch_usage):
# under ``library`` these vendor calls (cuBLAS, cuDNN, flash attention through torch) are not
# violations; every other torch compute op still is.

#: what the library calls are, in words, for rejection messages
LIBRARY_CALLS_TEXT = "matmul, convolution and attention"
#: bare names of the library calls as torch functions, ``torch.nn.functional`` functions and
#: tensor methods (``torch.matmul``, ``F.linear``, ``x.mm(w)``, ``x @ w`` is ``matmul``).
#: ``einsum`` is allowed by name; what it dispatches is judged at run time (a contraction is
#: ``bmm``, a non-contraction such as ``"ij,ij->ij"`` is ``mul`` and stays compute)
LIBRARY_FUNCTIONS: frozenset[str] = frozenset(
    """
    matmul mm bmm addmm baddbmm einsum linear conv1d conv2d conv3d conv_transpose1d
    conv_transpose2d conv_transpose3d scaled_dot_product_attention __matmul__ __rmatmul__
    """.split()
)
#: library calls whose every dispatched op is the library's (the bias ``add`` of ``F.linear``
#: on a non-contiguous input, the math-path softmax of attention); not ``einsum``, which
#: decomposes into whatever its equation asks for
LIBRARY_ATTRIBUTED_CALLS: frozenset[str] = LIBRARY_FUNCTIONS - {"einsum"}
#: the library calls as dotted names the static rules resolve
LIBRARY_TORCH_NAMES: frozenset[str] = frozenset(
    [f"torch.{n}" for n in ("matmul", "mm", "bmm", "addmm", "baddbmm", "einsum")]
    + [f"torch.Tensor.{n}" for n in ("matmul", "mm", "bmm", "addmm", "baddbmm", "__matmul__", "__rmatmul__")]
    + [f"torch.{n}" for n in LIBRARY_FUNCTIONS if n.startswith("conv")]
    + [f"torch.nn.functional.{n}" for n in LIBRARY_FUNCTIONS if n.startswith(("conv", "linear", "scaled"))]
    + ["operator.matmul", "operator.__matmul__"]
)
#: tensor methods that are library calls (``x.matmul(w)``, ``a.bmm(b)``)
LIBRARY_METHODS: frozenset[str] = frozenset({"matmul", "mm", "bmm", "addmm", "baddbmm", "__matmul__", "__rmatmul__"})
#: ``torch.nn`` classes whose instances only make a library call (``self.conv(x)``)
LIBRARY_MODULES: frozenset[str] = frozenset(
    """
    Linear LazyLinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d
    LazyConv1d LazyConv2d LazyConv3d LazyConvTranspose1d LazyConvTranspose2d LazyConvTranspose3d
    """.split()
)
#: aten ops (base names, any overload) the library calls dispatch, on CPU and GPU: what the
#: runtime recorder counts as the library's wherever they are dispatched from
LIBRARY_ATEN_OPS: frozenset[str] = frozenset(
    """
    mm addmm bmm baddbmm addbmm mv addmv dot vdot matmul linear
    convolution _convolution convolution_overrideable conv1d conv2d conv3d conv_transpose1d
    conv_transpose2d conv_transpose3d cudnn_convolution cudnn_convolution_transpose
    mkldnn_convolution miopen_convolution miopen_convolution_transpose miopen_depthwise_convolution
    _slow_conv2d_forward slow_conv3d_forward slow_conv_transpose2d slow_conv_transpose3d
    slow_conv_dilated2d slow_conv_dilated3d _conv_depthwise2d conv_depthwise3d
    _nnpack_spatial_convolution
    scaled_dot_product_attention _scaled_dot_product_attention_math
    _scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu
    _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
    _scaled_dot_product_fused_attention_overrideable _flash_attention_forward
    _efficient_attention_forward
    """.split()
)
