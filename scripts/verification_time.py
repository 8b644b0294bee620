"""How long `kgen eval` takes per candidate at its default settings (the shipped seed kernels).

Usage: python scripts/verification_time.py [--device cpu|cuda]
Prints a markdown table for docs/benchmarks.md: wall seconds per `evaluate()` call
(child start, every trial, ghost check, cache probe), and the trial count.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time
from pathlib import Path

from kgen.evals.harness import EvalOptions, evaluate
from kgen.knowledge_base import SEED_KERNELS_DIR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    rows, seconds = [], []
    for path in sorted((SEED_KERNELS_DIR / "triton").glob("*.py")):
        started = time.monotonic()
        result = evaluate(path.stem, path, EvalOptions(device=args.device))
        elapsed = time.monotonic() - started
        seconds.append(elapsed)
        why = "" if result.passed else f" {result.outcome}: {result.reason[:200]} (seeds {sorted({t.seed for t in result.trials})})"
        rows.append(f"| {path.stem} | {result.verdict.value}{why} | {len(result.trials)} | {elapsed:.1f} |")
        print(rows[-1], flush=True)
    print()
    print(f"`python scripts/verification_time.py --device {args.device}`, {datetime.date.today()}, "
          f"{platform.machine()} with {Path('/proc/cpuinfo').read_text().count('processor')} cores")
    print("| problem | verdict | trials | seconds |\n|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nmedian {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s")


if __name__ == "__main__":
    main()
