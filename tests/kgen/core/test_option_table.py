"""Each option is declared once, in ``kgen.core.option_table``: the `kgen run` flags, ``kgen.generate``'s
signature, the settings, the run's options and the default config file all come from it, agree
on every default, and a value set by flag, ``KGEN_*`` or config file reaches the run."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

import kgen
import kgen.api
import kgen.cli.option_flags
import kgen.cli.run
import kgen.core.option_table
from kgen.agent.run_options import RunOptions
from kgen.api import run_options
from kgen.backends.device import Device
from kgen.core.option_table import (
    EVAL_OPTION_NAMES,
    OPTIONS,
    RUN_OPTION_NAMES,
    Option,
    eval_option,
    option,
    render_default_config,
    toml_value,
)
from kgen.core.settings import SETTING_NAMES, Settings, default_config_text

SHIPPED = Path(kgen.core.option_table.__file__).with_name("default_config.toml")
FLAGGED = [o for o in OPTIONS if o.flags]
NEW = ("islands", "plateau_generations", "target_pct_of_sol")


@pytest.fixture(scope="module")
def run_help() -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_")}
    out = subprocess.run([sys.executable, "-m", "kgen.cli", "run", "--help"], capture_output=True,
                         text=True, timeout=120, env={**env, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def click_params(command: Any) -> dict[str, Any]:
    """The click parameters typer builds for ``command``, by name."""
    app = typer.Typer()
    app.command()(command)
    app.command("other")(lambda: None)  # two commands: get_command keeps the group
    return {p.name: p for p in typer.main.get_command(app).commands[command.__name__.replace("_", "-")].params}


# -- the table itself ---------------------------------------------------------------------------


def test_names_and_flags_are_unique_and_every_default_is_valid():
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    flags = [f for o in OPTIONS for flag in o.flags for f in flag.split("/")]
    assert len(flags) == len(set(flags)) and all(f.startswith("-") for f in flags)
    for entry in OPTIONS:
        assert entry.expected and entry.section, entry.name
        if entry.flags or entry.run is not None:
            assert entry.help, f"{entry.name}: a run option needs help text"
        if entry.is_setting:
            assert entry.doc or OPTIONS[OPTIONS.index(entry) - 1].is_setting, entry.name
            assert entry.default is not None or entry.example, f"{entry.name}: None needs an example"


def test_the_new_search_options_are_declared_with_their_bounds():
    assert (option("islands").default, option("islands").ge, option("islands").flags) == (2, 1, ("--islands",))
    plateau = option("plateau_generations")
    assert (plateau.default, plateau.ge, plateau.flags) == (2, 0, ("--plateau",))
    sol = option("target_pct_of_sol")
    assert (sol.default, sol.gt, sol.le, sol.flags) == (None, 0, 100, ("--stop-at-sol",))
    assert {option(name).section for name in NEW} == {"Search"}


# -- every derived place has every option, with the same default ------------------------------


def test_settings_fields_and_defaults_are_the_tables():
    assert SETTING_NAMES == tuple(o.name for o in OPTIONS if o.is_setting)
    defaults = Settings()
    for name in SETTING_NAMES:
        assert getattr(defaults, name) == option(name).default, name


def test_run_options_fields_and_defaults_are_the_tables():
    defaults = RunOptions(request="x")
    copied = [o for o in OPTIONS if o.run == "copied"]
    assert set(NEW) <= {o.name for o in copied}
    for entry in copied:
        assert entry.name in RunOptions.model_fields
        assert getattr(defaults, entry.name) == entry.default, entry.name


def test_an_old_run_json_without_the_new_options_still_loads():
    old = RunOptions(request="softmax", budget=4).model_dump()
    for name in NEW:
        del old[name]
    loaded = RunOptions.model_validate(old)
    assert (loaded.islands, loaded.plateau_generations, loaded.target_pct_of_sol, loaded.budget) == (2, 2, None, 4)


def test_generate_signature_has_every_run_option_keyword_only():
    parameters = inspect.signature(kgen.generate).parameters
    assert list(parameters)[0] == "request"
    assert [n for n in parameters if n not in ("request", "progress")] == list(RUN_OPTION_NAMES)
    for name in RUN_OPTION_NAMES:
        entry, parameter = option(name), parameters[name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        # a setting defaults to None, "as configured"; a run-only option to its own default
        assert parameter.default == (None if entry.is_setting else entry.default), name
    assert parameters["progress"].kind is inspect.Parameter.KEYWORD_ONLY


def test_run_help_lists_every_flag_with_its_help(run_help):
    for entry in FLAGGED:
        for flag in entry.flags[0].split("/"):
            assert flag in run_help, flag
        assert entry.help.split()[0] in run_help
    for flag in ("--json", "-m", "-t", "--no-persist"):
        assert flag in run_help


def test_run_flags_have_the_tables_names_help_and_defaults():
    params = click_params(kgen.cli.run.run_command)
    for entry in FLAGGED:
        param = params[entry.name]
        declared = [f for flag in entry.flags for f in flag.split("/")]
        assert sorted(param.opts + param.secondary_opts) == sorted(declared), entry.name
        assert param.default == (None if entry.is_setting else entry.default), entry.name
        assert entry.help in param.help.replace("\\[", "[")
    assert {"request", "json_output"} | {o.name for o in FLAGGED} == set(params)


def test_default_config_documents_every_setting_at_its_default():
    text = render_default_config()
    value_lines = [line for line in text.splitlines() if re.match(r"# [a-z_]+ = ", line)]
    assert [line.split()[1] for line in value_lines] == list(SETTING_NAMES)
    for entry in OPTIONS:
        if entry.is_setting:
            assert f"# {entry.name} = {entry.example or toml_value(entry.default)}" in value_lines
            assert f"Environment: {entry.env_var}." in text
    assert default_config_text() == text


def test_the_shipped_config_file_is_the_rendering():
    assert SHIPPED.read_text(encoding="utf-8") == render_default_config(), \
        "kgen/default_config.toml is stale: run python -m kgen.core.option_table --write"


# -- adding an option is one entry: everything else is computed ----------------------------------


def test_an_added_entry_appears_everywhere_without_another_edit():
    extra = Option(name="mutation_rate", annotation=float, default=0.25, gt=0, le=1, section="Search",
                   expected="a fraction", flags=("--mutation-rate",), help="Share of mutated kids.",
                   doc="How many children are mutations.")
    table = (*OPTIONS, extra)

    assert "# mutation_rate = 0.25" in render_default_config(table)
    assert "KGEN_MUTATION_RATE" in render_default_config(table)
    parameters = {p.name: p for p in kgen.cli.option_flags.run_option_parameters(options=table)}
    assert parameters["mutation_rate"].default is None
    signature = kgen.api._generate_signature(table)
    assert signature.parameters["mutation_rate"].default is None
    assert signature.parameters["mutation_rate"].kind is inspect.Parameter.KEYWORD_ONLY

    def command(**options: Any) -> dict[str, Any]:
        return options

    command.__signature__ = inspect.Signature(kgen.cli.option_flags.run_option_parameters(options=table))
    app = typer.Typer()
    app.command()(command)
    result = CliRunner().invoke(app, ["--mutation-rate", "0.5", "--budget", "4"], standalone_mode=False)
    assert result.exception is None, result.output
    assert result.return_value["mutation_rate"] == 0.5 and result.return_value["budget"] == 4

    from pydantic import create_model

    from kgen.core.option_table import pydantic_fields

    fields = create_model("Fields", **pydantic_fields([extra]))
    assert fields().mutation_rate == 0.25


def test_another_command_takes_the_same_run_options():
    """`kgen solve SUITE_DIR` style: its own argument and options, and every run option's flag."""

    @kgen.cli.option_flags.with_run_options(exclude={"problem"})
    def solve(suite: Annotated[str, typer.Argument()], *,
              json_output: Annotated[bool, typer.Option("--json")] = False, **options: Any) -> Any:
        return suite, json_output, options

    app = typer.Typer()
    app.command()(solve)
    result = CliRunner().invoke(app, ["level1", "--stop-at-sol", "90", "-m", "openai:gpt-5", "--json"],
                                standalone_mode=False)
    assert result.exception is None, result.output
    suite, json_output, options = result.return_value
    assert (suite, json_output) == ("level1", True)
    assert set(options) == {o.name for o in FLAGGED} - {"problem"}
    assert options["target_pct_of_sol"] == 90.0 and options["models"] == ["openai:gpt-5"]
    assert options["budget"] is None and options["persist"] is True


@pytest.mark.parametrize("module", ["kgen.api", "kgen.cli.run", "kgen.cli.option_flags", "kgen.core.settings",
                                    "kgen.agent.run_options"])
def test_no_module_lists_the_options_by_hand(module):
    source = inspect.getsource(sys.modules[module])
    for name in (*NEW, "--islands", "--plateau", "--stop-at-sol", "llm_retries"):
        assert name not in source, f"{module} names {name}: derive it from kgen.core.option_table"


# -- a value set by flag, KGEN_* or config file reaches the run ---------------------------------


@pytest.fixture
def captured(monkeypatch) -> dict[str, Any]:
    """`kgen run` up to the run: the RunOptions it would start with."""
    import kgen.agent.runs.start

    seen: dict[str, Any] = {}

    def start_run(options: RunOptions, **kwargs: Any) -> None:
        seen.update(options=options, **kwargs)
        raise typer.Exit(0)

    monkeypatch.setattr(kgen.agent.runs.start, "start_run", start_run)
    return seen


def kgen_run(*args: str) -> None:
    from kgen.cli.main import app

    result = CliRunner().invoke(app, ["run", "Triton softmax for H100", *args])
    assert result.exit_code == 0, result.output


def test_flags_reach_the_run(home, captured, tmp_path):
    kgen_run("--islands", "4", "--plateau", "0", "--stop-at-sol", "85", "--budget", "5", "-t", "mi300x",
             "--llm-retries", "1", "--seed", "7", "--no-persist", "--out", str(tmp_path / "run"))
    run = captured["options"]
    assert (run.islands, run.plateau_generations, run.target_pct_of_sol) == (4, 0, 85.0)
    assert (run.budget, run.targets, run.llm_retries, run.seed, run.persist) == (5, ["mi300x"], 1, 7, False)
    assert captured["out"] == tmp_path / "run"


def test_without_flags_the_configured_values_reach_the_run(home, captured, monkeypatch):
    (home / "config.toml").write_text("islands = 3\ntarget_pct_of_sol = 70\nbudget = 9\n")
    monkeypatch.setenv("KGEN_PLATEAU_GENERATIONS", "5")
    monkeypatch.setenv("KGEN_BUDGET", "8")
    kgen_run()
    run = captured["options"]
    assert (run.islands, run.plateau_generations, run.target_pct_of_sol, run.budget) == (3, 5, 70.0, 8)
    assert (run.seed, run.persist) == (0, True)


def test_a_flag_beats_env_and_file(home, captured, monkeypatch):
    (home / "config.toml").write_text("islands = 3\n")
    monkeypatch.setenv("KGEN_ISLANDS", "5")
    kgen_run("--islands", "6")
    assert captured["options"].islands == 6


def test_api_arguments_env_and_file_reach_the_run_options(home, monkeypatch):
    (home / "config.toml").write_text("plateau_generations = 0\n")
    monkeypatch.setenv("KGEN_TARGET_PCT_OF_SOL", "60")
    run, settings = run_options("softmax", {"islands": 5, "out": "ignored/here"})
    assert (run.islands, run.plateau_generations, run.target_pct_of_sol) == (5, 0, 60.0)
    assert settings.sources["islands"] == "flag" and settings.sources["target_pct_of_sol"] == "env KGEN_TARGET_PCT_OF_SOL"
    # an environment "none" clears an optional setting back to "no such stop"
    monkeypatch.setenv("KGEN_TARGET_PCT_OF_SOL", "none")
    assert run_options("softmax", {})[0].target_pct_of_sol is None


@pytest.mark.parametrize(("choices", "message"), [
    ({"islands": 0}, "islands: expected an integer ≥1, got 0"),
    ({"plateau_generations": -1}, "plateau_generations: expected an integer ≥0"),
    ({"target_pct_of_sol": 120}, "target_pct_of_sol: expected a percentage >0 and ≤100"),
    ({"islandz": 2}, "unknown option(s) islandz (did you mean 'islands'?)"),
])
def test_bad_values_are_usage_errors(home, choices, message):
    with pytest.raises(kgen.KgenUsageError) as info:
        run_options("softmax", choices)
    assert message in str(info.value)


def test_a_bad_flag_value_is_one_line_exit_2(home, captured):
    from kgen.cli.main import app

    result = CliRunner().invoke(app, ["run", "Triton softmax", "--stop-at-sol", "0"])
    assert result.exit_code == 2 and "target_pct_of_sol" in result.output and "options" not in captured


def test_generate_rejects_an_unknown_keyword_as_usage_error(home):
    with pytest.raises(kgen.KgenUsageError, match="plateau"):
        kgen.generate("softmax", plateau=3)


def test_the_shipped_file_is_written_and_checked_by_python_m(tmp_path, monkeypatch):
    table = kgen.core.option_table
    monkeypatch.setattr(table, "__file__", str(tmp_path / "option_table.py"))
    assert table._main(["--write"]) == 0 and table._main(["--check"]) == 0
    assert (tmp_path / "default_config.toml").read_text() == render_default_config()
    (tmp_path / "default_config.toml").write_text("# budget = 1\n")
    assert table._main(["--check"]) == 1


def test_replacing_an_entry_changes_its_rendering():
    changed = tuple(replace(o, default=20) if o.name == "budget" else o for o in OPTIONS)
    assert "# budget = 20" in render_default_config(changed)


# -- one evaluation's options: EvalOptions, the policies of a run --------------------------------


def test_eval_options_take_their_defaults_and_bounds_from_the_table():
    from kgen.evals.harness import EvalOptions

    defaults = EvalOptions()
    for name in EVAL_OPTION_NAMES:
        entry, field = eval_option(name), EvalOptions.model_fields[name]
        assert getattr(defaults, name) == entry.default, name
        bounds = {type(m).__name__.lower(): getattr(m, type(m).__name__.lower()) for m in field.metadata
                  if type(m).__name__ in ("Ge", "Gt", "Le")}  # not a type's own validator
        assert bounds == {k: v for k, v in (("ge", entry.ge), ("gt", entry.gt), ("le", entry.le)) if v is not None}
    assert eval_option("timeout_s") is option("eval_timeout_s")


def test_an_evaluations_own_options_are_no_setting_and_no_run_option():
    from kgen.evals.harness import EvalOptions

    for entry in OPTIONS:
        if entry.scope == "evaluation":
            assert entry.eval_field == entry.name and entry.run is None and not entry.flags, entry.name
        if entry.eval_field:
            assert entry.eval_field in EvalOptions.model_fields, entry.name
    assert {"seeds", "n_seeds", "small_sizes", "distributions", "bench"} <= {
        o.name for o in OPTIONS if o.scope == "evaluation"}
    assert not {"seeds", "n_seeds", "small_sizes"} & (set(SETTING_NAMES) | set(RUN_OPTION_NAMES))


def test_the_policy_names_are_the_verifiers():
    from typing import get_args

    from kgen.core.option_table import PRECISIONS, TORCH_OPS
    from kgen.evals.problem.policies import Precision, TorchOps

    assert PRECISIONS == tuple(p.value for p in Precision)
    assert TORCH_OPS == tuple(t.value for t in TorchOps)
    words = get_args(option("precision").annotation)[0]  # Annotated[Literal[...], normaliser]
    assert set(get_args(get_args(words)[0])) == set(PRECISIONS)
    assert set(get_args(get_args(get_args(option("torch_ops").annotation)[0])[0])) == set(TORCH_OPS)


def test_precision_and_torch_ops_are_options_of_a_run(home, captured, monkeypatch):
    kgen_run("--precision", "tf32", "--torch-ops", "library")
    assert (captured["options"].precision, captured["options"].torch_ops) == ("tf32", "library")
    (home / "config.toml").write_text('torch_ops = "library"\n')
    monkeypatch.setenv("KGEN_PRECISION", "tf32")
    run, _ = run_options("softmax", {})
    assert (run.precision, run.torch_ops) == ("tf32", "library")
    assert RunOptions(request="softmax").precision is None  # an old run.json: each problem's own
    assert "precision" in inspect.signature(kgen.generate).parameters
    assert "# precision = " in render_default_config() and "# torch_ops = " in render_default_config()


def test_the_agent_evaluates_with_the_runs_policies(tmp_path):
    from kgen.agent.search.graph import agent_eval_options

    options = agent_eval_options(Device.CPU, "triton", "h100", full=True, train_check=False, timeout_s=60,
                                 run_path=tmp_path, precision="tf32", torch_ops="library")
    assert (options.precision, options.torch_ops) == ("tf32", "library")
    assert agent_eval_options(Device.CPU, "triton", "h100", full=True, train_check=False, timeout_s=60,
                              run_path=tmp_path).precision is None


@pytest.mark.parametrize(("args", "message"), [
    (["--precision", "half"], "precision: expected one of ieee, tf32, got 'half'"),
    (["--torch-ops", "lenient"], "torch_ops: expected one of strict, library, got 'lenient'"),
])
def test_a_bad_policy_for_a_run_is_one_line_exit_2(home, captured, args, message):
    from kgen.cli.main import app

    result = CliRunner().invoke(app, ["run", "Triton softmax", *args])
    assert result.exit_code == 2 and "options" not in captured
    assert [line for line in result.output.splitlines() if line.strip()] == [f"error: {message}"]
    with pytest.raises(kgen.KgenUsageError, match=re.escape(message)):
        kgen.generate("Triton softmax", **{args[0].lstrip("-").replace("-", "_"): args[1]})
