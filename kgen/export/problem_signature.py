"""A problem read as an op: its arguments, dtypes, layouts, outputs and tolerances.

The op an exported package registers takes the problem's ``forward`` arguments and then its
``Model.__init__`` arguments (their problem values as defaults). What each tensor must be is
what the verifier gave the kernel: the problem's reference is run here once, at its CPU sizes,
on its own ``get_inputs()``: the inputs' dtypes, ranks and layouts, the number of outputs and
their dtypes (hence their tolerances, ``evals/problem/tolerances.py``) come from that run, not
from a second description that could drift from the reference. The reference is trusted code
(the catalog's, or the person's own problem file); the kernel is never run here.
"""

from __future__ import annotations

import ast
from typing import Any

from kgen.errors import KgenUsageError
from kgen.evals.problem.format import (
    ProblemInfo,
    flatten_outputs,
    load_problem,
    model_method,
    parse_problem,
)
from kgen.export.manifest import InitSpec, InputSpec


class ExportError(KgenUsageError):
    """What `kgen export` refuses, in one line: an unverified kernel, an unknown problem or run,
    a run without a winner, a kernel file without ``ModelNew``, a problem no op can stand for."""


class ProblemSignature:
    """The op view of one problem at its CPU sizes."""

    def __init__(self, info: ProblemInfo, inputs: list[InputSpec], init: list[InitSpec],
                 output_dtypes: list[str], small_sizes: dict[str, int]) -> None:
        self.info = info
        self.inputs = inputs
        self.init = init
        self.output_dtypes = output_dtypes
        self.small_sizes = small_sizes

    def tolerances(self) -> list[float]:
        """Per output, the normalised error the verifier allows for its dtype and the problem's
        precision policy."""
        import torch

        from kgen.evals.problem.tolerances import tolerance_for

        precision = self.info.policies().precision
        return [tolerance_for(getattr(torch, d.removeprefix("torch.")), precision).rel_l2 for d in self.output_dtypes]


def _argument_names(info: ProblemInfo, method: str) -> list[str]:
    """The names of ``Model.<method>``'s positional arguments after ``self``; a ``*args`` has no
    names an op schema could carry, so it is refused."""
    node = model_method(parse_problem(info.path), method)
    if node is None:
        return []
    if node.args.vararg is not None or node.args.kwarg is not None:
        raise ExportError(f"problem {info.name}: Model.{method} takes *args/**kwargs; an op needs named arguments")
    return [a.arg for a in node.args.args][1:]


def _scalar_type(value: Any) -> str | None:
    """The op schema's type of a Python scalar (bool before int: a bool is an int)."""
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float")):
        if isinstance(value, kind):
            return name
    return None


def _input_spec(name: str, value: Any, problem: str) -> InputSpec:
    import torch

    from kgen.evals.problem.layout import is_plain_layout

    if isinstance(value, torch.Tensor):
        return InputSpec(name=name, kind="tensor", dtype=str(value.dtype), ndim=value.dim(),
                         layout="contiguous" if is_plain_layout(value) else "as_given",
                         differentiable=value.is_floating_point())
    kind = _scalar_type(value)
    if kind is None:
        raise ExportError(f"problem {problem}: input {name} is a {type(value).__name__}; an op takes tensors "
                          "and int, float or bool scalars")
    return InputSpec(name=name, kind="scalar", type=kind, dtype=kind)


def read_signature(info: ProblemInfo) -> ProblemSignature:
    """Run the reference once at the problem's CPU sizes and read the op it stands for."""
    import torch

    sizes = info.cpu_sizes()
    loaded = load_problem(info.path, sizes)
    torch.manual_seed(0)
    values = loaded.get_inputs()
    init_values = loaded.get_init_inputs()
    forward_names = _argument_names(info, "forward")
    init_names = _argument_names(info, "__init__")
    if len(forward_names) != len(values) or len(init_names) != len(init_values):
        raise ExportError(f"problem {info.name}: Model's arguments ({', '.join(forward_names + init_names)}) do not "
                          "match get_inputs() and get_init_inputs()")
    model = loaded.model_class(*init_values)
    if any(True for _ in model.parameters()) or any(True for _ in model.buffers()):
        raise ExportError(f"problem {info.name}: its Model holds parameters or buffers; `kgen export` makes ops "
                          "of stateless problems (the weights as inputs)")
    init: list[InitSpec] = []
    for name, value in zip(init_names, init_values, strict=True):
        kind = _scalar_type(value)
        if kind is None:
            raise ExportError(f"problem {info.name}: init argument {name} is a {type(value).__name__}; an op "
                              "takes int, float or bool")
        init.append(InitSpec(name=name, type=kind, default=value))  # type: ignore[arg-type]
    inputs = [_input_spec(name, value, info.name) for name, value in zip(forward_names, values, strict=True)]
    with torch.no_grad():
        outputs = flatten_outputs(model(*values))
    if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs):
        raise ExportError(f"problem {info.name}: its reference returns something other than tensors")
    return ProblemSignature(info, inputs, init, [str(o.dtype) for o in outputs],
                            {k: int(v) for k, v in loaded.sizes.items() if isinstance(v, int)})


def defines_model_new(source: str) -> bool:
    """Whether a kernel file defines ``class ModelNew`` at module level (read, not run)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)
