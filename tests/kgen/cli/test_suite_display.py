"""The suite's terminal table (`kgen solve`, `kgen bench`) at 80 columns: KernelBench's names run
to 96 characters, and the whole of level 1 made a 146-column table whose verdicts wrapped over
3 lines each."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from kgen.cli.suite_display import print_suite_result
from kgen.cli.terminal import make_console
from kgen.evals.suites.suite import SuiteRow, scan_suite, summarize

LEVEL1 = Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench" / "level1"
UNSERVED = "not attempted offline: no triton kernel in the library computes this reference"


def names_read_back(printed: str, names: list[str]) -> list[str]:
    """The problem column's names, a name broken over lines joined again."""
    found: list[str] = []
    for line in printed.splitlines():
        if not line[:1].strip():
            continue
        piece = line.split()[0]
        if found and found[-1] not in names and any(n.startswith(found[-1] + piece) for n in names):
            found[-1] += piece
        else:
            found.append(piece)
    return [name for name in found if name in names]


def test_a_whole_kernelbench_level_fits_80_columns_and_no_name_is_cut():
    infos, _ = scan_suite(LEVEL1)
    rows = [SuiteRow(problem=info.name, verdict="missing", reason=UNSERVED) for info in infos]
    out = make_console(file=StringIO(), width=80)
    print_suite_result(rows, summarize(rows), None, markdown=False, out=out)
    printed = out.file.getvalue()
    assert [line for line in printed.splitlines() if len(line) > 80] == []
    names = [info.name for info in infos]
    assert names_read_back(printed, names) == names  # broken only after an underscore, every part whole
    assert "time ms" not in printed  # nothing timed: the empty figure columns are left out
    assert len(printed.splitlines()) < 5 * len(rows)


def test_selected_rows_are_the_table_and_one_line_says_what_was_not_selected(tmp_path):
    rows = [SuiteRow(problem=name, verdict="missing", reason="not run yet") for name in ("1_a", "2_b", "3_c")]
    rows[1] = SuiteRow(problem="2_b", verdict="passed", candidate_ms=0.5, speedup_vs_eager=2.0)
    out = make_console(file=StringIO(), width=80)
    print_suite_result(rows[1:2], summarize(rows, selected={"2_b"}), tmp_path / "suite.md", markdown=False, out=out)
    printed = out.file.getvalue()
    assert "1_a" not in printed and "3_c" not in printed and "time ms" in printed
    said = " ".join(printed.split())  # the lines under the table wrap at spaces to the width
    assert "2 other problems of the suite were not selected: not in this table; suite.md lists all 3." in said
    assert "1 of 1 selected problem correct (they decide the exit code); the suite: 1 of 3 correct" in said
