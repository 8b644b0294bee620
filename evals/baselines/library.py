"""Library baselines a user would reach for instead of a generated kernel: Liger-Kernel
(Triton, ``liger.py``) and quack (CuTe DSL, ``quack.py``).

Timed only when the library is installed and kgen knows how to call it for the problem
(its ops take the same tensors in the same layout); otherwise the timing reports why it
was not measured. Each baseline is a callable with the problem's input convention, like
the candidate and eager PyTorch. This module is the one place that says which libraries
exist, what their distributions are called and which problems each one serves.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kgen.errors import KgenError
from kgen.evals.problem.format import LoadedProblem


class BaselineUnavailable(KgenError):
    """No such baseline here: not installed, or not wired for this problem."""


#: baseline name -> (its label in messages, its Python distribution, the module of its factories)
LIBRARIES: dict[str, tuple[str, str, str]] = {
    "liger": ("Liger", "liger-kernel", "kgen.evals.baselines.liger"),
    "quack": ("quack", "quack-kernels", "kgen.evals.baselines.quack"),
}


def problem_eps(problem: LoadedProblem, default: float) -> float:
    """The problem's epsilon: its ``EPS`` constant, else a number given to its model, else ``default``."""
    eps = getattr(problem.module, "EPS", None)
    if isinstance(eps, (int, float)):
        return float(eps)
    init = problem.get_init_inputs()
    return float(init[0]) if init and isinstance(init[0], (int, float)) else default


def _factories(name: str) -> Any:
    return importlib.import_module(LIBRARIES[name][2])


def library_problems(name: str) -> list[str]:
    """The problems library ``name`` has an op for, as kgen calls it."""
    return sorted(_factories(name).FACTORIES)


def library_baseline(name: str, problem: LoadedProblem) -> Callable[..., Any]:
    """Library ``name``'s op for this problem, or BaselineUnavailable saying why not."""
    label = LIBRARIES[name][0]
    module = _factories(name)
    operation = problem.info.operation
    factory = module.FACTORIES.get(operation)
    if factory is None:
        why = getattr(module, "NOT_WIRED", {}).get(operation)
        raise BaselineUnavailable(f"no {label} baseline wired for {operation}" + (f": {why}" if why else ""))
    return factory(problem)

