"""Every option a person can set, declared once: kgen's settings, the options of one run and
those of one evaluation.

An option used to be spelled out in six places (the settings, the run's options, the
`kgen run` flags, `kgen.generate`'s signature, the default config file, the README) and
they drifted. Each :class:`Option` here says all there is to say about one option: its
type, default and bounds, its `kgen run` flags and help, and its documentation in the
config file. Everything else is computed from this table, never listed by hand:

- the fields of ``kgen.core.settings.Settings`` (config file, ``KGEN_*`` variables),
- the fields of ``kgen.agent.run_options.RunOptions`` (what ``run.json`` keeps),
- the flags of `kgen run`, and of any command that takes a run's options
  (``kgen.cli.option_flags.with_run_options``),
- the signature of ``kgen.generate``,
- the shipped default config file (``render_default_config``),
- the defaults and bounds of ``kgen.evals.harness.EvalOptions`` (``evaluation_field``), and
  the flags of `kgen eval` and `kgen bench` (``kgen.core.evaluation_flags`` says how each of
  those commands spells an option; ``kgen.cli.option_flags.with_command_flags`` makes them).

Adding an option is one entry below (plus the code that uses it). After editing the
table, regenerate the shipped file: ``python -m kgen.core.option_table --write``.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BeforeValidator, Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic.types import StringConstraints

from kgen.backends.device import DeviceChoice
from kgen.backends.registry import DEFAULT_BACKEND, all_backend_info, known_backends
from kgen.backends.targets import DEFAULT_TARGET

NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
ENV_PREFIX = "KGEN_"


def _backend_doc() -> str:
    """The backend option's config comment, from the registry's entries."""
    names = ", ".join(f'"{b.name}" ({b.label})' for b in all_backend_info())
    return (f"Kernel language of the candidates: {names}.\n"
            "`kgen doctor` says whether the chosen one's toolchain is installed.")


@dataclass(frozen=True)
class Option:
    """One option: what it is, where a person sets it, and what each place says about it."""

    #: the Settings / RunOptions field, the config key, the ``kgen.generate`` keyword;
    #: ``KGEN_<NAME>`` is its environment variable
    name: str
    #: the type pydantic validates (Annotated constraints included)
    annotation: Any
    default: Any
    #: what a person should write, for error messages: "KGEN_BUDGET: expected an integer ≥1"
    expected: str
    #: the config file's section and the `--help` panel it is listed under
    section: str
    #: the comment block above the option in the config file; "" continues the block above
    doc: str = ""
    #: `kgen run --help` text, and the option's line in ``help(kgen.generate)``
    help: str = ""
    #: `kgen run` flag names, e.g. ("--model", "-m") or ("--persist/--no-persist",); () = no flag
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    #: the flag's type where typer needs another than the annotation's (e.g. a Path)
    cli_type: Any = None
    #: the config file's value line (TOML) where the default is None and so cannot be shown
    example: str | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    #: "setting": a field of Settings (config file, KGEN_*, flag, API argument);
    #: "run": this run's alone (flag and API argument only), e.g. seed or out;
    #: "evaluation": one evaluation's alone (`kgen eval` / `kgen bench` flags, ``kgen.evaluate``
    #: keywords), e.g. n_seeds: no setting and no option of a run
    scope: Literal["setting", "run", "evaluation"] = "setting"
    #: how a run gets it: "copied" (a RunOptions field of the same name, type and default),
    #: "resolved" (the run takes a resolved form: kb -> its location, problem -> problem_file,
    #: out -> start_run), None (not a run's option but the kgen process's, e.g. the API keys)
    run: Literal["copied", "resolved"] | None = "copied"
    #: the ``EvalOptions`` field this option is (its default and bounds come from here), named
    #: as one evaluation calls it (eval_timeout_s: timeout_s); None: not an evaluation's option
    eval_field: str | None = None
    #: a relative directory in the config file is relative to that file
    relative_to_config: bool = False

    @property
    def env_var(self) -> str:
        """``budget`` -> ``KGEN_BUDGET``."""
        return ENV_PREFIX + self.name.upper()

    @property
    def is_setting(self) -> bool:
        return self.scope == "setting"

    @property
    def is_list(self) -> bool:
        return get_origin(_without_none(self.annotation)) is list

    @property
    def is_optional(self) -> bool:
        """None is a value (no limit, not set, as the request says)."""
        return _allows_none(self.annotation)

    @property
    def is_secret(self) -> bool:
        return _without_none(self.annotation) is SecretStr

    def full_help(self) -> str:
        """The help text, with where a setting's default comes from unless it says so itself."""
        if not self.is_setting or "Default:" in self.help:
            return self.help
        shown = "not set" if self.default is None else toml_value(self.default)
        return f"{self.help} Default: {self.name} as configured, else {shown}."

    def default_value(self) -> Any:
        """The default, a fresh copy where it is a list."""
        return list(self.default) if isinstance(self.default, list) else self.default

    def field(self) -> tuple[Any, FieldInfo]:
        """The pydantic field ``(annotation, FieldInfo)`` of Settings and RunOptions."""
        return self.annotation, self.field_info()

    def field_info(self) -> FieldInfo:
        """The option's default (a fresh list each time, where it is a list) and bounds."""
        bounds = {key: value for key, value in (("ge", self.ge), ("gt", self.gt), ("le", self.le))
                  if value is not None}
        if isinstance(self.default, list):
            return Field(default_factory=self.default_value, **bounds)
        return Field(default=self.default, **bounds)

    def public_type(self) -> Any:
        """The type a person passes, constraints left out: ``list[str]`` for ``list[NonEmpty]``."""
        return _plain(self.annotation)

    def flag_type(self) -> Any:
        """The type typer parses the flag as; None stands for "not given" unless the default is a value."""
        if self.cli_type is not None:
            return self.cli_type
        scalar = self.flag_scalar()
        return scalar if self.scope == "run" and self.default is not None else scalar | None

    def flag_scalar(self) -> Any:
        """What typer can parse for this option: a Literal or a secret is text (the value is checked
        where the option is validated), ``list[NonEmpty]`` is ``list[str]``."""
        return _flag_scalar(self.annotation)


# --------------------------------------------------------------------------------------
# The table. Order: the config file's, section by section; `--help` panels follow it.
# --------------------------------------------------------------------------------------

MODELS, WHAT, SEARCH, EVALUATION, STORAGE = (
    "Models", "What to generate for", "Search", "Evaluation", "Storage")

#: the verifier's policies (``kgen.evals.problem.policies``) by the names a person types
PRECISIONS = ("ieee", "tf32")
TORCH_OPS = ("strict", "library")


def _policy_word(value: Any) -> Any:
    """A policy's name as the verifier reads it (``evals/problem/policies.py``): case and
    surrounding spaces do not matter, in a run's options as in `kgen eval`'s flags."""
    return value.strip().lower() if isinstance(value, str) else value


PolicyWord = BeforeValidator(_policy_word)
#: what each policy means, and where it comes from when not set: shared by the help of `kgen run`
#: and of `kgen eval` / `kgen bench` (``kgen.core.evaluation_flags``)
PRECISION_HELP = ("Precision policy: ieee (fp32 problems are IEEE fp32) or tf32 (TF32 matrix products "
                  "admitted, with their own tolerance).")
PRECISION_DEFAULT = "the problem's KGEN_PRECISION, else ieee."
TORCH_OPS_HELP = ("Torch ops policy: strict (every compute op in the candidate's kernels) or library "
                  "(vendor matmul/conv/attention calls allowed, the rest in kernels).")
TORCH_OPS_DEFAULT = ("the problem's KGEN_TORCH_OPS, else library for plain KernelBench files and "
                     "strict for kgen's catalog.")

OPTIONS: tuple[Option, ...] = (
    Option(
        name="models", annotation=list[NonEmpty], default=[], section=MODELS,
        expected="a list of non-empty model strings such as 'openai:gpt-5'",
        flags=("--model", "-m"),
        help="Model to ask, repeatable: openai:gpt-5, anthropic:claude-sonnet-4-5, "
             "openai:NAME@http://host:8000/v1 (local server; ...#VAR sends it the key in $VAR), "
             "NAME*2 for weight 2. Default: models as configured, else none (offline mode).",
        doc="""\
The LLMs that propose candidate kernels, as "provider:model". Several models
form a mixture; a "*N" suffix gives one N times the default weight of 1, so it
is asked proportionally more often. "provider:model@URL" talks to any server
that speaks the OpenAI (or Anthropic) protocol, e.g. vLLM or Ollama on this machine.
An empty list is offline mode: no network, no key; kgen retrieves the best known
kernels from the knowledge base and tunes their parameters for the target.
Examples:
  models = ["openai:gpt-5"]
  models = ["openai:gpt-5*2", "anthropic:claude-sonnet-4-5"]
  models = ["openai:qwen2.5-coder@http://127.0.0.1:8000/v1"]
  models = ["anthropic:claude-sonnet-4-5*3", "openai:qwen2.5-coder@http://127.0.0.1:8000/v1"]""",
    ),
    Option(
        name="openai_api_key", annotation=SecretStr | None, default=None, section=MODELS,
        expected="a non-empty string", example='"sk-..."', run=None,
        doc="""\
API keys. The providers also read OPENAI_API_KEY and ANTHROPIC_API_KEY from the
environment, which is usually the better place for them; a key set here wins.
kgen never prints a key and never passes one to a candidate kernel's process.
A provider's key goes only to that provider's official API. To send a key to a
server named by "@URL", name its environment variable after the URL:
"openai:m@https://llm.example.com/v1#MY_LLM_KEY" reads $MY_LLM_KEY, and
"...#OPENAI_API_KEY" sends the OpenAI key (this file's or the environment's) there.
Default: not set.""",
    ),
    Option(
        name="anthropic_api_key", annotation=SecretStr | None, default=None, section=MODELS,
        expected="a non-empty string", example='"sk-ant-..."', run=None,
    ),
    Option(
        name="llm_timeout_s", annotation=float, default=300.0, gt=0, section=MODELS,
        expected="a number of seconds >0", flags=("--llm-timeout",), metavar="SECONDS",
        help="Deadline of one model call: every attempt, the waits between them and a reply "
             "however slowly it arrives; a model that has not answered by then gives no "
             "candidate this time.",
        doc="""\
The most one model call may take, in seconds: every attempt, every wait between
attempts and a reply that arrives byte by byte all count. A model that has not
answered by then gives no candidate this time and the run goes on; a run's time
limit (time_s) also ends the calls still waiting when it runs out.""",
    ),
    Option(
        name="llm_retries", annotation=int, default=3, ge=0, section=MODELS,
        expected="an integer ≥0", flags=("--llm-retries",), metavar="N",
        help="How often a failed model call (rate limit, HTTP 5xx, dropped connection) is "
             "tried again, within --llm-timeout.",
        doc="""\
How often a model call that failed (rate limited, HTTP 5xx, dropped connection) is
tried again, with backoff, within llm_timeout_s (0 = never).""",
    ),
    Option(
        name="backend", annotation=NonEmpty, default=DEFAULT_BACKEND, section=WHAT, run="resolved",
        expected=f"a backend name: {', '.join(known_backends())}", flags=("--backend",),
        eval_field="backend",
        help=f"Kernel language: {' or '.join(known_backends())}. Default: backend as configured, "
             f"else the request's, else {DEFAULT_BACKEND}.",
        doc=_backend_doc(),
    ),
    Option(
        name="targets", annotation=list[NonEmpty], default=[], section=WHAT,
        expected="a list of hardware target names such as 'h100'", flags=("--target", "-t"),
        eval_field="targets",
        help="Hardware target, repeatable (h100, mi300x, ...). Default: targets as configured, "
             f"else the request's, else the local GPU's, else {DEFAULT_TARGET}.",
        doc=f"""\
Hardware targets to compile every candidate for, whether or not that GPU is
present: h100, h100-pcie, h200, b200, a100, l40s, mi300x (`kgen targets` lists
them and their aliases). Empty = the local GPU's target, or {DEFAULT_TARGET} on a machine
without a GPU. Kernels are timed only on the GPU that is actually present.
Example:
  targets = ["h100", "mi300x"]""",
    ),
    Option(
        name="device", annotation=DeviceChoice, default="auto", section=WHAT,
        expected="one of auto, cpu, cuda", flags=("--device",), eval_field="device",
        help="Where candidates run: auto, cpu or cuda.",
        doc="""\
Where candidates run: "auto" (the GPU if torch sees one), "cpu" (Triton's
interpreter: verification only, no timings) or "cuda" (fail if there is no GPU).""",
    ),
    Option(
        name="problem", annotation=str | Path | None, default=None, section=WHAT, scope="run",
        run="resolved", expected="a problem file", flags=("--problem",), cli_type=Path | None,
        help="Your own KernelBench-format problem file instead of the catalog.",
    ),
    Option(
        name="budget", annotation=int, default=12, ge=1, section=SEARCH,
        expected="an integer ≥1", flags=("--budget",), help="Candidates to evaluate in all.",
        doc="How many candidate kernels one run may evaluate, in total (at least 1).",
    ),
    Option(
        name="generations", annotation=int, default=3, ge=1, section=SEARCH,
        expected="an integer ≥1", flags=("--generations",), help="Generations of the search.",
        doc="How many rounds of generate -> evaluate -> select one run makes (at least 1).",
    ),
    Option(
        name="time_s", annotation=float | None, default=None, gt=0, section=SEARCH,
        expected="a number of seconds >0", example="3600", flags=("--time",), metavar="SECONDS",
        help="Wall-clock limit of the run, seconds; model calls still waiting when it runs out "
             "are ended. Default: time_s as configured, else no limit.",
        doc="""\
Wall-clock limit for one run, in seconds: no new candidate starts after it;
the best kernel found so far is the result. Default: no limit.""",
    ),
    Option(
        name="max_cost_usd", annotation=float | None, default=None, ge=0, section=SEARCH,
        expected="a number ≥0", example="5.0", flags=("--max-cost",), metavar="USD",
        help="Stop once model calls cost this many USD. Default: max_cost_usd as configured, "
             "else no limit.",
        doc="""\
Spending limit for one run's model calls, in US dollars, from the token usage
the providers report. Default: no limit.""",
    ),
    Option(
        name="islands", annotation=int, default=2, ge=1, section=SEARCH,
        expected="an integer ≥1", flags=("--islands",), metavar="N",
        help="Islands of the search archive per target: populations that evolve apart, so "
             "one early winner does not crowd out other approaches.",
        doc="""\
Islands of the search archive per target (at least 1): populations of kernels
that evolve apart, so one early winner does not crowd out other approaches.""",
    ),
    Option(
        name="plateau_generations", annotation=int, default=2, ge=0, section=SEARCH,
        expected="an integer ≥0", flags=("--plateau",), metavar="N",
        help="Stop after this many generations in a row without a faster verified kernel; "
             "0: never stop early.",
        doc="""\
Stop the search after this many generations in a row without a faster verified
kernel; 0 = never stop early (the budget, generations and limits still apply).""",
    ),
    Option(
        name="target_pct_of_sol", annotation=float | None, default=None, gt=0, le=100,
        section=SEARCH, expected="a percentage >0 and ≤100", example="80",
        flags=("--stop-at-sol",), metavar="PCT",
        help="Stop once the best kernel reaches this percent of the target's speed-of-light "
             "(the roofline floor its bytes and FLOPs set). Default: target_pct_of_sol as configured, "
             "else no such stop.",
        doc="""\
Stop the search once the best kernel reaches this percent of the target's
speed-of-light: the roofline floor its bytes and FLOPs set at the GPU's bandwidth
and matrix rate (a problem that declares neither has none, and this never stops it).
More than 0, at most 100. Default: not set (the search goes on).""",
    ),
    Option(
        name="seed", annotation=int, default=0, section=SEARCH, scope="run", expected="an integer",
        flags=("--seed",),
        help="Seed of the search's random choices (verification always draws fresh seeds).",
    ),
    Option(
        name="eval_timeout_s", annotation=float, default=300.0, gt=0, section=EVALUATION,
        expected="a number of seconds >0", eval_field="timeout_s",
        help="Hard time limit for one candidate's sandboxed process, seconds.",
        doc="Hard time limit for one candidate's sandboxed process (compile, verify, time), "
            "seconds.",
    ),
    Option(
        name="train_check", annotation=bool, default=False, section=EVALUATION,
        expected="true or false", flags=("--train-check",), eval_field="train_check",
        help="Train a small model with the winner's gradients.",
        doc="""\
Backward kernels: also train a small model a few hundred steps with the
candidate's gradient and compare the loss curve with the reference's. Catches
gradients that pass numeric checks and still break training; costs minutes.""",
    ),
    Option(
        name="precision", annotation=Annotated[Literal[PRECISIONS], PolicyWord] | None, default=None, section=EVALUATION,
        expected=f"one of {', '.join(PRECISIONS)}", example='"tf32"', flags=("--precision",),
        eval_field="precision",
        help=f"{PRECISION_HELP} Default: precision as configured, else {PRECISION_DEFAULT}",
        doc="""\
The verifier's policies for every evaluation of a run. A problem file may declare its
own (its KGEN_PRECISION and KGEN_TORCH_OPS constants); a value here overrides it.
precision: "ieee" judges an fp32 problem as IEEE fp32 (a matrix product that rounds its
inputs to TF32 fails, and is named so); "tf32" admits TF32 matrix products, with their
own tolerance. Default: the problem's declaration, else "ieee".""",
    ),
    Option(
        name="torch_ops", annotation=Annotated[Literal[TORCH_OPS], PolicyWord] | None, default=None, section=EVALUATION,
        expected=f"one of {', '.join(TORCH_OPS)}", example='"library"', flags=("--torch-ops",),
        eval_field="torch_ops",
        help=f"{TORCH_OPS_HELP} Default: torch_ops as configured, else {TORCH_OPS_DEFAULT}",
        doc="""\
torch_ops: "strict" wants every compute op in the candidate's own kernels; "library"
allows torch's matrix-multiply, convolution and attention calls (cuBLAS, cuDNN, flash
attention) and wants the rest in kernels. Default: the problem's declaration, else
"library" for a plain KernelBench file and "strict" for kgen's catalog.""",
    ),
    Option(
        name="executor", annotation=Literal["local", "ray"], default="local", section=EVALUATION,
        expected="one of local, ray", flags=("--executor",), metavar="local|ray",
        help="Where candidates are evaluated: local (every GPU of this machine, a lane each) or ray "
             "(the GPUs of a Ray cluster; see --ray-address).",
        doc="""\
Where candidates are evaluated: "local" (this machine: one lane per visible GPU,
each with its own verifiers and each candidate timed alone on its GPU) or "ray"
(a Ray cluster: one actor per GPU of the target's model; `pip install kgen[ray]`
here and on every node).""",
    ),
    Option(
        name="ray_address", annotation=NonEmpty | None, default=None, section=EVALUATION,
        expected="auto, HOST:PORT or ray://HOST:PORT", example='"auto"', flags=("--ray-address",),
        metavar="ADDRESS",
        help="The Ray cluster for --executor ray: auto (RAY_ADDRESS, else the cluster started on this "
             "machine by `ray start --head`), HOST:PORT or ray://HOST:PORT.",
        doc="""\
The Ray cluster of executor "ray": "auto" (RAY_ADDRESS, else a cluster started
on this machine with `ray start --head`), "HOST:PORT" or "ray://HOST:PORT".
Default: RAY_ADDRESS, else "auto".""",
    ),
    Option(
        name="gpus", annotation=int | None, default=None, ge=1, section=EVALUATION,
        expected="an integer ≥1", example="4", flags=("--gpus",), metavar="N",
        help="GPUs to evaluate on, a lane each; with --device cpu, the CPU lanes of executor ray. "
             "Default: gpus as configured, else every GPU the executor finds.",
        doc="""\
How many GPUs the executor uses, a lane each. Default: every visible GPU of this
machine (local) or every GPU of the target's model in the cluster (ray).""",
    ),
    # one evaluation's own options: `kgen eval` / `kgen bench` flags and kgen.evaluate keywords
    Option(
        name="seeds", annotation=list[int] | None, default=None, section=EVALUATION, scope="evaluation",
        run=None, eval_field="seeds", expected="a list of integer seeds",
        help="Fixed seed (repeatable), to reproduce a failure. Default: fresh seeds.",
    ),
    Option(
        name="n_seeds", annotation=int, default=3, ge=1, section=EVALUATION, scope="evaluation",
        run=None, eval_field="n_seeds", expected="an integer ≥1", help="How many fresh seeds to try.",
    ),
    Option(
        name="small_sizes", annotation=bool, default=False, section=EVALUATION, scope="evaluation",
        run=None, eval_field="small_sizes", expected="true or false",
        help="Use the problem's small size set even on a GPU (a quick check).",
    ),
    Option(
        name="distributions", annotation=bool, default=True, section=EVALUATION, scope="evaluation",
        run=None, eval_field="distributions", expected="true or false",
        help="Run the input distributions beyond the problem's own inputs (N(0, 1) where those are of one sign, magnitudes, precision probes, skewed ids).",
    ),
    Option(
        name="bench", annotation=bool, default=False, section=EVALUATION, scope="evaluation",
        run=None, eval_field="bench", expected="true or false",
        help="After verification, time it against eager and torch.compile (GPU).",
    ),
    Option(
        name="kb", annotation=NonEmpty | None, default=None, section=STORAGE, run="resolved",
        expected="a directory path or an http(s) URL", example='"~/.kgen/kb"',
        relative_to_config=True, flags=("--kb",), metavar="DIR|URL",
        help="Knowledge base location: a directory or a Chroma server's URL. "
             "Default: kb as configured, else $KGEN_HOME/kb.",
        doc="""\
The knowledge base of verified kernels and optimisation guidance: a directory
(an embedded Chroma database) or the http(s) URL of a Chroma server a team shares.
A relative directory is taken relative to this file. Default: $KGEN_HOME/kb.
Example:
  kb = "http://localhost:8000\"""",
    ),
    Option(
        name="kb_embedding", annotation=NonEmpty, default="kgen-hash", section=STORAGE,
        run="resolved", expected="kgen-hash, sentence-transformers:MODEL or openai:MODEL",
        help="The knowledge base's embedding: kgen-hash, sentence-transformers:MODEL or "
             "openai:MODEL.",
        doc="""\
The embedding the knowledge base ranks kernels with. "kgen-hash" needs no download and
works offline; "sentence-transformers:MODEL" (needs that package and the model) and
"openai:MODEL" (needs OPENAI_API_KEY) are semantic. A store keeps the embedding it was
built with and refuses another: export it and import it into a new store to switch.""",
    ),
    Option(
        name="runs_dir", annotation=NonEmpty | None, default=None, section=STORAGE, run=None,
        expected="a directory path", example='"~/.kgen/runs"', relative_to_config=True,
        doc="""\
Where each run's directory (checkpoint, candidates, report) goes.
A relative directory is taken relative to this file. Default: $KGEN_HOME/runs.""",
    ),
    Option(
        name="out", annotation=str | Path | None, default=None, section=STORAGE, scope="run",
        run="resolved", expected="a directory path", flags=("--out",), cli_type=Path | None,
        help="Run directory (default $KGEN_HOME/runs/<id>).",
    ),
    Option(
        name="persist", annotation=bool, default=True, section=STORAGE, scope="run",
        expected="true or false", flags=("--persist/--no-persist",),
        help="Write winners to the knowledge base.",
    ),
)

_BY_NAME = {option.name: option for option in OPTIONS}
#: the options of one run: `kgen run` flags (where they have one) and ``kgen.generate`` keywords
RUN_OPTION_NAMES: tuple[str, ...] = tuple(o.name for o in OPTIONS if o.run is not None)
_BY_EVAL_FIELD = {option.eval_field: option for option in OPTIONS if option.eval_field}
#: the options of one evaluation, by their ``EvalOptions`` names: `kgen eval` flags (where it has
#: one), ``kgen.evaluate`` keywords
EVAL_OPTION_NAMES: tuple[str, ...] = tuple(_BY_EVAL_FIELD)


def option(name: str) -> Option:
    """The table's entry for ``name``."""
    return _BY_NAME[name]


def eval_option(field: str) -> Option:
    """The table's entry for an ``EvalOptions`` field (``timeout_s`` is eval_timeout_s)."""
    return _BY_EVAL_FIELD[field]


def is_eval_field(name: str) -> bool:
    """Whether ``name`` is an ``EvalOptions`` field the table declares."""
    return name in _BY_EVAL_FIELD


def evaluation_field(field: str) -> FieldInfo:
    """An ``EvalOptions`` field's default and bounds, as the table declares them."""
    return eval_option(field).field_info()


def pydantic_fields(options: Iterable[Option]) -> dict[str, Any]:
    """``create_model`` keyword arguments: one pydantic field per option."""
    return {entry.name: entry.field() for entry in options}


# --------------------------------------------------------------------------------------
# The default config file
# --------------------------------------------------------------------------------------

HEADER = """\
kgen configuration.

kgen reads $KGEN_HOME/config.toml (KGEN_HOME defaults to ~/.kgen), or the file
the KGEN_CONFIG environment variable names. Every option below is commented
out and shows its default; uncomment a line to change it.

Precedence, lowest to highest: built-in defaults < this file < KGEN_<OPTION>
environment variables (KGEN_BUDGET=24, KGEN_MODELS=openai:gpt-5,anthropic:claude-sonnet-4-5)
< command-line flags and Python API arguments.
`kgen config` shows the effective value of every option and where it came from;
`kgen doctor` checks this machine and says what a run will do here.

Generated from kgen/core/option_table.py by `python -m kgen.core.option_table --write`."""


def render_default_config(options: Sequence[Option] = OPTIONS) -> str:
    """The config file that documents every setting, each commented out at its default."""
    lines = [_comment(line) for line in HEADER.splitlines()]
    section = None
    for entry in options:
        if not entry.is_setting:
            continue
        if entry.section != section:
            section = entry.section
            lines += ["", "", f"# --- {section} ".ljust(86, "-")]
        if entry.doc:
            lines.append("")
            lines += [_comment(line) for line in entry.doc.splitlines()]
        flags = f"Flag: {entry.flags[0].split('/')[0]}. " if entry.flags else ""
        lines.append(f"# {flags}Environment: {entry.env_var}.")
        lines.append(f"# {entry.name} = {entry.example or toml_value(entry.default)}")
    return "\n".join(lines) + "\n"


def toml_value(value: Any) -> str:
    """``value`` as TOML writes it: 12, 300, false, "triton", ["h100"]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML spelling for {value!r}: give the option an example")


def _comment(line: str) -> str:
    return f"# {line}".rstrip()


# --------------------------------------------------------------------------------------
# Types: what a person passes, what typer parses
# --------------------------------------------------------------------------------------


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _allows_none(tp: Any) -> bool:
    return tp is type(None) or (_is_union(tp) and type(None) in get_args(tp))


def _without_none(tp: Any) -> Any:
    if not _is_union(tp):
        return tp
    rest = [arg for arg in get_args(tp) if arg is not type(None)]
    return rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007


def _plain(tp: Any) -> Any:
    """``tp`` without Annotated constraints, recursively."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _plain(get_args(tp)[0])
    if origin is list:
        return list[_plain(get_args(tp)[0])]
    if _is_union(tp):
        return Union[tuple(_plain(arg) for arg in get_args(tp))]  # noqa: UP007
    return tp


def _flag_scalar(tp: Any) -> Any:
    """What typer can parse: a Literal or a secret is text (the settings check the value)."""
    tp = _plain(_without_none(tp))
    if get_origin(tp) is list:
        return list[_flag_scalar(get_args(tp)[0])]
    if get_origin(tp) is Literal or tp is SecretStr:
        return str
    return tp


def _main(argv: list[str]) -> int:
    """``python -m kgen.core.option_table [--write|--check]``: print, write or check the shipped file."""
    shipped = Path(__file__).with_name("default_config.toml")
    text = render_default_config()
    if argv == ["--write"]:
        shipped.write_text(text, encoding="utf-8")
        print(f"wrote {shipped}")
        return 0
    if argv == ["--check"]:
        same = shipped.read_text(encoding="utf-8") == text
        print(f"{shipped} is {'up to date' if same else 'stale: python -m kgen.core.option_table --write'}")
        return 0 if same else 1
    if argv:
        print("usage: python -m kgen.core.option_table [--write | --check]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
