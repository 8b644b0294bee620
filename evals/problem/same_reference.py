"""Whether two problem files compute the same thing: a kernel written for one can serve the other.

A kernel is a ``ModelNew`` built with its problem's ``get_init_inputs()`` and called with its
``get_inputs()``. Another problem's kernel can serve a problem only when the two references
agree on that: built with *this* problem's init inputs, called with *this* problem's inputs
(same roles, same order), with this problem's parameters loaded, they give the same outputs.
That is what :func:`reference_difference` runs, in the kgen process, on the problem's CPU sizes
(a few milliseconds of PyTorch, no kernel): it is the cheap screen that decides which problems
a library kernel is worth verifying for. It does not judge any kernel; the verifier does that.

Both references run in fp64 (floating inputs and parameters widened), so two ways of writing
one operation (``torch.softmax`` and ``exp(x - max) / sum``) agree to rounding, while two
operations that are merely close (exact GELU and its tanh approximation, 1e-4 apart) do not.
The comparison runs twice: on the problem's own inputs and on signed N(0, 3^2) ones of the same
shapes, because ``torch.rand`` inputs hide every difference on negative numbers (ReLU and the
identity agree on them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kgen.core.text import counted
from kgen.evals.problem.format import (
    ProblemError,
    ProblemInfo,
    consistent_sizes,
    flatten_outputs,
    halved_to_cap,
    load_problem,
    model_method,
    parse_problem,
)

#: largest difference, relative to the output's largest magnitude, that is still rounding (fp64)
SAME_OUTPUT_RTOL = 1e-7
SEED = 20261127
#: largest value a free size constant keeps in the screen (halved down to it)
SCREEN_SIZE_CAP = 16


def signature(path: Path) -> tuple[int, int] | None:
    """(arguments of ``Model.__init__``, arguments of ``Model.forward``) without ``self``, read
    from the file without running it; None when either takes ``*args`` or is missing. Two
    problems whose references take different numbers of arguments cannot share a kernel."""

    tree = parse_problem(path)
    init, forward = model_method(tree, "__init__"), model_method(tree, "forward")
    if forward is None or any(f is not None and f.args.vararg is not None for f in (init, forward)):
        return None
    counts = [len(f.args.posonlyargs) + len(f.args.args) - 1 if f is not None else 0 for f in (init, forward)]
    return counts[0], counts[1]


def screen_sizes(problem: ProblemInfo) -> list[dict[str, int]]:
    """The size plans the screen tries, smallest first: every free size constant halved to
    ``SCREEN_SIZE_CAP`` (what an operation computes does not depend on its size, and a 4-D
    KernelBench problem at its CPU sizes holds hundreds of millions of elements), then the
    problem's CPU sizes for one whose relations need more room (a kernel wider than its input)."""

    derived = set(problem.derived_sizes)
    rebound = {k: halved_to_cap(v, SCREEN_SIZE_CAP) for k, v in problem.sizes.items() if k not in derived}
    small = consistent_sizes(problem.path, rebound) if problem.derived_sizes else {**problem.sizes, **rebound}
    cpu = problem.cpu_sizes()
    return [small] if small == cpu else [small, cpu]


def _widened(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(torch.float64)
    return value


def _signed(value: Any, generator: Any) -> Any:
    """A floating tensor replaced by N(0, 3^2) of its shape; anything else kept."""
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return 3.0 * torch.randn(value.shape, dtype=torch.float64, generator=generator)
    return value


def _outputs(model_class: type, init_inputs: list[Any], state: dict[str, Any],
             inputs: list[Any]) -> list[Any]:
    import torch

    model = model_class(*init_inputs).to(torch.float64)
    if state or list(model.state_dict()):
        model.load_state_dict(state, strict=True)
    with torch.no_grad():
        return flatten_outputs(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))


def _differs(ours: list[Any], theirs: list[Any]) -> str:
    """Why two output lists differ ("" when they agree to fp64 rounding)."""
    import torch

    if len(ours) != len(theirs):
        return f"{len(theirs)} output(s) instead of {len(ours)}"
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if a != b:
                return f"output {index} differs"
            continue
        if a.shape != b.shape:
            return f"output {index} has shape {tuple(b.shape)}, not {tuple(a.shape)}"
        if not a.is_floating_point() or not b.is_floating_point():
            if not torch.equal(a, b):
                return f"output {index} differs"
            continue
        scale = float(a.abs().max()) if a.numel() else 0.0
        gap = float((a - b).abs().max()) if a.numel() else 0.0
        if not gap <= SAME_OUTPUT_RTOL * max(scale, 1e-30):
            return f"output {index} differs (by up to {gap:.2g}, outputs up to {scale:.2g})"
    return ""


class ProblemReference:
    """A problem's reference run once at its CPU sizes on both trials' inputs, to be compared
    with the references of several other problems (loading and running it is the cost)."""

    def __init__(self, problem: ProblemInfo) -> None:
        self.problem = problem
        self.signature = signature(problem.path)
        self._trials: list[tuple[list[Any], list[Any]]] | None = None

    def _fail(self, exc: Exception) -> ProblemError:
        return ProblemError(f"{self.problem.name}'s reference does not run at its CPU sizes: "
                            f"{type(exc).__name__}: {exc}")

    def trials(self) -> list[tuple[list[Any], list[Any]]]:
        """(inputs, outputs) of the problem's own inputs and of signed ones, in fp64."""
        if self._trials is not None:
            return self._trials
        failure: Exception | None = None
        for sizes in screen_sizes(self.problem):
            try:
                self._trials = self._run(sizes)
                return self._trials
            except Exception as exc:  # too small for its own relations: the next plan
                failure = exc
        assert failure is not None
        raise self._fail(failure) from failure

    def _run(self, sizes: dict[str, int]) -> list[tuple[list[Any], list[Any]]]:
        import torch

        loaded = load_problem(self.problem.path, sizes)
        generator = torch.Generator().manual_seed(SEED)
        torch.manual_seed(SEED)
        self.init_inputs = loaded.get_init_inputs()
        inputs = [_widened(x) for x in loaded.get_inputs()]
        self.state = loaded.model_class(*self.init_inputs).to(torch.float64).state_dict()
        return [(values, _outputs(loaded.model_class, self.init_inputs, self.state, values))
                for values in (inputs, [_signed(x, generator) for x in inputs])]

    def difference(self, other: ProblemInfo) -> str:
        """"" when ``other``'s reference computes this problem's (see the module docstring),
        else why not, in a few words ("takes 2 input(s) ...", "output 0 differs ...").
        ``other`` is only built and called, so its own sizes do not matter. A problem whose
        own reference fails to run is a ProblemError."""

        ours, theirs = self.signature, signature(other.path)
        if ours is None or theirs is None:
            return "its arguments cannot be compared (*args, or no forward)"
        if ours != theirs:
            return (f"takes {counted(theirs[1], 'input')} and {counted(theirs[0], 'init argument')}, "
                    f"where this problem takes {ours[1]} and {ours[0]}")
        trials = self.trials()
        other_class = load_problem(other.path).model_class
        for values, expected in trials:
            try:
                got = _outputs(other_class, self.init_inputs, self.state, values)
            except Exception as exc:
                return f"fails on these inputs ({type(exc).__name__})"
            why = _differs(expected, got)
            if why:
                return why
        return ""


def reference_difference(problem: ProblemInfo, other: ProblemInfo) -> str:
    """``ProblemReference(problem).difference(other)``, for one comparison."""
    return ProblemReference(problem).difference(other)


__all__ = ["SAME_OUTPUT_RTOL", "ProblemReference", "reference_difference", "signature"]
