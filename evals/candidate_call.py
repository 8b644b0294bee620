"""One watched call of a candidate's forward, and the evidence it leaves.

Every call the verifier makes goes through ``call_candidate``: fresh clones of
the inputs (so no call sees the buffers of another), poisoned allocations,
kernel launches and torch ops recorded, the sandbox guard watching, the
outputs fingerprinted at return and again after a device-wide sync, and the
inputs compared with their saved copies afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch

from kgen.backends.base import Backend, KernelLaunch
from kgen.evals.candidate_guard import CandidateGuard
from kgen.evals.compare import flatten_outputs
from kgen.evals.poison import poison_allocator, poisoned_allocations
from kgen.evals.torch_usage import record_torch_ops


@dataclass
class CallEvidence:
    outputs: list[Any]
    launches: list[KernelLaunch]
    compute_ops: dict[str, int]
    mutated_inputs: list[int] = field(default_factory=list)
    #: outputs whose fingerprint changed between return and a device-wide sync
    deferred_outputs: list[int] = field(default_factory=list)
    error: BaseException | None = None


def clone_value(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def fingerprint(outputs: Sequence[Any]) -> list[torch.Tensor]:
    """Checksums queued on the current stream right at return: cheap, and they see only
    work that finished in stream order."""
    prints = []
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.numel():
            values = out.detach().reshape(-1).to(torch.float64)
            values = torch.nan_to_num(values, nan=1.2345e300)
            prints.append(values.sum() + (values * 1.000001).abs().sum())
        else:
            prints.append(torch.zeros((), dtype=torch.float64))
    return prints


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal, NaN included (compare storage bits, not float equality)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        width = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
        return torch.equal(a.contiguous().view(width), b.contiguous().view(width))
    return torch.equal(a, b)


def same_outputs(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Two calls' outputs: as many, all tensors, each bitwise-equal to its partner."""
    return len(a) == len(b) and all(
        isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and same_values(x, y)
        for x, y in zip(a, b, strict=True)
    )


def call_candidate(
    candidate: Any,
    inputs: Sequence[Any],
    backend: Backend,
    guard: CandidateGuard,
    device: torch.device,
    poison_like: Sequence[torch.Tensor] = (),
    execute_kernels: bool = True,
) -> CallEvidence:
    """Run ``candidate(*clones of inputs)`` under every watch; never raises for the candidate."""
    saved = [clone_value(x) for x in inputs]
    args = [clone_value(x) for x in inputs]
    poison_allocator(poison_like, device)
    outputs: list[Any] = []
    error: BaseException | None = None
    with ExitStack() as stack:
        launches = stack.enter_context(backend.record_launches(execute=execute_kernels))
        usage = stack.enter_context(record_torch_ops())
        stack.enter_context(poisoned_allocations())
        stack.enter_context(guard)
        try:
            with torch.no_grad():
                outputs = flatten_outputs(candidate(*args))
        except Exception as exc:  # noqa: BLE001 - untrusted code may raise anything
            error = exc
    evidence = CallEvidence(outputs=outputs, launches=list(launches.launches), compute_ops={}, error=error)
    evidence.compute_ops = dict(usage.compute_ops)
    if error is not None:
        return evidence
    at_return = fingerprint(outputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    after_sync = fingerprint(outputs)
    evidence.deferred_outputs = [
        i for i, (a, b) in enumerate(zip(at_return, after_sync, strict=True)) if not same_values(a, b)
    ]
    evidence.mutated_inputs = [
        i for i, (before, after) in enumerate(zip(saved, args, strict=True))
        if isinstance(before, torch.Tensor) and not same_values(before, after)
    ]
    return evidence
