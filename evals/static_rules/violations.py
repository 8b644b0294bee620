"""What a rule reports: :class:`RuleViolation`, and :data:`RULES`, every rule id with its rejection class."""

from __future__ import annotations

from pydantic import BaseModel

from kgen.evals.verdict import RejectionClass


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
    "torch-in-kernel": (_NK, "torch used inside a kernel function (a backend's kernel decorator: @triton.jit, @cute.kernel ...)"),
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
    "clock-env": (_FC, "clocks, randomness, environment, host, allocator/RNG state or the call stack: behaviour that depends on when and where it runs"),
}
