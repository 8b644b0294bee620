"""The flags of `kgen eval` and `kgen bench`: how each command spells the options of one
evaluation, which ``kgen.core.option_table`` declares.

One option reads differently per command: `kgen eval --timeout` is the hard limit of one
candidate's process (the table's default), `kgen bench --timeout` gives each candidate more;
`kgen run` has no such flag and takes the option from the configuration (eval_timeout_s). So the
table declares the option once (type, default, bounds, the ``EvalOptions`` field it is), and a
:class:`CommandFlag` here says how one command spells it: its flag names, its help, where it
differs its default. ``kgen.cli.option_flags.with_command_flags`` turns a tuple of them into the
command's typer parameters, in the order `--help` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgen.backends.registry import known_backends
from kgen.core.option_table import (
    PRECISION_DEFAULT,
    PRECISION_HELP,
    TORCH_OPS_DEFAULT,
    TORCH_OPS_HELP,
    Option,
    eval_option,
    is_eval_field,
    option,
)

#: a CommandFlag's default where it is its option's
_OPTION_DEFAULT: Any = object()


@dataclass(frozen=True)
class CommandFlag:
    """One flag of `kgen eval` or `kgen bench`, as that command spells and explains it.

    A flag named after an ``EvalOptions`` field sets that option: its type, default and lower
    bound are the option's (a repeatable flag's default is "not given"), unless the command
    says otherwise (`kgen bench` gives a candidate more time). A flag of the command's own
    (``--json``, ``--out``) declares its type and default here. The command receives every
    flag by ``name``.
    """

    #: the parameter the command receives: an ``EvalOptions`` field, or the command's own
    name: str
    #: flag names as typer takes them: ("--target", "-t"), ("--distributions/--no-distributions",)
    flags: tuple[str, ...]
    #: `--help` text; "" is the option's
    help: str = ""
    #: the command's own flags: the type typer parses (None: the option's)
    annotation: Any = None
    default: Any = _OPTION_DEFAULT
    #: the flag's lower bound (typer's ``min``); None: the option's ``ge``
    min: float | None = None

    @property
    def option(self) -> Option | None:
        """The option the flag sets (an ``EvalOptions`` field, else a setting of the same name,
        such as the executor); None for the command's own."""
        if self.annotation is not None:
            return None
        return eval_option(self.name) if is_eval_field(self.name) else option(self.name)

    def help_text(self) -> str:
        return self.help or (self.option.help if self.option else "")

    def default_value(self) -> Any:
        if self.default is not _OPTION_DEFAULT:
            return self.default
        entry = self.option
        assert entry is not None, f"{self.name}: a flag of the command's own needs a default"
        return None if entry.is_list else entry.default_value()

    def flag_type(self) -> Any:
        """The type typer parses; None stands for "not given" where that is the default."""
        if self.annotation is not None:
            return self.annotation
        scalar = self.option.flag_scalar()
        return scalar if self.default_value() is not None else scalar | None

    def minimum(self) -> float | None:
        if self.min is not None or self.option is None:
            return self.min
        return self.option.ge


_BACKEND_NAMES = ", ".join(known_backends())
_POLICY_FLAGS = (
    CommandFlag("precision", ("--precision",), f"{PRECISION_HELP} Default: {PRECISION_DEFAULT}"),
    CommandFlag("torch_ops", ("--torch-ops",), f"{TORCH_OPS_HELP} Default: {TORCH_OPS_DEFAULT}"),
)

#: `kgen eval`'s flags, in the order its `--help` lists them
EVAL_FLAGS: tuple[CommandFlag, ...] = (
    CommandFlag("device", ("--device",), "Where to run: auto (GPU if present), cpu (Triton interpreter), cuda."),
    CommandFlag("targets", ("--target", "-t"),
                "Also cross-compile for this hardware target (repeatable): h100, mi300x, ..."),
    CommandFlag("seeds", ("--seed",)),
    CommandFlag("n_seeds", ("--seeds",)),
    CommandFlag("timeout_s", ("--timeout",), "Hard time limit for the candidate's process, seconds.", min=1),
    CommandFlag("backend", ("--backend",), f"Kernel backend of the candidate ({_BACKEND_NAMES})."),
    CommandFlag("train_check", ("--train-check",),
                "Backward problems: also train a small model with the candidate's gradient."),
    CommandFlag("distributions", ("--distributions/--no-distributions",)),
    CommandFlag("bench", ("--bench",)),
    CommandFlag("small_sizes", ("--small",)),
    *_POLICY_FLAGS,
    CommandFlag("json_output", ("--json",), "Print the EvalResult as JSON instead of a table.",
                annotation=bool, default=False),
    CommandFlag("bundle", ("--bundle",), "Also write the evidence bundle (kernel, problem, settings and seeds, "
                "versions, device, result) to this path (a folder gets bundle.json); `kgen verify` re-checks it.",
                annotation=Path | None, default=None),
)

#: `--markdown` of `kgen bench` and `kgen solve`: the table a suite ends with, for a file
MARKDOWN_HELP = ("Print the result table as markdown (suite.md's text, one row per line) instead of a "
                 "terminal table.")

#: `kgen bench`'s flags, in the order its `--help` lists them
BENCH_FLAGS: tuple[CommandFlag, ...] = (
    CommandFlag("candidates", ("--candidates",),
                "Folder of candidates named after their problems. Default: the shipped seed kernels.",
                annotation=Path | None, default=None),
    CommandFlag("out", ("--out",), "Where suite.json, suite.csv, suite.md, suite.svg and results/<problem>.json (each whole verdict) go.",
                annotation=Path, default=Path("kgen-bench")),
    CommandFlag("device", ("--device",), "auto (GPU if present), cpu (verification only), cuda."),
    CommandFlag("no_verify", ("--no-verify",),
                "Quick check only (one seed, the problem's own inputs) before timing; on a CPU: nothing to run.",
                annotation=bool, default=False),
    CommandFlag("small_sizes", ("--small",), "Verify at the small size sets (timing stays at the default sizes)."),
    CommandFlag("timeout_s", ("--timeout",), "Time limit per candidate, seconds.", default=600.0, min=1),
    *_POLICY_FLAGS,
    CommandFlag("backend", ("--backend",), f"Kernel backend of the candidates ({_BACKEND_NAMES}); the "
                "default candidates are its shipped seed kernels."),
    CommandFlag("markdown", ("--markdown",), MARKDOWN_HELP, annotation=bool, default=False),
    CommandFlag("executor", ("--executor",)),
    CommandFlag("ray_address", ("--ray-address",)),
    CommandFlag("gpus", ("--gpus",), "GPUs to spread the problems over, a lane each (default: every "
                "one the executor finds); with --device cpu, the CPU lanes of executor ray."),
    CommandFlag("self_test", ("--self-test",),
                "Evaluate each problem's own reference as the candidate (kernel rules off, every "
                "correctness check on): proves kgen can judge every problem; writes self_test.md. Run "
                "again into the same --out, it skips the problems already judged there.",
                annotation=bool, default=False),
)
