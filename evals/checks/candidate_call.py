"""One watched call of a candidate's forward, and the evidence it leaves.

Every watched call the verifier makes goes through ``call_candidate``: fresh
copies of the inputs laid out as ``get_inputs()`` made them (so no call sees
the buffers of another, and a view stays a view), poisoned and guarded
allocations, kernel launches, torch ops and host reads recorded, the sandbox
guard watching, the outputs fingerprinted at return and again after a
device-wide sync, the inputs compared with their saved copies afterwards,
outputs that share storage with an argument and writes past the end of any
buffer the call allocated noted.

With ``execute_kernels=False`` (the ghost check) no kernel runs and every
tensor a launch was handed is poisoned instead, over the span its strides can
reach: what is left unpoisoned in the outputs was written by torch, not by a
kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch

from kgen.backends.base import Backend, KernelLaunch
from kgen.evals.checks.compare import plain_output_problem
from kgen.evals.checks.copy_provenance import ReplicatedOutput, replicated_outputs, trace_copies
from kgen.evals.checks.poison import (
    poison_allocator,
    poison_mask,
    poison_span,
    poisoned_allocations,
)
from kgen.evals.checks.torch_usage import TorchOpsVerdict, judge_torch_ops, record_torch_ops
from kgen.evals.problem.format import flatten_outputs
from kgen.evals.problem.layout import copy_inputs
from kgen.evals.problem.policies import Policies
from kgen.evals.sandbox.guard import CandidateGuard


@dataclass
class CallEvidence:
    outputs: list[Any]
    launches: list[KernelLaunch]
    #: torch compute ops the torch-ops policy does not allow (``torch_ops`` says why)
    compute_ops: dict[str, int]
    #: the forward's torch ops judged under the policy: library calls and glue it allowed, and
    #: the glue measure
    torch_ops: TorchOpsVerdict = field(default_factory=TorchOpsVerdict)
    mutated_inputs: list[int] = field(default_factory=list)
    #: outputs whose fingerprint changed between return and a device-wide sync
    deferred_outputs: list[int] = field(default_factory=list)
    #: scalars read to the host during the call (.item(), int(t), float(t), bool(t))
    host_reads: int = 0
    #: output index -> argument index whose storage it shares
    aliased_outputs: dict[int, int] = field(default_factory=dict)
    #: output index -> an earlier output it shares storage with
    shared_outputs: dict[int, int] = field(default_factory=dict)
    #: one line per allocation the call wrote past the end of
    overruns: list[str] = field(default_factory=list)
    #: output index -> why it is not a plain tensor (a subclass, sparse, nested, meta): such
    #: outputs are not touched further, so none of a subclass's code runs in kgen's checks
    unplain_outputs: dict[int, str] = field(default_factory=dict)
    #: ghost calls: what torch had put in each tensor a launch (not run) was handed
    handed_to_kernels: list[torch.Tensor] = field(default_factory=list)
    #: with ``follow_copies``: outputs part of which torch copied from other elements' computed values
    replicated: list[ReplicatedOutput] = field(default_factory=list)
    error: BaseException | None = None


def clone_value(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


#: Elements per chunk of a fingerprint (fp64 temporaries of ~0.5 GB at most).
FINGERPRINT_CHUNK = 1 << 26


def fingerprint(outputs: Sequence[Any]) -> list[torch.Tensor]:
    """Checksums queued on the current stream right at return: cheap, and they see only
    work that finished in stream order."""
    prints = []
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.numel():
            flat = out.detach().reshape(-1)
            total = torch.zeros((), dtype=torch.float64, device=flat.device)
            # chunk by chunk, accumulated on the device without a sync: the fp64 temporaries of
            # a multi-gigabyte output stay bounded, and the sums still run in stream order
            for start in range(0, flat.numel(), FINGERPRINT_CHUNK):
                values = torch.nan_to_num(flat[start:start + FINGERPRINT_CHUNK].to(torch.float64), nan=1.2345e300)
                total = total + values.sum() + (values * 1.000001).abs().sum()
            prints.append(total)
        else:
            prints.append(torch.zeros((), dtype=torch.float64))
    return prints


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element by element, whether two same-shaped tensors hold the same bits (NaN equals NaN)."""
    if a.is_floating_point():
        width = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
        return a.detach().contiguous().view(width) == b.detach().contiguous().view(width)
    return a.detach() == b.detach()


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal, NaN included (compare storage bits, not float equality).

    Compared a slab of leading-axis rows at a time on ``a``'s device: every element is still
    compared exactly, but a pristine copy kept on the host (a problem too big to copy twice on
    the device) comes over one slab at a time, and the masks and contiguous copies of a
    multi-gigabyte strided input stay bounded."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dim() == 0 or a.numel() <= FINGERPRINT_CHUNK:
        return bool(bitwise_equal(a, b.to(a.device)).all())
    rows = max(1, FINGERPRINT_CHUNK // max(1, a[0].numel()))
    return all(
        bool(bitwise_equal(a[start:start + rows], b[start:start + rows].to(a.device)).all())
        for start in range(0, a.shape[0], rows)
    )


def same_outputs(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Two calls' outputs: as many, all tensors, each bitwise-equal to its partner."""
    return len(a) == len(b) and all(
        isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and same_values(x, y)
        for x, y in zip(a, b, strict=True)
    )


def shares_storage(a: Any, b: Any) -> bool:
    return (
        isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.numel() > 0 and b.numel() > 0
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )


def shared_outputs(outputs: Sequence[Any]) -> dict[int, int]:
    """output index -> index of an earlier output whose storage it shares (a view of it, or itself)."""
    found = {}
    for i, out in enumerate(outputs):
        j = next((j for j in range(i) if shares_storage(out, outputs[j])), None)
        if j is not None:
            found[i] = j
    return found


def aliased_outputs(outputs: Sequence[Any], args: Sequence[Any]) -> dict[int, int]:
    """output index -> index of the first argument whose storage it shares."""
    found = {}
    for i, out in enumerate(outputs):
        j = next((j for j, arg in enumerate(args) if shares_storage(out, arg)), None)
        if j is not None:
            found[i] = j
    return found


def _poisoner(args: Sequence[Any], handed: list[torch.Tensor]):
    """For the ghost check: a launch not run poisons what it could have written, except the
    call's own inputs (a kernel may not write them, and torch copying from them after the
    launch is exactly what the check must see). What torch had already put in each of those
    tensors is kept in ``handed``: a kernel handed the finished output only copies it."""
    from torch.utils._python_dispatch import _disable_current_modes

    inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor) and a.numel()}

    def poison_unlaunched(tensors: list[Any]) -> None:
        with _disable_current_modes(), torch.no_grad():
            for tensor in tensors:
                if tensor.numel() and tensor.untyped_storage().data_ptr() not in inputs:
                    if not bool(poison_mask(tensor).all()):
                        handed.append(tensor.detach().clone())
                    poison_span(tensor)

    return poison_unlaunched


def _describe_overruns(log, outputs: Sequence[Any]) -> list[str]:
    lines = []
    for tensor, changed in log.overruns():
        which = next((f"output {i}" for i, o in enumerate(outputs) if shares_storage(o, tensor)), None)
        what = which or f"an intermediate buffer of shape {tuple(tensor.shape)}"
        lines.append(
            f"{what} ({str(tensor.dtype).removeprefix('torch.')}, {tensor.numel()} elements): "
            f"{changed} byte(s) past its end were overwritten"
        )
    return lines


def channel_count(candidate: Any) -> int:
    """Elements of the candidate's largest 1-D parameter or buffer (a bias, a norm weight): the
    channel count that per-channel glue scales with (0 for a candidate that is not a module)."""
    if not isinstance(candidate, torch.nn.Module):
        return 0
    tensors = [*candidate.parameters(), *candidate.buffers()]
    return max((t.numel() for t in tensors if t.dim() == 1), default=0)


def call_candidate(
    candidate: Any,
    inputs: Sequence[Any],
    backend: Backend,
    guard: CandidateGuard,
    device: torch.device,
    poison_like: Sequence[torch.Tensor] = (),
    execute_kernels: bool = True,
    policies: Policies | None = None,
    pristine_device: torch.device | None = None,
    follow_copies: bool = False,
) -> CallEvidence:
    """Run ``candidate(*copies of inputs)`` under every watch; never raises for the candidate.

    ``compute_ops`` are the torch ops ``policies`` (default: strict) does not allow.
    ``pristine_device``: where the copy of the inputs kept for the mutation check lives
    (default: beside them; the host when the device has no room for it). ``follow_copies``:
    follow copied values into the outputs (``copy_provenance.py``; one int64 per element of
    what the call copies into, so only where the verifier asks for it)."""
    saved = copy_inputs(inputs, pristine_device)
    args = copy_inputs(inputs)
    poison_allocator(poison_like, device)
    outputs: list[Any] = []
    error: BaseException | None = None
    handed: list[torch.Tensor] = []
    with ExitStack() as stack:
        # Outermost: the allocation mode's own fills are kgen's, not the candidate's ops.
        allocations = stack.enter_context(poisoned_allocations())
        launches = stack.enter_context(
            backend.record_launches(execute=execute_kernels, on_skip=None if execute_kernels else _poisoner(args, handed))
        )
        # below the op recorder, whose frame walk must meet no frame of kgen's tracer
        provenance = stack.enter_context(trace_copies()) if follow_copies else None
        usage = stack.enter_context(record_torch_ops())
        stack.enter_context(guard)
        try:
            with torch.no_grad():
                outputs = flatten_outputs(candidate(*args))
        except Exception as exc:  # noqa: BLE001 - untrusted code may raise anything
            error = exc
    evidence = CallEvidence(outputs=outputs, launches=list(launches.launches), compute_ops={}, error=error)
    unplain = {
        i: problem for i, out in enumerate(outputs)
        if isinstance(out, torch.Tensor) and (problem := plain_output_problem(out)) is not None
    }
    produced = sum(out.numel() for i, out in enumerate(outputs) if isinstance(out, torch.Tensor) and i not in unplain)
    evidence.torch_ops = judge_torch_ops(usage, policies or Policies(), produced, channel_count(candidate))
    evidence.compute_ops = evidence.torch_ops.compute_ops
    evidence.host_reads = usage.host_reads
    evidence.handed_to_kernels = handed
    evidence.unplain_outputs = unplain
    if provenance is not None and error is None and not unplain:
        evidence.replicated = replicated_outputs(provenance, outputs)
    if error is not None or evidence.unplain_outputs:
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
    evidence.aliased_outputs = aliased_outputs(outputs, args)
    evidence.shared_outputs = shared_outputs(outputs)
    evidence.overruns = _describe_overruns(allocations, outputs)
    allocations.clear()
    return evidence
