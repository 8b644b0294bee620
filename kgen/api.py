"""kgen's Python API: ``kgen.generate(...)`` and ``kgen.evaluate(...)``.

Both take the same options as the command line, resolved the same way
(argument > ``KGEN_*`` environment > ``$KGEN_HOME/config.toml`` > default), and
raise ``KgenUsageError`` for bad input instead of exiting.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from kgen.agent.run_options import RunOptions
from kgen.core.evaluation_flags import EVAL_FLAGS
from kgen.core.option_table import EVAL_OPTION_NAMES, OPTIONS, RUN_OPTION_NAMES, eval_option
from kgen.core.settings import load_settings
from kgen.core.validation_errors import validation_message
from kgen.errors import KgenUsageError
from kgen.evals.harness import EvalOptions
from kgen.evals.harness import evaluate as run_evaluation

if TYPE_CHECKING:
    from kgen.agent.run_options import RunOptions
    from kgen.agent.runs.summary import RunSummary
    from kgen.core.option_table import Option
    from kgen.core.settings import Settings
    from kgen.evals.result import EvalResult


def run_options(request: str, choices: Mapping[str, Any] | None = None, /,
                **more: Any) -> tuple[RunOptions, Settings]:
    """The options of a run from explicit choices over the configuration.

    ``choices`` (and ``more``) map run options (``kgen.core.option_table.RUN_OPTION_NAMES``: the
    ``kgen run`` flags, ``kgen.generate``'s keywords) to values; None or absent means "as
    configured". ``out`` is no option the run keeps (it is where the run goes: ``start_run``
    takes it), so it is accepted and left to the caller.
    """
    import difflib

    from pydantic import ValidationError

    chosen = {**(choices or {}), **more}
    unknown = sorted(set(chosen) - set(RUN_OPTION_NAMES))
    if unknown:
        near = difflib.get_close_matches(unknown[0], RUN_OPTION_NAMES, n=1)
        raise KgenUsageError(f"unknown option(s) {', '.join(unknown)}"
                             + (f" (did you mean {near[0]!r}?)" if near else ""))
    settings = load_settings({o.name: chosen.get(o.name) for o in OPTIONS
                              if o.is_setting and o.run is not None})
    problem = chosen.get("problem")
    if problem is not None and not Path(problem).expanduser().is_file():
        raise KgenUsageError(f"problem file not found: {problem}")
    # a setting the run keeps as is comes from the settings (None there is a value: no limit);
    # a run-only one from the choices, where None means "not given"
    copied: dict[str, Any] = {}
    for entry in OPTIONS:
        if entry.run == "copied" and entry.is_setting:
            copied[entry.name] = getattr(settings, entry.name)
        elif entry.run == "copied" and chosen.get(entry.name) is not None:
            copied[entry.name] = chosen[entry.name]
    try:
        options = RunOptions(
            request=request, problem_file=str(problem) if problem else None,
            backend=settings.backend if settings.sources.get("backend", "default") != "default" else None,
            kb=settings.kb_location, kb_embedding=settings.kb_embedding, **copied,
        )
    except ValidationError as exc:
        raise KgenUsageError(validation_message(exc)) from exc
    return options, settings


def api_keys(settings: Settings) -> dict[str, str]:
    """Each provider's key from kgen's settings (the config file, ``KGEN_OPENAI_API_KEY``, ...).

    Only a provider's key, never a decision: ``kgen.agent.llm.providers.choose_api_key`` decides,
    per model, whether it may be sent (a custom base URL gets it only when the model names it).
    """
    keys = {}
    for provider in ("openai", "anthropic"):
        secret = getattr(settings, f"{provider}_api_key")
        if secret is not None:
            keys[provider] = secret.get_secret_value()
    return keys


def generate(request: str, **options: Any) -> RunSummary:
    """Generate, verify, measure and remember a kernel; the run's summary.

    Every option is keyword-only. A setting defaults to None, "as configured" (``KGEN_*``,
    then ``$KGEN_HOME/config.toml``, then the built-in default), so ``models=[]`` forces
    offline mode; an option of this run alone (not configurable) shows its own default.
    ``progress`` receives the run's event lines. The summary's ``best`` maps each target to
    its best verified kernel (module path, timings, evidence); ``run_dir`` holds every
    candidate, prompt, reply and evaluation. A request over several backends ("..., both
    backends") runs each in turn: ``by_backend`` holds each backend's summary and ``best`` the
    fastest per target. An unknown option is a ``KgenUsageError``.
    """
    from kgen.agent.runs.start import start_run

    progress: Callable[[str], None] | None = options.pop("progress", None)
    run, settings = run_options(request, options)
    out = options.get("out")
    try:
        return start_run(run, runs_dir=settings.runs_location,
                         out=Path(out) if out is not None else None, progress=progress,
                         api_keys=api_keys(settings))
    except FileExistsError as exc:
        raise KgenUsageError(str(exc)) from exc


def _generate_signature(options: Sequence[Option] | None = None) -> inspect.Signature:
    """``generate``'s signature as ``inspect.signature``, IDEs and ``help()`` show it: the
    request, then every run option of ``kgen.core.option_table`` keyword-only (None = as
    configured; a run-only option at its default), then ``progress``."""

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str)]
    for entry in OPTIONS if options is None else options:
        if entry.run is None:
            continue
        if entry.is_setting:
            parameters.append(inspect.Parameter(entry.name, keyword, default=None,
                                                annotation=Optional[entry.public_type()]))  # noqa: UP045
        else:
            parameters.append(inspect.Parameter(entry.name, keyword, default=entry.default,
                                                annotation=entry.public_type()))
    parameters.append(inspect.Parameter("progress", keyword, default=None,
                                        annotation=Optional[Callable[[str], None]]))  # noqa: UP045
    return inspect.Signature(parameters, return_annotation="RunSummary")


def _options_doc() -> str:
    """One line per option for ``help(kgen.generate)``, from the same table."""
    import textwrap

    lines = ["", "    Options (config-file keys and details: ``kgen config --default``):"]
    for entry in OPTIONS:
        if entry.run is not None:
            lines.append(textwrap.fill(f"{entry.name}: {entry.full_help()}", width=92, initial_indent=" " * 8,
                                       subsequent_indent=" " * 12))
    return "\n".join(lines) + "\n"


def _evaluate_options_doc() -> str:
    """One line per option of one evaluation for ``help(kgen.evaluate)``, from the same table:
    what its `kgen eval` flag says, and its default."""
    import textwrap

    helps = {flag.name: flag.help_text() for flag in EVAL_FLAGS}
    lines = ["", "    Options:"]
    for name in EVAL_OPTION_NAMES:
        text, default = helps[name], eval_option(name).default
        if "Default:" not in text and default is not None:
            text += f" Default: {default!r}."
        lines.append(textwrap.fill(f"{name}: {text}", width=92, initial_indent=" " * 8,
                                   subsequent_indent=" " * 12))
    return "\n".join(lines) + "\n"


generate.__signature__ = _generate_signature()  # type: ignore[attr-defined]
generate.__doc__ = (generate.__doc__ or "") + _options_doc()


def evaluate(problem: str | Path, candidate: str | Path, **options: Any) -> EvalResult:
    """Verify (and on a GPU with ``bench=True``, time) one candidate file against a problem.

    ``options`` are :class:`kgen.evals.harness.EvalOptions` fields, each keyword-only; those
    listed below are a person's (`kgen eval`'s flags), the others serve kgen's own callers.
    An unknown option is a ``KgenUsageError``.
    """
    from pydantic import ValidationError

    unknown = sorted(set(options) - set(EvalOptions.model_fields))
    if unknown:
        raise KgenUsageError(f"unknown option(s) {', '.join(unknown)}; known: "
                             f"{', '.join(EvalOptions.model_fields)}")
    try:
        return run_evaluation(problem, candidate, EvalOptions(**options))
    except ValidationError as exc:
        raise KgenUsageError(validation_message(exc)) from exc


evaluate.__doc__ = (evaluate.__doc__ or "") + _evaluate_options_doc()
