"""Printed text survives narrow terminals and redirection (``kgen.cli.terminal``'s width rule).

Reported from a fresh clone at 80 columns: ``kgen kb show ID > file`` lost the ends of 77
source lines, ``kgen problems show FILE`` cut the reference's compute line, ``kgen problems
list`` broke names mid-word, and the markdown table of ``kgen bench``/``solve`` was hard-wrapped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from rich.text import Text

from kgen.cli.suite_display import print_suite_result
from kgen.cli.terminal import make_console, new_table, print_code, print_table
from kgen.evals.problem.catalog import catalog
from kgen.evals.suites.suite import SuiteRow, render_markdown, summarize

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LONG_LINE = "x = " + " + ".join(f"weight_{i} * activation_{i}" for i in range(12))  # ~330 characters


def kgen_80(home: Path, *args: str) -> subprocess.CompletedProcess:
    """The command at COLUMNS=80, stdout a pipe (not a terminal), as `kgen ... > file` runs."""
    env = {**os.environ, "KGEN_HOME": str(home), "COLUMNS": "80"}
    env.pop("KGEN_KB", None)
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def missing_lines(source: str, printed: str) -> list[str]:
    """Source lines not printed whole on a line of their own."""
    lines = set(printed.splitlines())
    return [line for line in source.splitlines() if line.strip() and line not in lines]


# ------------------------------------------------------------------ code: never cut, never wrapped


@pytest.fixture(scope="module")
def store_home(tmp_path_factory) -> Path:
    """A $KGEN_HOME whose knowledge base holds the shipped kernels (seeded on first use)."""
    home = tmp_path_factory.mktemp("home")
    assert kgen_80(home, "kb", "init").returncode == 0
    return home


def test_kb_show_redirected_at_80_columns_prints_every_source_line_whole(store_home, tmp_path):
    export = tmp_path / "kb.jsonl"
    assert kgen_80(store_home, "kb", "export", str(export)).returncode == 0
    kernels = [json.loads(line) for line in export.read_text().splitlines()]
    kernels = [k for k in kernels if "source" in k]
    # the kernels with the longest lines, of each backend: the lines a width cut would lose
    by_backend: dict[str, dict] = {}
    for kernel in sorted(kernels, key=lambda k: -max(map(len, k["source"].splitlines()))):
        by_backend.setdefault(kernel["backend"], kernel)
    assert {"triton", "cute"} <= set(by_backend)
    for kernel in by_backend.values():
        assert max(map(len, kernel["source"].splitlines())) > 80
        shown = kgen_80(store_home, "kb", "show", kernel["id"])
        assert shown.returncode == 0, shown.stderr
        assert missing_lines(kernel["source"], shown.stdout) == []
        assert kernel["source"].rstrip("\n") in shown.stdout  # whole, in order, nothing padded


@pytest.mark.parametrize("problem", ["gelu", str(FIXTURES / "problems" / "relu_kernelbench.py"), "rmsnorm bwd"])
def test_problems_show_redirected_at_80_columns_prints_the_reference_whole(problem, tmp_path):
    shown = kgen_80(tmp_path, "problems", "show", problem)
    assert shown.returncode == 0, shown.stderr
    path = next(line.split(None, 1)[1].strip() for line in shown.stdout.splitlines()
                if line.startswith("path "))
    source = Path(path).read_text()
    assert missing_lines(source, shown.stdout) == []


@pytest.mark.parametrize("width", [40, 80, 120])
def test_code_on_a_terminal_is_highlighted_but_never_cut_or_wrapped(width):
    source = f"def f(x):\n    {LONG_LINE}\n    return x[0]  # [bold]not markup[/bold]\n"
    out = make_console(file=StringIO(), width=width, force_terminal=True)
    print_code(source, out=out)
    printed = out.file.getvalue()
    assert "\x1b[" in printed  # highlighted
    assert missing_lines(source, Text.from_ansi(printed).plain) == []


def test_code_off_a_terminal_is_written_byte_for_byte():
    source = f"def f(x):\n\tif x:\n        {LONG_LINE}   \n    return x[i]  # [red]\n"
    out = make_console(file=StringIO(), width=80, force_terminal=False)
    print_code(source, out=out)
    assert out.file.getvalue() == source


# ------------------------------------------------------------------ tables: fold cells, not words


def test_problems_list_at_80_columns_keeps_every_name_whole_and_fits(tmp_path):
    listed = kgen_80(tmp_path, "problems", "list")
    assert listed.returncode == 0, listed.stderr
    words = set(listed.stdout.split())
    assert [info.name for info in catalog() if info.name not in words] == []
    assert max(len(line.rstrip()) for line in listed.stdout.splitlines()) <= 80


@pytest.mark.parametrize("width", [30, 60, 80, 200])
def test_a_table_never_splits_a_word_or_a_whole_cell(width):
    names = ["fused_embedding_rmsnorm_backward", "no_candidate_for_this_long_problem_name", "relu"]
    notes = ["missing (no candidate file)", "rejected (numerical_mismatch) off by a constant",
             "passed"]
    table = new_table("t", "name", "note", "ms", whole=("name", "ms"))
    for name, note in zip(names, notes, strict=True):
        table.add_row(name, note, "0.1469")
    out = make_console(file=StringIO(), width=width)
    print_table(table, out)
    printed = out.file.getvalue()
    words = set(printed.split())
    assert all(name in words for name in names)
    assert all(word in words for note in notes for word in note.split())
    lines = printed.splitlines()
    if width >= 80:  # wide enough for the names: the table fits the width
        assert max(len(line.rstrip()) for line in lines) <= width


# ------------------------------------------------------------------ bench / solve tables


def _rows() -> list[SuiteRow]:
    return [
        SuiteRow(problem="no_candidate_for_this_long_problem_name", verdict="missing", reason="no candidate file"),
        SuiteRow(problem="19_ReLU", verdict="rejected", rejection="numerical_mismatch",
                 reason="off by a constant | " + "very long reason " * 20, policies="precision ieee, torch ops library"),
        SuiteRow(problem="23_Softmax", verdict="passed", policies="precision ieee, torch ops library"),
    ]


@pytest.mark.parametrize("width", [40, 80])
def test_markdown_is_printed_one_row_per_line_whatever_the_width(width, tmp_path):
    rows = _rows()
    markdown = render_markdown(rows, summarize(rows), command="kgen bench " + "x" * 120, date="2026-11-27")
    path = tmp_path / "suite.md"
    path.write_text(markdown)
    out = make_console(file=StringIO(), width=width)
    print_suite_result(rows, summarize(rows), path, markdown=True, out=out)
    printed = out.file.getvalue()
    assert printed.rstrip("\n") == markdown.rstrip("\n")  # the text as written
    table = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(rows)
    header_cells = len(re.split(r"(?<!\\)\|", table[0]))
    assert all(len(re.split(r"(?<!\\)\|", line)) == header_cells for line in table)


def test_without_markdown_the_suite_is_a_terminal_table_with_its_figures(tmp_path):
    rows = _rows()
    out = make_console(file=StringIO(), width=80)
    print_suite_result(rows, summarize(rows), tmp_path / "suite.md", markdown=False, out=out)
    printed = out.file.getvalue()
    assert "|---|" not in printed
    words = set(printed.split())
    assert {row.problem for row in rows} <= words
    assert "1 of 3 correct, 0 timed." in printed and "fast_0 0.33" in printed


def test_kb_list_tells_two_best_kernels_of_one_problem_apart_by_backend(store_home):
    """Two "best" rmsnorm_backward rows (one Triton, one CuTe DSL) looked the same."""
    listed = kgen_80(store_home, "kb", "list", "--problem", "rmsnorm_backward")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    header = next(line.split() for line in lines if line.split()[:2] == ["id", "problem"])
    assert header[2] == "backend"
    rows = [line.split() for line in lines if line.startswith("k-")]
    best = {(row[1], row[2], row[3], row[4]) for row in rows if row[5] == "best"}
    assert {backend for _, backend, _, _ in best} == {"cute", "triton"} and len(best) == len(
        [row for row in rows if row[5] == "best"])
