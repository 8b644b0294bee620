"""The ghost check's measurements: a candidate's forward with its kernel launches switched off.

Switched off, each launch poisons the tensors it was handed (their whole stride span,
never the call's own inputs) instead of running. What is left in the outputs was put
there by torch: an output unchanged from the real run means the kernels compute
nothing; more than :data:`MAX_TORCH_WRITTEN_SHARE` of an output holding input data is
torch doing the work through copies, fills and slice assignments; and a kernel handed
a tensor that already holds the finished output only moves torch's answer into place.
Copies of the kernels' own results (a tile) copy poison here; the first real run follows
them instead (``copy_tiles.py``).
"""

from __future__ import annotations

from typing import Any

from kgen.evals.verdict import Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.copy_tiles import check_copied_tiles
from kgen.evals.verifier.trial_parts import inputs_for, models, to_device
from kgen.evals.verifier.watched_call import raise_guard_violation, watched_call

#: Share of an output that torch's allowed ops may write with the kernels off (glue such as a
#: pass-through half of a partial rotary embedding); more means torch computes the output.
MAX_TORCH_WRITTEN_SHARE = 0.5


def run_ghost_check(ctx: VerifierContext, problem, seed: int) -> None:
    """With its kernel launches switched off, a real candidate's output must change, and
    torch's allowed ops (copies, fills, slice assignment) may not write most of it.

    Switched off, each launch poisons what it was handed instead of running; an output
    element that still equals the real output, and changes with the inputs, was put
    there by torch. Two input sets tell input data from constants (a zero-filled
    triangle a kernel never needs to touch). The first real run also follows copied values into
    the outputs: a tile done by copies of a kernel's result is named (``copy_tiles.py``)."""
    from kgen.evals.checks.candidate_call import same_outputs

    what = f"ghost check, seed {seed}"
    runs = []
    # the first run's outputs wait for the second beside the reference (on the host when the
    # device has no room for it); each run's inputs, copies and handed tensors go before the next
    keep = ctx.memory.reference_device(problem.sizes)
    for k, run_seed in enumerate((seed, seed + 7907)):
        inputs = real = ghost = handed = None
        ctx.memory.free_between_trials()
        inputs = inputs_for(ctx, problem, run_seed, "normal")
        reference, candidate = models(ctx, problem, seed)
        real = watched_call(ctx, candidate, inputs, ctx.previous_outputs, what, follow_copies=k == 0)
        check_copied_tiles(ctx, real.replicated, what)
        ghost, handed = call_ghost(ctx, candidate, inputs, real.outputs)
        if ghost is None:
            return  # the forward cannot even finish without its kernels: they matter
        finished = handed_finished_output(handed, real.outputs)
        if finished is not None:
            raise Rejected(
                RejectionClass.NOT_A_KERNEL,
                f"a kernel was handed output {finished} already computed by torch's copies and casts "
                f"(a transpose laundered through .to()/clone(), say): it only moves the answer ({what})",
            )
        if k == 0 and same_outputs(ghost, real.outputs):
            raise Rejected(
                RejectionClass.NOT_A_KERNEL,
                "the output is the same with every kernel launch switched off: the kernels do not compute it "
                f"({what})",
            )
        runs.append(([to_device(ctx, o, device=keep) for o in real.outputs],
                     [to_device(ctx, g, device=keep) for g in ghost]))
    # An output the reference itself returns as a view of an input is torch's by definition.
    share, index = torch_written_share(runs[0], runs[1], exempt=ctx.reference_aliases)
    if share > MAX_TORCH_WRITTEN_SHARE:
        raise Rejected(
            RejectionClass.NOT_A_KERNEL,
            f"{share:.0%} of output {index} is input data written by torch's copies, fills or slice "
            f"assignments with every kernel switched off (at most {MAX_TORCH_WRITTEN_SHARE:.0%} may be): "
            f"torch does the work, not the kernels ({what})",
        )


def call_ghost(ctx: VerifierContext, candidate, inputs, real_outputs) -> tuple[list[Any] | None, list[Any]]:
    """The candidate's outputs with every launch poisoning its arguments instead of running
    (None when the forward cannot finish that way: it needs what its kernels compute), and
    what torch had put in the tensors those launches were handed."""
    from kgen.evals.checks.candidate_call import call_candidate

    evidence = call_candidate(
        candidate, inputs, ctx.backend, ctx.guard, ctx.device, real_outputs, execute_kernels=False
    )
    raise_guard_violation(ctx)
    if evidence.error is not None or len(evidence.outputs) != len(real_outputs):
        return None, []
    return evidence.outputs, evidence.handed_to_kernels


def handed_finished_output(handed: list[Any], real_outputs: list[Any]) -> int | None:
    """The index of a real output that some kernel argument already held, bit for bit, before
    the launch (a kernel that copies torch's answer into place)."""
    import torch

    from kgen.evals.checks.candidate_call import bitwise_equal

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

    from kgen.evals.checks.candidate_call import bitwise_equal
    from kgen.evals.checks.poison import poison_mask

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
