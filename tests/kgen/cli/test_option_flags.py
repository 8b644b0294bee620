"""`kgen eval` and `kgen bench` take their flags from the option table: names, order, help,
defaults and bounds are the table's (``EVAL_FLAGS``, ``BENCH_FLAGS``), and a flag that sets an
option of one evaluation shows that option's default, so `--help` and ``EvalOptions`` agree."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest
import typer
import typer.main

from kgen.cli.evaluate import bench_command, eval_command
from kgen.cli.option_flags import command_flag_parameters
from kgen.core.evaluation_flags import BENCH_FLAGS, EVAL_FLAGS, CommandFlag
from kgen.core.option_table import eval_option, option


def click_params(command: Any) -> list[Any]:
    """The click parameters typer builds for ``command``, in `--help` order."""
    app = typer.Typer()
    app.command("it")(command)
    app.command("other")(lambda: None)  # two commands: get_command keeps the group
    return typer.main.get_command(app).commands["it"].params


@pytest.mark.parametrize(("command", "arguments", "flags"), [
    (eval_command, ["problem", "candidate"], EVAL_FLAGS),
    (bench_command, ["suite"], BENCH_FLAGS),
], ids=["eval", "bench"])
def test_the_commands_flags_are_the_tables(command, arguments, flags: tuple[CommandFlag, ...]):
    params = click_params(command)
    assert [p.name for p in params] == [*arguments, *(flag.name for flag in flags)]
    by_name = {p.name: p for p in params}
    for flag in flags:
        param = by_name[flag.name]
        declared = [f for name in flag.flags for f in name.split("/")]
        assert sorted(param.opts + param.secondary_opts) == sorted(declared), flag.name
        assert param.default == flag.default_value(), flag.name
        assert param.help.replace("\\[", "[") == flag.help_text() and flag.help_text(), flag.name
        assert param.min == flag.minimum(), flag.name


def test_a_flag_that_sets_an_option_shows_its_default_and_bound():
    flags = {flag.name: flag for flag in EVAL_FLAGS}
    assert flags["timeout_s"].default_value() == option("eval_timeout_s").default == 300.0
    assert flags["n_seeds"].default_value() == option("n_seeds").default and flags["n_seeds"].minimum() == 1
    assert flags["device"].default_value() == option("device").default
    assert flags["backend"].default_value() == option("backend").default
    assert flags["distributions"].default_value() is option("distributions").default is True
    # a repeatable flag is "not given" by default; the field's default is the option's
    assert flags["targets"].default_value() is None and eval_option("targets").default == []
    # `kgen bench` gives a candidate more time than one evaluation's default
    assert {flag.name: flag for flag in BENCH_FLAGS}["timeout_s"].default_value() == 600.0


def test_a_flag_follows_its_option_when_the_table_changes(monkeypatch):
    import kgen.core.option_table as table

    changed = replace(eval_option("n_seeds"), default=5, ge=2)
    monkeypatch.setattr(table, "_BY_EVAL_FIELD", {**table._BY_EVAL_FIELD, "n_seeds": changed})
    (parameter,) = command_flag_parameters([CommandFlag("n_seeds", ("--seeds",))])
    assert parameter.default == 5 and parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert parameter.annotation.__metadata__[0].min == 2
