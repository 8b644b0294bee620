"""The ghost check's measurements: a candidate's forward with its kernel launches switched off.

Switched off, each launch poisons the tensors it was handed (their whole stride span,
never the call's own inputs) instead of running. What is left in the outputs was put
there by torch: an output unchanged from the real run means the kernels compute
nothing; more than :data:`MAX_TORCH_WRITTEN_SHARE` of an output holding input data is
torch doing the work through copies, fills and slice assignments; and a kernel handed
a tensor that already holds the finished output only moves torch's answer into place.
"""

from __future__ import annotations

from typing import Any

#: Share of an output that torch's allowed ops may write with the kernels off (glue such as a
#: pass-through half of a partial rotary embedding); more means torch computes the output.
MAX_TORCH_WRITTEN_SHARE = 0.5


def call_ghost(evaluation: Any, candidate, inputs, real_outputs) -> tuple[list[Any] | None, list[Any]]:
    """The candidate's outputs with every launch poisoning its arguments instead of running
    (None when the forward cannot finish that way: it needs what its kernels compute), and
    what torch had put in the tensors those launches were handed."""
    from kgen.evals.candidate_call import call_candidate

    evidence = call_candidate(
        candidate, inputs, evaluation.backend, evaluation.guard, evaluation.device, real_outputs, execute_kernels=False
    )
    evaluation._raise_guard_violation()
    if evidence.error is not None or len(evidence.outputs) != len(real_outputs):
        return None, []
    return evidence.outputs, evidence.handed_to_kernels


def handed_finished_output(handed: list[Any], real_outputs: list[Any]) -> int | None:
    """The index of a real output that some kernel argument already held, bit for bit, before
    the launch (a kernel that copies torch's answer into place)."""
    import torch

    from kgen.evals.candidate_call import bitwise_equal

    for i, out in enumerate(real_outputs):
        if not isinstance(out, torch.Tensor) or out.numel() < 2:
            continue
        flat = out.detach().reshape(-1)
        for tensor in handed:
            if tensor.numel() == flat.numel() and tensor.dtype == flat.dtype:
                if bool(bitwise_equal(tensor.reshape(-1), flat).all()) and not bool((flat == flat[0]).all()):
                    return i
    return None


def torch_written_share(
    first: tuple[list[Any], list[Any]], second: tuple[list[Any], list[Any]], exempt: set[int] | frozenset[int] = frozenset()
) -> tuple[float, int]:
    """(largest share, output index): elements that hold the real output's value with every
    kernel off (not poison) and differ between the two input sets (input data, not a constant)."""
    import torch

    from kgen.evals.candidate_call import bitwise_equal
    from kgen.evals.poison import poison_mask

    worst, worst_index = 0.0, 0
    (real1, ghost1), (_, ghost2) = first, second
    for i, (real, g1, g2) in enumerate(zip(real1, ghost1, ghost2, strict=False)):
        if i in exempt or not all(isinstance(t, torch.Tensor) for t in (real, g1, g2)) or real.numel() == 0:
            continue
        if not (real.shape == g1.shape == g2.shape and real.dtype == g1.dtype == g2.dtype):
            continue
        written = ~poison_mask(g1) & bitwise_equal(g1, real) & ~bitwise_equal(g1, g2)
        share = written.sum().item() / real.numel()
        if share > worst:
            worst, worst_index = share, i
    return worst, worst_index
