"""AST rules over a candidate's source: what a "Triton kernel" solution may not contain.

``check_candidate_source(source)`` parses the candidate (never regexes: an
``import`` alias, ``getattr(torch, "relu")`` or ``from torch import relu as k``
resolve to the same dotted name ``torch.relu`` here) and returns one
:class:`RuleViolation` per finding, each with a stable ``rule`` id, the line,
a one-line message naming ``file:line``, and the :class:`RejectionClass` it
maps to. An empty list means no rule fired. The rules (ids in :data:`RULES`)
come in families, one module each, whose docstring says what they forbid:

* not a kernel (``NOT_A_KERNEL``), :mod:`.torch_math` (operators on tensors:
  :mod:`.tensor_flow`): ``try-except``, ``torch-math``, ``tensor-method``,
  ``tensor-operator``, ``torch-module-call``, ``torch-in-kernel``,
  ``compute-library``;
* state kept across calls (``FORBIDDEN_CONSTRUCT``), :mod:`.state`:
  ``module-cache``, ``global-statement``, ``cache-decorator``,
  ``instance-state``;
* ways out of the sandbox and around the rules (``FORBIDDEN_CONSTRUCT``),
  :mod:`.escapes`: ``stream``, ``monkey-patch``, ``forbidden-import``,
  ``forbidden-call``, ``dunder-access``, ``tensor-subclass``,
  ``torch-private``;
* clocks, environment and process state (``FORBIDDEN_CONSTRUCT``),
  :mod:`.clock_env`: ``clock-env``.

The name lists live in :mod:`.names`, small AST helpers in
:mod:`.ast_helpers`, what every family reads about the module (imports,
classes, kernels, the forward path) and the reporting in :mod:`.context`,
:class:`RuleViolation` and :data:`RULES` in :mod:`.violations`, and the
order the families are asked in (which decides the rule when several could
report one name) in :mod:`.checker`.

Parse errors give one ``syntax-error`` violation (``LOAD_ERROR``). Code
under a module-level ``if __name__ == "__main__":`` is skipped (it never
runs when the candidate is imported), unless the module assigns
``__name__``.

Scope: rules judge code that can run, worked out by :mod:`.reachability`
(module-level code, class bodies, decorators and defaults always run; from
there, the classes bound to ``ModelNew`` and whatever they and the module
reference, followed generously by name: helpers called or handed on as
values, methods reached through ``self``, ``getattr`` strings, dicts of
functions, ``.apply`` of autograd Functions, bases and metaclasses of live
classes). Two scopes, on purpose:

* the torch-math family (``torch-math``, ``tensor-method``,
  ``tensor-operator``, ``torch-module-call``) judges module-level code and
  functions that can run on or after a forward call; not kernel bodies
  (``@triton.jit``, ``@cute.kernel``, ``@cute.jit``: the registry's
  ``kernel_decorators``), not code that runs only while ``ModelNew`` is
  constructed, not code nothing reaches (an uncalled ``get_inputs()``, a pasted ``class
  Model``, unused helpers), not the non-GPU side of a device test
  (:mod:`.device_guard`), not registered-buffer updates or seed draws
  (:mod:`.math_scope`). What it misses, the dispatch recorder
  (``kgen.evals.checks.torch_usage``) sees at run time;
* every other rule (escapes, state, clocks, ``try-except``,
  ``torch-in-kernel``, ``compute-library``) judges everything except bodies
  that nothing could run whatever the analysis misses: a module-level
  function, or the methods of a module-level class, whose name is mentioned
  nowhere else in the module (``get_inputs``, ``get_init_inputs``, a pasted
  ``class Model`` that ``ModelNew`` neither subclasses nor names). These
  rules have no run-time twin to fall back on, so they do not rely on the
  finer analysis. A module binding nothing to ``ModelNew`` is judged whole.
"""

from __future__ import annotations

import ast

from kgen.evals.problem.policies import Policies
from kgen.evals.static_rules.checker import _Checker
from kgen.evals.static_rules.names import (
    ALLOWED_METHODS,
    CLOCK_ENV_MODULES,
    COMPUTE_LIBRARIES,
    COMPUTE_METHODS,
    DUNDER_DENY,
    FORBIDDEN_BUILTINS,
    FORBIDDEN_MODULES,
    FORBIDDEN_SUBMODULES,
    TORCH_ALLOWED,
)
from kgen.evals.static_rules.violations import RULES, RuleViolation
from kgen.evals.verdict import RejectionClass

__all__ = [
    "ALLOWED_METHODS",
    "CLOCK_ENV_MODULES",
    "COMPUTE_LIBRARIES",
    "COMPUTE_METHODS",
    "DUNDER_DENY",
    "FORBIDDEN_BUILTINS",
    "FORBIDDEN_MODULES",
    "FORBIDDEN_SUBMODULES",
    "RULES",
    "TORCH_ALLOWED",
    "RuleViolation",
    "check_candidate_file",
    "check_candidate_source",
    "cpu_fallback_lines",
]


def check_candidate_source(
    source: str, filename: str = "<candidate>", policies: Policies | None = None
) -> list[RuleViolation]:
    """Every rule violation in a candidate's source, ordered by line (empty: none), judged under
    ``policies`` (default: :class:`~kgen.evals.problem.policies.Policies`'s defaults)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        line = exc.lineno or 0
        return [
            RuleViolation(
                rule="syntax-error",
                line=line,
                message=f"{filename}:{line}: syntax error: {exc.msg}",
                rejection=RejectionClass.LOAD_ERROR,
            )
        ]
    return _Checker(tree, filename, policies or Policies()).run()


def cpu_fallback_lines(source: str) -> list[int]:
    """Lines of calls on the non-GPU side of a device test (``if not x.is_cuda: return
    torch.relu(x)``): a CPU fallback, which a CPU run may take where a GPU never would."""
    from kgen.evals.static_rules.device_guard import on_cpu_side

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    checker = _Checker(tree, "<candidate>", Policies())
    checker._collect_bindings()
    checker._collect_structure()
    return sorted({
        node.lineno for node in checker.nodes
        if isinstance(node, ast.Call) and on_cpu_side(node, checker.resolve)
    })


def check_candidate_file(path, policies: Policies | None = None) -> list[RuleViolation]:
    """:func:`check_candidate_source` on a file, reported under its base name."""
    from pathlib import Path

    path = Path(path)
    return check_candidate_source(path.read_text(), filename=path.name, policies=policies)
