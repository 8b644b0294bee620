"""The friction a newcomer met at the command line (issue: "as a newcomer meets it"): options
before the request, `kgen doctor -m`, the exit codes in `--help`, `<bool>` after every flag,
boxed parse errors, no clock during `kgen eval`, "strateg(ies)", `dir(kgen)`."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kgen
from kgen.cli.command_line import MisplacedOptions, reflowed, with_default_command
from kgen.cli.exit_codes import EXIT_CODES
from kgen.cli.main import kgen_command
from kgen.core.text import counted

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"


def kgen_cli(*args: str, home: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith("KGEN_") and not name.endswith("_API_KEY")}
    environment.update(COLUMNS="80", **env)
    if home is not None:
        environment["KGEN_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=300, env=environment)


# ------------------------------------------------------------------ options before the request


@pytest.mark.parametrize(("argv", "expected"), [
    (["--budget", "2", "softmax"], {"budget": 2, "request": "softmax"}),
    (["--budget=3", "-m", "openai:gpt-5", "Triton softmax for H100"],
     {"budget": 3, "models": ["openai:gpt-5"], "request": "Triton softmax for H100"}),
    (["--no-persist", "-t", "mi300x", "layernorm", "--islands", "4"],
     {"persist": False, "targets": ["mi300x"], "islands": 4, "request": "layernorm"}),
    (["softmax", "--budget", "2"], {"budget": 2, "request": "softmax"}),
])
def test_run_options_before_the_request_reach_the_run(argv, expected):
    command = kgen_command()
    args = with_default_command(argv, command)
    assert args[0] == "run"
    parsed = command.commands["run"].make_context("run", args[1:]).params
    assert {name: parsed[name] for name in expected} == expected


@pytest.mark.parametrize(("argv", "hint"), [
    (["--device", "cpu", "eval", "relu", "k.py"], "kgen eval relu k.py --device cpu"),
    (["--budget", "2", "solve", "level1"], "kgen solve level1 --budget 2"),
    (["--json", "kb", "list"], "kgen kb list --json"),
])
def test_options_before_another_command_say_where_they_go(argv, hint):
    with pytest.raises(MisplacedOptions, match=re.escape(f"options go after the command: {hint}")):
        with_default_command(argv, kgen_command())


def test_the_commands_and_the_groups_own_options_are_left_alone():
    command = kgen_command()
    for argv in (["--help"], ["eval", "--help"], ["kb", "list"], []):
        assert with_default_command(argv, command) == argv


def test_options_before_the_request_on_the_real_command_line(tmp_path):
    out = kgen_cli("--budget", "0", "softmax", home=tmp_path)
    assert out.returncode == 2 and out.stderr.strip() == "error: budget: expected an integer ≥1, got 0"
    out = kgen_cli("--device", "cpu", "eval", "relu", "k.py", home=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: options go after the command: kgen eval relu k.py --device cpu"


# ------------------------------------------------------------------ parse errors: one plain line


@pytest.mark.parametrize(("args", "message"), [
    (["run", "softmax", "--bugdet", "3"], "No such option: --bugdet"),
    (["softmax", "--budget", "many"], "Invalid value for '--budget'"),
    (["run"], "Missing argument 'request'"),
    (["kb", "list", "--limit", "0"], "Invalid value for '--limit'"),
    (["eval", "relu"], "Missing argument 'CANDIDATE'"),
    (["problems", "show", "gelu", "--colour"], "No such option: --colour"),
])
def test_a_parse_error_is_one_plain_line_with_exit_2(args, message, tmp_path):
    out = kgen_cli(*args, home=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and message.lower() in line.lower(), line
    assert re.search(r"see `kgen [a-z ]+ --help`", line), line
    assert not set("╭╮╰╯│─") & set(out.stderr) and "Traceback" not in out.stderr
    assert out.stdout == ""


# ------------------------------------------------------------------ --help


@pytest.mark.parametrize("args", [[], ["run"], ["eval"], ["bench"], ["solve"], ["doctor"], ["kb", "show"],
                                  ["problems", "show"]])
def test_flags_show_no_bool_metavar(args):
    out = kgen_cli(*args, "--help")
    assert out.returncode == 0, out.stderr
    assert "<bool>" not in out.stdout and "--help" in out.stdout


def test_help_lists_every_exit_code_the_readme_lists():
    help_text = " ".join(kgen_cli("--help").stdout.replace("│", " ").split())
    for code, meaning in EXIT_CODES.items():
        assert f"{code} {' '.join(meaning.split())}" in help_text
    readme = (ROOT / "README.md").read_text()
    [paragraph] = [p for p in readme.split("\n\n") if "Exit codes:" in p and "`kgen run`" not in p][:1]
    sentence = " ".join(paragraph.split("Exit codes:", 1)[1].split())
    listed = {int(code) for code in re.findall(r"(?:^|, )(\d+) ", sentence)}
    assert listed == set(EXIT_CODES), sentence


def test_no_args_prints_the_help_and_exits_0():
    for args in ([], ["kb"], ["problems"]):
        out = kgen_cli(*args)
        assert out.returncode == 0, out.stderr
        assert "Usage: kgen" in out.stdout and "error" not in out.stderr


# ------------------------------------------------------------------ kgen doctor -m


@pytest.mark.parametrize("models", [["openai:gpt-5"], ["anthropic:claude-sonnet-4-5", "openai:m@http://127.0.0.1:9/v1"]])
def test_doctor_takes_models_as_the_main_command_does(models, tmp_path):
    flags = [arg for i, model in enumerate(models) for arg in (("-m", "--model")[i % 2], model)]
    out = kgen_cli("doctor", "--offline", "--json", *flags, home=tmp_path)
    assert out.returncode in (0, 1), out.stderr  # 1: a model without a key is an issue
    diagnosis = json.loads(out.stdout)
    assert diagnosis["models"] == models


def test_doctor_with_a_malformed_model_names_it(tmp_path):
    out = kgen_cli("doctor", "--offline", "-m", "gpt5", home=tmp_path)
    assert out.returncode == 1 and "bad model 'gpt5'" in out.stdout


# ------------------------------------------------------------------ kgen eval's clock


def test_eval_shows_a_clock_on_a_terminal_and_nothing_extra_on_stdout(tmp_path):
    """A terminal (stderr) gets a live clock while the child verifies; the verdict on stdout
    carries no progress line."""
    out = kgen_cli("eval", str(FIXTURES / "problems" / "relu_kernelbench.py"),
                   str(FIXTURES / "candidates" / "relu_kernelbench_solution.py"), "--device", "cpu",
                   home=tmp_path, TTY_COMPATIBLE="1", TTY_INTERACTIVE="1", TRITON_INTERPRET="1")
    assert out.returncode == 0, out.stderr
    frames = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.stderr.replace("\r", "\n"))
    clocks = re.findall(r"(\d+) s · verifying", frames)
    assert clocks and len(set(clocks)) >= 2, frames[-2000:]  # the clock moves while it verifies
    assert "verifying" not in out.stdout and "PASSED" in out.stdout


# ------------------------------------------------------------------ counted nouns, the package


@pytest.mark.parametrize(("count", "noun", "text"), [
    (1, "strategy", "1 strategy"), (2, "strategy", "2 strategies"), (0, "kernel", "0 kernels"),
    (1, "guidance note", "1 guidance note"), (3, "pass", "3 passes"), (2, "key", "2 keys"),
    (2, "shape set", "2 shape sets"), (5, "child", "5 children"),
])
def test_counted_nouns(count, noun, text):
    assert counted(count, noun, "children" if noun == "child" else None) == text


USER_FACING = [*sorted((ROOT / "kgen" / "cli").glob("*.py")), ROOT / "agent" / "search" / "graph.py",
               ROOT / "agent" / "runs" / "summary.py"]


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: p.name)
def test_no_parenthesised_plurals_in_printed_text(path):
    """ "1 strateg(ies)": every count in these modules' messages goes through ``counted``."""
    tree = ast.parse(path.read_text())
    found = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and re.search(r"[a-z]\((s|es|ies)\)", node.value)
             and not isinstance(getattr(node, "parent", None), ast.Expr)]
    docstrings = {ast.get_docstring(n) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)}
    assert [text for text in found if text.strip() not in {(d or "").strip() for d in docstrings}] == []


def test_dir_shows_the_public_names_and_the_version():
    assert {"generate", "evaluate", "KgenError", "KgenUsageError", "__version__"} <= set(dir(kgen))
    assert set(kgen.__all__) <= set(dir(kgen))
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", kgen.__version__)


def test_the_readme_shows_generates_progress_callback():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    examples = [block for block in blocks if "progress=" in block and "kgen.generate(" in block]
    assert examples
    for example in examples:
        call = next(node for node in ast.walk(ast.parse(example))
                    if isinstance(node, ast.Call) and ast.unparse(node.func) == "kgen.generate")
        assert {kw.arg for kw in call.keywords} <= set(inspect.signature(kgen.generate).parameters)


def _commands(command, path="kgen"):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


@pytest.mark.parametrize(("text", "expected"), [
    ("Summary.\n\nA sentence wrapped\nat one width\nand another.", "Summary.\n\nA sentence wrapped at one width and another."),
    ("Summary.\n\nExamples:\n\n  kgen eval a b\n  kgen eval c d", "Summary.\n\nExamples:\n\n  kgen eval a b\n  kgen eval c d"),
    ("S.\n\nWhat it checks:\n- dtypes\n- ranks and\n  layouts", "S.\n\nWhat it checks:\n- dtypes\n- ranks and\n  layouts"),
    ("S.\n\n\b\nkept\nas is", "S.\n\n\b\nkept\nas is"),
    ("A summary that\nwraps.", "A summary that wraps."),
])
def test_help_prose_is_reflowed_and_examples_lists_and_verbatim_blocks_are_not(text, expected):
    assert reflowed(text) == expected


def test_every_commands_help_folds_at_the_terminal_width_not_at_its_docstrings():
    """typer's rich help keeps a docstring's line breaks: a paragraph wrapped at 100 columns in
    the source came out ragged at 80 (`kgen export --help`, `kgen eval --help`, ...)."""
    ragged = []
    for path, command in _commands(kgen_command()):
        for paragraph in (command.help or "").split("\n\n"):
            if paragraph.startswith((" ", "\b")):
                continue
            lines = paragraph.split("\n")
            if any(not line.startswith((" ", "- ", "* ")) for line in lines[1:]):
                ragged.append(f"{path}: {lines[0][:50]}")
    assert not ragged, ragged
    export = kgen_cli("export", "--help")
    assert export.returncode == 0
    folded = " ".join(line.strip() for line in export.stdout.splitlines())
    assert "a plain function and an nn.Module. A Triton kernel is registered with torch.library.triton_op" in folded
    assert max(len(line) for line in export.stdout.splitlines()) <= 80


def test_every_commands_help_keeps_option_names_whole_within_80_columns(capsys, monkeypatch):
    """At 80 columns `kgen eval --help` cut `--no-distributions` to `--no-distributi…`: in a help
    table only the prose wraps, at spaces; names and words are never cut, and the help fits."""
    monkeypatch.setenv("COLUMNS", "80")
    command = kgen_command()
    for path, sub in _commands(command):
        args = path.split()[1:]
        command.main(args=[*args, "--help"], prog_name="kgen", standalone_mode=False)
        shown = capsys.readouterr().out
        assert "…" not in shown, f"{path}: {[line for line in shown.splitlines() if '…' in line]}"
        assert max(len(line) for line in shown.splitlines()) <= 80, path
        words = set(shown.replace("│", " ").replace(",", " ").split())
        for param in getattr(sub, "params", []):
            names = [name for name in (*param.opts, *param.secondary_opts) if name.startswith("-")]
            assert all(name in words for name in names), f"{path}: {names} not whole"
