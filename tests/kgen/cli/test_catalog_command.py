"""`kgen problems list` at a terminal's width: one line per problem (the list took 209 lines for 30
problems at 80 columns), every name whole, the details one command away."""

from __future__ import annotations

import os
import subprocess
import sys

from kgen.evals.problem.catalog import catalog


def kgen(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGEN_") and not k.endswith("_API_KEY")}
    env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "kgen.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_problems_list_is_one_line_per_problem_within_80_columns():
    infos = catalog()
    done = kgen("problems", "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.rstrip("\n").splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in {i.name for i in infos}}
    assert set(rows) == {info.name for info in infos}
    assert len(lines) <= len(infos) + 4  # a header, its rule, the rows and the closing line
    assert lines[-1] == f"{len(infos)} problems. Details: kgen problems show NAME"
    for info in infos:  # each description whole, or shortened at a word's end with "…"
        shown = rows[info.name].split(maxsplit=1)[1].strip()
        assert shown == info.description or (shown.endswith(" …")
                                             and info.description.startswith(shown.removesuffix(" …") + " ")), shown


def test_a_wide_terminal_shows_more_of_each_description():
    narrow, wide = kgen("problems", "list"), kgen("problems", "list", columns=160)
    assert len(wide.stdout) > len(narrow.stdout)
    assert max(len(line) for line in wide.stdout.splitlines()) <= 160
