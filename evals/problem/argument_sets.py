"""Which constructor arguments a verifier varies for one problem: the plan the parent hands down.

``init_arguments.py`` finds a problem's arguments other than sizes and the values each may
take, from the file's text; an axis's other values depend on the rank of the inputs, which
is read here from the reference's ``get_inputs()`` run on storage-less meta tensors (as
``size_sets.py`` reads shapes). The child runs one extra trial per variation, after the size
sets (``verifier/argument_trials.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kgen.evals.problem.format import ProblemInfo, load_problem, parse_problem
from kgen.evals.problem.init_arguments import ArgumentVariation, argument_variations, find_arguments


def input_rank(info: ProblemInfo, sizes: Mapping[str, int]) -> int | None:
    """The largest number of axes among the problem's tensor inputs at ``sizes``; None when
    its inputs cannot be made on meta tensors."""
    import torch

    try:
        problem = load_problem(info.path, sizes)
        with torch.device("meta"):
            inputs = problem.get_inputs()
    except Exception:  # noqa: BLE001 - a problem whose inputs need real storage: no answer
        return None
    ranks = [v.dim() for v in inputs if isinstance(v, torch.Tensor)]
    return max(ranks) if ranks else None


def argument_plan(info: ProblemInfo, sizes: Mapping[str, int]) -> list[ArgumentVariation]:
    """Every variation of every argument other than a size that the problem hands its model."""
    tree = parse_problem(info.path)
    arguments = find_arguments(tree)
    if not arguments:
        return []
    rank = input_rank(info, sizes) if any(a.role == "axis" for a in arguments) else None
    return argument_variations(tree, rank)
