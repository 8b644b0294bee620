"""Not a kernel (``NOT_A_KERNEL``): the candidate computes in PyTorch, or hides a failing kernel.

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
* ``torch-in-kernel`` — any ``torch`` name inside a kernel function: one a
  registered backend's ``kernel_decorators`` mark (``@triton.jit``,
  ``@cute.kernel``, ``@cute.jit``; under the CPU interpreter a Triton body is
  plain Python and could call torch, and a ``@cute.jit`` body runs as Python
  while it is traced; compiled for a GPU neither can).
* ``compute-library`` — importing numpy, cupy, jax, scipy, numba, pycuda,
  cuda-python, tensorflow...: compute done outside the kernel.

Scope: the torch-math family (``torch-math``, ``tensor-method``,
``tensor-operator``, ``torch-module-call``) applies to the whole module
except the bodies of kernel functions (``tl.*`` / ``cute.*`` there *is*
the kernel) and code reachable only from ``__init__`` (parameter
initialisation such as ``nn.init.kaiming_uniform_`` or
``torch.randn(...) * 0.02`` is not on the forward path; the evaluation
loads the reference's weights afterwards anyway). ``try-except``,
``torch-in-kernel`` and ``compute-library`` apply everywhere.

``clone()`` is allowed: a copy does no math (the dynamic twin,
``kgen.evals.checks.torch_usage``, classifies ``aten.clone`` as allowed too), and an
output that is merely a copy of an input still has to match the reference.

Known limits, covered by the dynamic checks: types are guessed, so tensor
arithmetic on a value the tracker lost (an element of a container, the
result of a method it does not know) is not seen here, nor an ``nn.Module``
reached indirectly (``next(self.children())(x)``);
``kgen.evals.checks.torch_usage.record_torch_ops`` sees every aten op the forward
dispatches, however it was reached. Stateful references (BatchNorm in
training mode updating running statistics) trip ``instance-state``.

Operators on tensors are found by :mod:`.tensor_flow`.

Under the ``library`` torch-ops policy (:mod:`kgen.evals.problem.policies`) the vendor calls of
:data:`~.names.LIBRARY_TORCH_NAMES` (``torch.matmul``/``mm``/``bmm``/``addmm``/``baddbmm``/
``einsum``, ``F.linear``, ``F.conv*``, ``F.conv_transpose*``,
``F.scaled_dot_product_attention``), the matmul tensor methods and the ``@`` operator, and
calls of ``nn.Linear``/``nn.Conv*``/``nn.ConvTranspose*`` instances (or containers of only
those) are not violations; every other rule of the family stands, and its messages name the
policy. Under either policy, host shape arithmetic (:mod:`.host_values`:
``torch.prod(torch.tensor(self.normalized_shape))``, ``x.size(-1) ** 0.5``) is not data
computation.
"""

from __future__ import annotations

import ast
from functools import cached_property

from kgen.evals.problem.policies import TorchOps
from kgen.evals.static_rules.ast_helpers import (
    _is_self,
    _mutable_value,
    _parent,
    _target_names,
    _walk_own,
)
from kgen.evals.static_rules.context import _Context
from kgen.evals.static_rules.host_values import HostValues
from kgen.evals.static_rules.names import (
    _ATTRIBUTE_LOOKALIKES,
    _CONTAINER_METHODS,
    _HOST_ESCAPES,
    _OPERATOR_ARITH,
    COMPUTE_LIBRARIES,
    LIBRARY_CALLS_TEXT,
    LIBRARY_METHODS,
    LIBRARY_MODULES,
    LIBRARY_TORCH_NAMES,
    TORCH_ALLOWED,
    is_compute_method,
)
from kgen.evals.static_rules.tensor_flow import _TensorFlow

#: the rules that judge computation in torch (shape arithmetic is exempt from each)
_MATH_RULES = frozenset({"torch-math", "tensor-method", "tensor-operator"})


class _TorchMathRules(_Context):
    """try-except, torch-math, tensor-method, tensor-operator, torch-module-call, torch-in-kernel, compute-library."""

    # -- what is not data computation: library calls (policy ``library``), shape arithmetic ------
    @property
    def _library(self) -> bool:
        """Whether the ``library`` torch-ops policy admits vendor matmul/conv/attention calls."""
        return self.policies.torch_ops is TorchOps.LIBRARY

    @cached_property
    def _hosts(self) -> HostValues:
        return HostValues(self)

    def report(self, rule: str, node: ast.AST, text: str) -> None:
        """Every family's report, less the torch-math ones on host shape arithmetic (``n ** 0.5``
        for ``n = torch.tensor(shape).prod()``): counting elements is not computing on data."""
        if rule in _MATH_RULES and self._shape_arithmetic(node):
            return
        if self._library and rule in _MATH_RULES | {"torch-module-call"}:
            text += f" (torch ops policy library allows only {LIBRARY_CALLS_TEXT} calls)"
        super().report(rule, node, text)

    def _shape_arithmetic(self, node: ast.AST) -> bool:
        """A torch call, method call or operator whose operands are all host values."""
        parent = _parent(node)
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(parent, ast.Call):
            node = parent  # torch.prod, operator.mul (reported at the name) judged with the whole call
        if isinstance(node, ast.AugAssign):
            return self._hosts.is_host(node.target) and self._hosts.is_host(node.value)
        if isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare)):
            return self._hosts.is_host(node)
        return False

    # -- try-except ---------------------------------------------------------------------
    def _check_try(self, node: ast.AST) -> None:
        kind = "try/except" if getattr(node, "handlers", None) else "try/finally"
        self.report("try-except", node, f"{kind} in a candidate: a fallback can hide a failing kernel; let errors surface")

    def _check_exit_methods(self, node: ast.ClassDef) -> None:
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in ("__exit__", "__aexit__"):
                self.report("try-except", item, f"{node.name} defines {item.name}: a context manager can swallow a kernel's exception")

    def _dotted_suppress(self, node: ast.AST, chain: str) -> bool:
        if chain == "contextlib.suppress":
            self.report("try-except", node, "contextlib.suppress swallows exceptions: a fallback can hide a failing kernel")
            return True
        return False

    # -- compute-library ------------------------------------------------------------------
    def _import_compute_library(self, node: ast.AST, module: str) -> bool:
        if module.split(".")[0] in COMPUTE_LIBRARIES:
            self.report("compute-library", node, f"import of `{module}`: compute outside the candidate's kernels")
            return True
        return False

    # -- tensor-operator (the parts not needing the tensor tracker) --------------------------
    def _check_matmul_operator(self, node: ast.AST) -> None:
        if self._math_exempt(node) or self._library:
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            self.report("tensor-operator", node, "the @ operator is a torch matmul, not the candidate's kernel")
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.MatMult):
            self.report("tensor-operator", node, "the @= operator is a torch matmul, not the candidate's kernel")

    def _operator_arith(self, node: ast.AST, chain: str) -> None:
        """``operator.add`` & co. (``chain`` is ``operator.<name>``)."""
        if self._library and chain in LIBRARY_TORCH_NAMES:
            return
        if chain.split(".")[1] in _OPERATOR_ARITH and not self._math_exempt(node):
            self.report("tensor-operator", node, f"`{chain}` is tensor arithmetic outside a kernel")

    def _check_tensor_flow(self) -> None:
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

    # -- tensor-method ------------------------------------------------------------------------
    def _getattr_compute(self, node: ast.Call, name: str, literal: str | None) -> bool:
        """getattr(x, "sum"): a tensor compute method reached by name."""
        if (
            literal is not None
            and name == "getattr"
            and is_compute_method(literal)
            and not (self._library and literal in LIBRARY_METHODS)
            and not self._exempt_receiver(node.args[0])
            and self.resolve(node.args[0]) is None
            and not self._math_exempt(node)
        ):
            self.report("tensor-method", node, f"getattr(..., {literal!r}) reaches a tensor compute method")
            return True
        return False

    def _exempt_receiver(self, receiver: ast.AST) -> bool:
        if _is_self(receiver):
            return True
        if isinstance(receiver, ast.Name) and self.module_names.get(receiver.id) in ("def", "class"):
            return True
        name = self.resolve(receiver)
        return name is not None and not name.startswith("torch")

    def _check_method_reference(self, node: ast.Attribute, parent: ast.AST | None) -> None:
        if not is_compute_method(node.attr) or self._math_exempt(node):
            return
        if self._library and node.attr in LIBRARY_METHODS:
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
                self.report("tensor-method", node, f"`.{node.attr}(...)` computes in PyTorch, not in the candidate's kernel")
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

    # -- torch-module-call ------------------------------------------------------------------
    def _nn_module_call(self, node: ast.Call) -> None:
        if self._library and self._calls_library_module(node.func):
            return
        if not self._math_exempt(node) and self._calls_nn_module(node.func):
            self.report("torch-module-call", node, f"`{ast.unparse(node.func)}(...)` runs a torch.nn module, not the candidate's kernel")

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

    def _calls_library_module(self, func: ast.AST) -> bool:
        """``self.conv(x)``, ``nn.Linear(...)(x)``, ``self.layers[i](x)`` for a ModuleList of
        Linear: a module that only makes a library call."""
        if isinstance(func, ast.Call):
            return self._library_construction(func)
        if isinstance(func, ast.Attribute) and func.attr in ("forward", "__call__"):
            func = func.value
        while isinstance(func, ast.Subscript):
            func = func.value
        key = func.id if isinstance(func, ast.Name) else None
        if isinstance(func, ast.Attribute) and _is_self(func.value):
            key = f"self.{func.attr}"
        return key is not None and key in self._library_instances

    def _library_construction(self, call: ast.AST) -> bool:
        """``nn.Conv2d(...)``, or a ``Sequential``/``ModuleList`` built of such only."""
        if not isinstance(call, ast.Call) or not self._is_nn_class(call.func):
            return False
        name = (self.resolve(call.func) or "").rsplit(".", 1)[-1]
        if name in LIBRARY_MODULES:
            return True
        if name == "Sequential":
            return bool(call.args) and all(self._library_construction(a) for a in call.args)
        if name == "ModuleList" and len(call.args) == 1:
            items = call.args[0]
            if isinstance(items, (ast.List, ast.Tuple)):
                return bool(items.elts) and all(self._library_construction(e) for e in items.elts)
            if isinstance(items, (ast.ListComp, ast.GeneratorExp)):
                return self._library_construction(items.elt)
        return False

    @cached_property
    def _library_instances(self) -> set[str]:
        """Names and ``self`` attributes every ``torch.nn`` module bound to which only makes
        library calls (and loop variables over containers of those)."""
        verdicts: dict[str, list[bool]] = {}
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                if not self._is_nn_class(node.value.func):
                    continue
                library = self._library_construction(node.value)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                in_class_body = isinstance(_parent(node), ast.ClassDef)
                for target in targets:
                    if isinstance(target, ast.Name):
                        verdicts.setdefault(target.id, []).append(library)
                        if in_class_body:
                            verdicts.setdefault(f"self.{target.id}", []).append(library)
                    elif isinstance(target, ast.Attribute) and _is_self(target.value):
                        verdicts.setdefault(f"self.{target.attr}", []).append(library)
        holders = {k for k, v in verdicts.items() if all(v)}
        for node in self.nodes:
            if isinstance(node, (ast.For, ast.comprehension)):
                it = node.iter
                key = it.id if isinstance(it, ast.Name) else (
                    f"self.{it.attr}" if isinstance(it, ast.Attribute) and _is_self(it.value) else None
                )
                for name in _target_names(node.target):
                    verdicts.setdefault(name, []).append(key in holders)
        return {k for k, v in verdicts.items() if all(v)}

    # -- torch-in-kernel, torch-math -------------------------------------------------------------
    def _dotted_torch_in_kernel(self, node: ast.AST, chain: str) -> bool:
        if self._in_jit(node):
            self.report("torch-in-kernel", node, f"`{chain}` inside a {self.kernel_name_of(node)} function")
            return True
        return False

    def _dotted_torch_math(self, node: ast.AST, chain: str, shown: str) -> None:
        """A torch name off the allow list, on the forward path."""
        parts = chain.split(".")
        if self._math_exempt(node):
            return
        if chain in TORCH_ALLOWED or (self._library and chain in LIBRARY_TORCH_NAMES):
            return
        if chain.startswith(("torch.cuda.nvtx.", "torch.backends.")):
            return  # profiler ranges; reading backend flags (setting one is monkey-patch)
        if len(parts) == 3 and parts[1] == "nn" and parts[2][:1].isupper():
            return  # creating nn.Linear & co. (calling the instance is torch-module-call)
        if chain == "torch.nn.functional" or chain.startswith("torch.nn.functional."):
            self.report("torch-math", node, f"`{shown}` is torch.nn.functional: compute belongs in the candidate's kernel")
            return
        self.report("torch-math", node, f"`{shown}` computes in PyTorch (not on the allocation/view allow list)")
