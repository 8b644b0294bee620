"""Forbidden constructs (``FORBIDDEN_CONSTRUCT``): clocks, environment and process state.

A kernel that switches to an approximation some minutes after import, or
behaves differently depending on environment variables, the process, the
host, or whether it is being watched, passes a verifier that runs it right
after import. So a candidate may not look at any of them:

* ``clock-env`` — importing (any alias, ``from x import y as z``) a module
  in :data:`CLOCK_ENV_MODULES`: clocks and dates (``time``, ``datetime``,
  ``calendar``, ``zoneinfo``, ``timeit``), randomness (``random``,
  ``secrets``, ``uuid``), the host, user and locale (``platform``,
  ``getpass``, ``pwd``, ``grp``, ``locale``), the call stack and profilers
  (``traceback``, ``cProfile``, ``profile``); reaching one through another
  module's attributes (``torch.platform``, ``torch.cuda.traceback``, also
  the state modules that are already ``forbidden-import``: ``resource``,
  ``sysconfig``, ``site``, ``atexit``, ``sched``, ``psutil``,
  ``faulthandler``, ``tracemalloc``); ``triton.testing`` benchmarking and
  host probes (``do_bench*``, ``nvsmi``, ``set_gpu_clock``,
  ``get_dram_gbps`` ..., all but ``assert_close``); ``triton.knobs`` (reads
  and writes environment variables); torch's allocator, RNG, sensor and
  profiler state (:data:`_TORCH_STATE_SEGMENTS`: ``torch.cuda.memory_allocated``,
  ``memory_reserved``, ``max_memory_allocated``, ``memory_stats``,
  ``mem_get_info``, ``utilization``, ``temperature``, ``power_draw``,
  ``clock_rate``, ``list_gpu_processes``, ``is_current_stream_capturing``,
  ``get_rng_state``, ``initial_seed``, ``seed``, ``default_generator``,
  ``torch.random.*``, ``torch.cuda.random.*``, ``torch.cuda.memory.*``,
  ``torch.autograd.profiler``, ``torch.monitor`` ...: reading them is how a
  candidate tells the checker's calls from timing calls); inspecting the
  allocator through a tensor (``.untyped_storage()``, ``.storage()``,
  ``._typed_storage()``, ``._base``, ``torch.UntypedStorage``: a padded or
  guarded check buffer is bigger than the view it is handed); and frame
  introspection (``.gi_frame``, ``.f_back``, ``.f_globals`` ...: the call
  stack says who is calling). ``getattr(x, "literal")`` counts as ``x.literal``.

Fine, and not flagged: ``warnings``, ``hashlib``, ``torch.cuda.synchronize``,
``storage_offset()``, the device queries on the allow list
(``torch.cuda.get_device_properties``/``get_device_name``), setting a seed
(``torch.manual_seed``, ``torch.cuda.manual_seed``; the evaluation reseeds
before every trial), drawing from torch's generator (``torch.randint(0,
2**31, (1,)).item()`` for a dropout seed: the verifier seeds it, so the draw
is reproducible; reading or replacing its state is not), and names that merely look alike (a local ``time``, a
``dt`` parameter, ``self.seed``, ``TIME_STEPS``). ``os.environ`` and
``os.getenv`` are ``forbidden-import`` through ``os``. Imports of these
modules are reported at the import, not at each use.
"""

from __future__ import annotations

import ast

from kgen.evals.static_rules.ast_helpers import _is_self
from kgen.evals.static_rules.context import _Context
from kgen.evals.static_rules.names import (
    _CLOCK_ENV_SEGMENTS,
    _TORCH_STATE_SEGMENTS,
    _TRITON_TESTING_OK,
    CLOCK_ENV_MODULES,
    FORBIDDEN_MODULES,
    FRAME_ATTRS,
    STORAGE_ATTRS,
)

#: Triton names (``tl.extra.cuda.globaltimer``, ``clock``, ``smid``) that read the GPU's clocks or placement.
_DEVICE_CLOCKS = frozenset({"globaltimer", "globaltimer_lo", "globaltimer_hi", "clock", "clock64", "smid", "nsmid"})
#: Inline-assembly registers with the same information.
_ASM_CLOCKS = ("%globaltimer", "%clock", "%smid", "%nsmid", "s_memtime", "s_memrealtime")

CLOCK_ENV_MESSAGE = "clocks, environment and process state make a kernel's behaviour depend on when and where it runs"
_ALLOCATOR_MESSAGE = "inspecting the allocator (a check buffer's storage is bigger than the view it is handed)"
_FRAME_MESSAGE = "frame introspection (the call stack says whether the checker or the timer is calling)"


def clock_env_reason(chain: str) -> str | None:
    """Why the dotted name ``chain`` (an import path or a resolved name) is ``clock-env``, or None."""
    parts = chain.split(".")
    top = parts[0]
    if top in CLOCK_ENV_MODULES:
        return CLOCK_ENV_MESSAGE
    segment = next((p for p in parts[1:] if p in _CLOCK_ENV_SEGMENTS), None)
    if segment is not None:
        return f"reaches the `{segment}` module: {CLOCK_ENV_MESSAGE}"
    if top == "triton" and any(p in _DEVICE_CLOCKS for p in parts[1:]):
        return f"a device clock or SM id read inside a kernel: {CLOCK_ENV_MESSAGE}"
    if top == "triton" and len(parts) >= 2 and parts[1] == "knobs":
        return f"triton.knobs reads the environment: {CLOCK_ENV_MESSAGE}"
    if top == "triton" and len(parts) >= 3 and parts[1] == "testing" and parts[2] not in _TRITON_TESTING_OK:
        return f"benchmarking and host probes: {CLOCK_ENV_MESSAGE}"
    if top == "torch":
        segment = next((p for p in parts[1:] if p in _TORCH_STATE_SEGMENTS or p.endswith("Storage")), None)
        if segment is None:
            return None
        if segment in ("storage", "untyped_storage") or segment.endswith("Storage"):
            return _ALLOCATOR_MESSAGE
        return CLOCK_ENV_MESSAGE
    return None


class _ClockEnvRules(_Context):
    """clock-env."""

    def _import_clock_env(self, node: ast.AST, module: str) -> bool:
        reason = clock_env_reason(module)
        if reason is not None:
            self.report("clock-env", node, f"import of `{module}`: {reason}")
            return True
        return False

    def _dotted_clock_env(self, node: ast.AST, chain: str, shown: str) -> bool:
        """A resolved name: torch's process state, triton.testing, a clock module re-exported."""
        top = chain.split(".")[0]
        if top in CLOCK_ENV_MODULES or top in FORBIDDEN_MODULES:
            return False  # reported at the import
        reason = clock_env_reason(chain)
        if reason is not None:
            self.report("clock-env", node, f"`{shown}`: {reason}")
            return True
        return False

    def _attribute_clock_env(self, node: ast.Attribute) -> None:
        """``x.untyped_storage()``, ``x._base``, ``gen.gi_frame.f_back`` on an unresolved receiver."""
        if _is_self(node.value):
            return  # the candidate's own attribute of that name
        self._attr_name_clock_env(node, node.attr, f"`.{node.attr}`")

    def _getattr_clock_env(self, node: ast.Call, name: str, literal: str | None) -> bool:
        """``getattr(x, "untyped_storage")``: the same attributes by name."""
        if literal is None or name != "getattr" or _is_self(node.args[0]) or self.resolve(node.args[0]) is not None:
            return False  # a resolved receiver is a dotted name, checked as one
        return self._attr_name_clock_env(node, literal, f"getattr(..., {literal!r})")

    def _asm_clock_env(self, node: ast.Call) -> bool:
        """Inline assembly that reads a clock register (``mov.u64 %0, %globaltimer;``)."""
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and any(c in arg.value for c in _ASM_CLOCKS):
                self.report("clock-env", node, f"inline assembly reads a clock register: {CLOCK_ENV_MESSAGE}")
                return True
        return False

    def _attr_name_clock_env(self, node: ast.AST, attr: str, shown: str) -> bool:
        if attr in STORAGE_ATTRS:
            self.report("clock-env", node, f"{shown}: {_ALLOCATOR_MESSAGE}")
            return True
        if attr in FRAME_ATTRS:
            self.report("clock-env", node, f"{shown}: {_FRAME_MESSAGE}")
            return True
        return False
