"""``@triton.autotune`` under Triton's CPU interpreter: every config takes its turn.

On a GPU the autotuner benchmarks each config (through the driver's
``do_bench``) the first time it sees a tuning key, keeps the fastest, and runs
that one from then on. The interpreter has no driver, so benchmarking fails
("0 active drivers"); and even if it ran, timings on CPU say nothing about
which config a GPU would pick. A GPU may pick *any* config, so every config
must be correct: here each launch of an autotuned kernel takes the next config
in turn (deterministically, per kernel), and the verifier, which checks every
call's output, sees the wrong one on the call that runs it.

What the GPU's benchmarking leaves behind is kept: the first launch of a new
tuning key first launches every (pruned) config once, unchecked, through
Triton's own ``_bench`` (config ``pre_hook``s, ``reset_to_zero``,
``restore_value``), then makes the reset the autotuner does before the chosen
run. So a kernel that accumulates into its output without ``reset_to_zero``,
or updates an input in place without ``restore_value``, is as wrong here as on
the GPU; that first launch costs one extra run per config. ``key``, ``prune_configs_by`` and stacked ``triton.heuristics`` work
as in Triton's own ``Autotuner.run``; no ``do_bench`` (Triton's or the
candidate's) is ever called.

``autotune_coverage()`` says, per kernel, which configs produced a launch the
verifier could check: "3 of 4 autotune configs exercised".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_ORIGINAL_RUN: Any = None


@dataclass
class AutotuneCoverage:
    """One autotuned kernel: how many configs it has, and which ones a checked launch ran."""

    kernel: str
    configs_total: int
    #: ``str(config)`` of each config that ran a launch whose output the caller saw, first-run order
    configs_run: list[str] = field(default_factory=list)
    launches: int = 0

    @property
    def summary(self) -> str:
        return f"{len(self.configs_run)} of {self.configs_total} autotune configs exercised"


_COVERAGE: dict[str, AutotuneCoverage] = {}
_NAMES: dict[int, str] = {}


def autotune_coverage() -> dict[str, AutotuneCoverage]:
    """Kernel name -> its coverage, for every autotuned kernel launched since the last reset."""
    return dict(_COVERAGE)


def reset_autotune_coverage() -> None:
    """Forget the record (the rotation itself carries on, so later launches keep moving on)."""
    _COVERAGE.clear()
    _NAMES.clear()


def install_autotune_rotation() -> None:
    """Replace ``Autotuner.run`` for this (interpreter) process; idempotent."""
    global _ORIGINAL_RUN
    from triton.runtime.autotuner import Autotuner

    if _ORIGINAL_RUN is None:
        _ORIGINAL_RUN = Autotuner.run
        Autotuner.run = _rotating_run


def uninstall_autotune_rotation() -> None:
    """Put Triton's own ``Autotuner.run`` back."""
    global _ORIGINAL_RUN
    from triton.runtime.autotuner import Autotuner

    if _ORIGINAL_RUN is not None:
        Autotuner.run = _ORIGINAL_RUN
        _ORIGINAL_RUN = None


def _rotating_run(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``Autotuner.run`` with "the next config in turn" in place of "the fastest config"."""
    self.nargs = dict(zip(self.arg_names, args, strict=False))  # as Triton: trailing kwargs are not positional
    try:
        configs = self.prune_configs(kwargs) if len(self.configs) > 1 else list(self.configs)
        key = _tuning_key(self, kwargs)
        turn = getattr(self, "_kgen_turn", 0)
        self._kgen_turn = turn + 1
        config = configs[turn % len(configs)]
        if len(configs) > 1 and key not in self.cache:
            _replay_benchmark(self, args, kwargs, configs, config)
        self.cache[key] = config
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
        result = self.fn.run(*args, **kwargs, **config.all_kwargs())
        _record(self, config)
        return result
    finally:
        self.nargs = None


def _tuning_key(tuner: Any, kwargs: dict[str, Any]) -> tuple:
    """The key Triton's ``Autotuner.run`` tunes by: the ``key`` arguments' values and every tensor's dtype."""
    named = {k: v for k, v in {**tuner.nargs, **kwargs}.items() if k in tuner.arg_names}
    key = [named[name] for name in tuner.keys if name in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def _replay_benchmark(tuner: Any, args: tuple, kwargs: dict[str, Any], configs: list, chosen: Any) -> None:
    """Each config launched once through Triton's own ``Autotuner._bench`` (its hooks,
    ``reset_to_zero``, ``restore_value``; ``launches.py`` files these launches as autotune
    trials), with a "benchmark" that just runs it, then the reset the autotuner makes before
    the chosen run: what a GPU's benchmarking leaves in the arguments, without timing anything."""
    tuner.__dict__["do_bench"] = _run_once  # shadows the cached_property: no driver, no candidate do_bench
    for config in configs:
        tuner._bench(*args, config=config, **kwargs)
    tuner.pre_hook({**tuner.nargs, **kwargs, **chosen.all_kwargs()}, reset_only=True)


def _run_once(kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
    kernel_call()
    return [0.0] * len(quantiles) if quantiles else 0.0


def _record(tuner: Any, config: Any) -> None:
    entry = _COVERAGE.get(_kernel_name(tuner))
    if entry is None:
        entry = _COVERAGE[_kernel_name(tuner)] = AutotuneCoverage(
            kernel=_kernel_name(tuner), configs_total=len(tuner.configs)
        )
    entry.launches += 1
    text = str(config)
    if text not in entry.configs_run:
        entry.configs_run.append(text)


def _kernel_name(tuner: Any) -> str:
    """The kernel's function name; a second autotuned kernel of the same name gets "#2"."""
    name = _NAMES.get(id(tuner))
    if name is None:
        base = getattr(tuner.base_fn, "__name__", "kernel")
        taken = set(_NAMES.values())
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}#{n}"
        _NAMES[id(tuner)] = name
    return name
