"""kgen's Python API: ``kgen.generate(...)`` and ``kgen.evaluate(...)``.

Both take the same options as the command line, resolved the same way
(argument > ``KGEN_*`` environment > ``$KGEN_HOME/config.toml`` > default), and
raise ``KgenUsageError`` for bad input instead of exiting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kgen.agent.reporting import RunSummary
    from kgen.agent.run_options import RunOptions
    from kgen.evals.result import EvalResult
    from kgen.settings import Settings


class KgenUsageError(ValueError):
    """Bad input: an unknown problem or target, an empty request, a missing key, a bad option."""


def run_options(request: str, overrides: dict[str, Any], *, problem: str | Path | None = None,
                seed: int = 0, persist: bool = True, **extra: Any) -> tuple[RunOptions, Settings]:
    """The options of a run from explicit choices over the configuration."""
    from pydantic import ValidationError

    from kgen.agent.run_options import RunOptions
    from kgen.settings import SETTING_NAMES, SettingsError, load_settings
    from kgen.validation_errors import validation_message

    unknown = sorted(set(extra) - set(RunOptions.model_fields))
    if unknown:
        raise KgenUsageError(f"unknown option(s) {', '.join(unknown)}")
    # an option a person can also set in the config file or KGEN_* goes through the settings
    overrides = {**overrides, **{name: extra.pop(name) for name in list(extra) if name in SETTING_NAMES}}

    try:
        settings = load_settings(overrides)
    except SettingsError as exc:
        raise KgenUsageError(str(exc)) from exc
    if problem is not None and not Path(problem).expanduser().is_file():
        raise KgenUsageError(f"problem file not found: {problem}")
    if settings.executor != "local":
        raise KgenUsageError(
            f"executor '{settings.executor}' is not available in this version; use executor = \"local\"")
    try:
        options = RunOptions(
            request=request, problem_file=str(problem) if problem else None, models=settings.models,
            backend=settings.backend if settings.sources.get("backend", "default") != "default" else None,
            targets=settings.targets, device=settings.device, budget=settings.budget,
            generations=settings.generations, time_s=settings.time_s,
            max_cost_usd=settings.max_cost_usd, kb=settings.kb_location, kb_embedding=settings.kb_embedding,
            eval_timeout_s=settings.eval_timeout_s, train_check=settings.train_check,
            llm_timeout_s=settings.llm_timeout_s, llm_retries=settings.llm_retries, seed=seed,
            persist=persist, **extra,
        )
    except ValidationError as exc:
        raise KgenUsageError(validation_message(exc)) from exc
    return options, settings


def api_keys(settings: Settings) -> dict[str, str]:
    """Each provider's key from kgen's settings (the config file, ``KGEN_OPENAI_API_KEY``, ...).

    Only a provider's key, never a decision: ``kgen.agent.providers.choose_api_key`` decides,
    per model, whether it may be sent (a custom base URL gets it only when the model names it).
    """
    keys = {}
    for provider in ("openai", "anthropic"):
        secret = getattr(settings, f"{provider}_api_key")
        if secret is not None:
            keys[provider] = secret.get_secret_value()
    return keys


def generate(
    request: str,
    *,
    models: list[str] | None = None,
    targets: list[str] | None = None,
    backend: str | None = None,
    budget: int | None = None,
    generations: int | None = None,
    time_s: float | None = None,
    max_cost_usd: float | None = None,
    problem: str | Path | None = None,
    kb: str | None = None,
    out: str | Path | None = None,
    device: str | None = None,
    llm_timeout_s: float | None = None,
    llm_retries: int | None = None,
    seed: int = 0,
    persist: bool = True,
    progress: Callable[[str], None] | None = None,
    **run_extra: Any,
) -> RunSummary:
    """Generate, verify, measure and remember a kernel; the run's summary.

    ``models=[]`` forces offline mode; ``None`` means "as configured". ``time_s`` bounds the
    run, model calls included; ``llm_timeout_s`` bounds one model call (every attempt and a
    reply however slowly it comes), ``llm_retries`` how often a failed call is tried again
    within it. The summary's ``best`` maps each target to its best verified kernel (module
    path, timings, evidence); ``run_dir`` holds every candidate, prompt, reply and evaluation.
    """
    from kgen.agent.graph import RunError
    from kgen.agent.runs import start_run

    options, settings = run_options(
        request,
        {"models": models, "targets": targets, "backend": backend, "budget": budget,
         "generations": generations, "time_s": time_s, "max_cost_usd": max_cost_usd, "kb": kb,
         "device": device, "llm_timeout_s": llm_timeout_s, "llm_retries": llm_retries},
        problem=problem, seed=seed, persist=persist, **run_extra,
    )
    try:
        return start_run(options, runs_dir=settings.runs_location,
                         out=Path(out) if out is not None else None, progress=progress,
                         api_keys=api_keys(settings))
    except (RunError, FileExistsError) as exc:
        raise KgenUsageError(str(exc)) from exc


def evaluate(problem: str | Path, candidate: str | Path, **options: Any) -> EvalResult:
    """Verify (and on a GPU with ``bench=True``, time) one candidate file against a problem.

    ``options`` are :class:`kgen.evals.harness.EvalOptions` fields: device, targets, seeds,
    n_seeds, timeout_s, small_sizes, distributions, train_check, bench.
    """
    from pydantic import ValidationError

    from kgen.evals.harness import EvalOptions, UsageError
    from kgen.evals.harness import evaluate as run_evaluation
    from kgen.validation_errors import validation_message

    unknown = sorted(set(options) - set(EvalOptions.model_fields))
    if unknown:
        raise KgenUsageError(f"unknown option(s) {', '.join(unknown)}; known: "
                             f"{', '.join(EvalOptions.model_fields)}")
    try:
        return run_evaluation(problem, candidate, EvalOptions(**options))
    except ValidationError as exc:
        raise KgenUsageError(validation_message(exc)) from exc
    except UsageError as exc:
        raise KgenUsageError(str(exc)) from exc
