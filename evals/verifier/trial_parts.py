"""What every trial and check is made of, made the one way: the problem at some sizes, its
inputs on the device, the reference and the candidate built from one seed, and the
reference's answers in the problem's own dtypes and in fp64.

The trials, the ghost check, the call sequence, the failure diagnosis, the compile and the
timing stage all take their inputs, modules and references from here, so a check never
judges the candidate on inputs laid out or seeded differently from the trials'.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from kgen.evals.problem.format import flatten_outputs, load_problem
from kgen.evals.problem.init_arguments import Number
from kgen.evals.verdict import Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext
from kgen.evals.verifier.watched_call import (
    exception_line,
    raise_guard_violation,
    raise_if_interpreter_limit,
)

if TYPE_CHECKING:
    from kgen.evals.problem.format import LoadedProblem


def to_device(ctx: VerifierContext, value: Any, upcast: bool = False, device: Any = None) -> Any:
    """A tensor moved to ``device`` (default: the context's), in fp64 with ``upcast``; other
    values as they are."""
    torch = ctx.torch
    if isinstance(value, torch.Tensor):
        value = value.to(ctx.device if device is None else device)
        if upcast and value.is_floating_point():
            value = value.to(torch.float64)
    return value


def problem_at(ctx: VerifierContext, sizes: dict[str, int], arguments: dict[str, Number] | None = None) -> LoadedProblem:
    """The problem file executed at ``sizes`` (and with ``arguments`` varied), loaded once per set."""

    key = repr(sorted(sizes.items())) + (repr(sorted(arguments.items())) if arguments else "")
    if key not in ctx.problems:
        ctx.problems[key] = load_problem(ctx.request.problem_path, sizes, arguments)
    return ctx.problems[key]


def inputs_for(ctx: VerifierContext, problem: LoadedProblem, seed: int, distribution: str) -> list[Any]:
    """The trial's inputs on the device, laid out exactly as ``get_inputs()`` laid them out."""
    from kgen.evals.problem.input_distributions import (
        apply_distribution,
        distribution_generator,
    )
    from kgen.evals.problem.layout import copy_inputs

    ctx.memory.decision(problem.sizes)  # a problem this device cannot hold ends here, before allocating
    ctx.sizes_now = dict(problem.sizes)
    ctx.torch.manual_seed(seed)
    if distribution == "normal" and ctx.device.type == "cuda":
        # Drawn on the device from the same seed (reproducible there), not on the host and
        # copied over: at the default sizes a host draw of every input set took seconds per
        # candidate, at full size minutes. The other distributions transform on the host.
        # A get_inputs() the device cannot run (a host generator, numpy) is drawn on the host.
        try:
            with ctx.torch.device(ctx.device):
                return copy_inputs(problem.get_inputs(), ctx.device)
        except (RuntimeError, TypeError, ValueError):
            ctx.torch.manual_seed(seed)
    inputs = apply_distribution(distribution, problem.get_inputs(), distribution_generator(seed, distribution))
    return copy_inputs(inputs, ctx.device)


def models(
    ctx: VerifierContext, problem: LoadedProblem, seed: int, fresh_weights: bool = True, rerun: bool = False
) -> tuple[Any, Any]:
    """The reference and the candidate, built from one seed; with ``fresh_weights`` the
    reference's state is re-drawn and loaded into the candidate (``module_state``). How the
    weights were loaded is recorded in ``ctx.transfer``, except for a ``rerun``: a diagnosis's
    own pair leaves the record of the pair it is diagnosing as it was."""
    from kgen.evals.checks.module_state import WeightTransfer, rerandomise, transfer_weights

    torch = ctx.torch
    torch.manual_seed(seed)
    init = problem.get_init_inputs()
    torch.manual_seed(seed)
    reference = problem.model_class(*init).to(ctx.device)
    torch.manual_seed(seed)
    try:
        with ctx.guard:
            candidate = ctx.module.ModelNew(*init)
    except Exception as exc:  # noqa: BLE001 - untrusted code
        raise_guard_violation(ctx)
        raise_if_interpreter_limit(ctx, exc, "ModelNew(*init_inputs)")
        raise Rejected(
            RejectionClass.CONSTRUCTION_ERROR,
            f"ModelNew(*init_inputs) raised {exception_line(exc, ctx.request.candidate_path)}",
        ) from exc
    transfer = WeightTransfer(how="none")
    if isinstance(candidate, torch.nn.Module):
        # KernelBench semantics: both judged in the mode the reference is constructed in
        # (training: BatchNorm normalises with the batch's statistics).
        candidate = candidate.to(ctx.device).train(reference.training)
        original = copy.deepcopy(reference.state_dict())
        if fresh_weights:
            rerandomise(reference, torch.Generator().manual_seed(seed + 104729))
        transfer = transfer_weights(reference, candidate)
        if not transfer.transferred and fresh_weights:
            # Nothing to load them into: judge both with the seed's weights, as built.
            reference.load_state_dict(original)
    if not rerun:
        ctx.transfer = transfer
    return reference, candidate


def references(ctx: VerifierContext, reference: Any, inputs: list[Any]) -> tuple[list[Any], list[Any]]:
    """The reference's outputs in the problem's own dtypes and in fp64; ``ctx.reference_aliases``
    names the outputs that share storage with an input (a view the candidate may return too), and
    ``ctx.reference_shared`` those that share it with another of its outputs."""
    from kgen.evals.checks.candidate_call import aliased_outputs, shared_outputs
    from kgen.evals.problem.layout import copy_inputs

    where = ctx.memory.reference_device(ctx.sizes_now)
    on_host = where != ctx.device
    with ctx.torch.no_grad():
        # With the reference on the host (the device has no room for it and its fp64 twin),
        # a host copy runs, and its state (running statistics) is handed back after.
        model = copy.deepcopy(reference).to(where) if on_host else reference
        args = copy_inputs(inputs, where if on_host else None)
        native = flatten_outputs(model(*args))
        ctx.reference_aliases = set(aliased_outputs(native, args))
        ctx.reference_shared = set(shared_outputs(native))
        del args
        ref64 = flatten_outputs(
            copy.deepcopy(model).double()(*[to_device(ctx, x, upcast=True, device=where) for x in inputs])
        )
        if on_host:
            reference.load_state_dict(model.state_dict())
    return native, ref64
