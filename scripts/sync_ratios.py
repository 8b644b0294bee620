"""The timing-verdict evidence of every candidate in agent runs: were honest kernels ever flagged?

Usage::

    python scripts/sync_ratios.py RUN_DIR [RUN_DIR ...] [--out docs/benchmarks.md]

For each candidate evaluation saved in the run directories (``candidates/*/eval.json`` and
``final_eval.json``), one row: the verdict (and rejection class), the candidate's median time,
its sync ratio, its flags, and the honest op it was calibrated against. The last line counts
timing verdicts: ``deferred_work`` rejections and flagged measurements. Exit 1 when a candidate
was rejected for its timing (``deferred_work``, ``timing_attack``), so a GPU job can fail on it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: rejection classes a timing verdict gives (the kernel was correct but its timing was not honest)
TIMING_REJECTIONS = ("deferred_work", "timing_attack")


def rows(run: Path) -> list[tuple[str, str]]:
    from kgen.evals.result import EvalResult

    found = []
    for path in sorted(run.glob("candidates/*/*eval.json")):
        result = EvalResult.model_validate_json(path.read_text())
        bench = result.bench
        cand = bench.measurements.get("candidate") if bench is not None else None
        verdict = result.outcome + (f" ({result.rejection.value})" if result.rejection else "")
        ratio = f"{cand.sync_ratio:.2f}" if cand is not None and cand.sync_ratio is not None else ""
        median = f"{cand.median_ms:.4f}" if cand is not None and cand.median_ms is not None else ""
        flags = "; ".join(cand.flags) if cand is not None else ""
        calib = bench.sync_calibration if bench is not None else None
        honest = f"{calib.op}: hidden p10-p90 {calib.hidden_p10_ms:.4f}-{calib.hidden_p90_ms:.4f} ms" if calib else ""
        name = f"{run.name}/{path.parent.name}/{path.name.removesuffix('.json')}"
        rejection = result.rejection.value if result.rejection else ""
        found.append((f"| {name} | {verdict} | {median} | {ratio} | {flags.replace('|', '/')} | {honest} |", rejection))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="agent run directories")
    parser.add_argument("--out", type=Path, help="append the table to this markdown file")
    args = parser.parse_args(argv)
    lines = ["| evaluation | verdict | candidate ms | sync ratio | flags | honest op calibration |",
             "|---|---|---|---|---|---|"]
    rejected_for_timing, flagged, total = 0, 0, 0
    for run in args.runs:
        if not (run / "candidates").is_dir():
            parser.error(f"not a run directory (no candidates/): {run}")
        for line, rejection in rows(run):
            lines.append(line)
            total += 1
            rejected_for_timing += rejection in TIMING_REJECTIONS
            flagged += line.split("|")[5].strip() != ""
    lines.append("")
    lines.append(f"{total} evaluations; {rejected_for_timing} rejected for their timing; {flagged} with flags")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        with args.out.open("a") as out:
            out.write("\n" + text)
    return 1 if rejected_for_timing else 0


if __name__ == "__main__":
    sys.exit(main())
