"""kgen's own Triton solutions for unmodified KernelBench files, verified and timed at full size.

Usage (GPU machine, kgen installed)::

    python scripts/kernelbench_full_size.py [--only 19_ReLU 23_Softmax] [--out docs/benchmarks.md]

Each (problem, solution) pair under ``tests/fixtures/kernelbench_solutions`` goes through
``kgen.evaluate`` with ``--bench`` at the problem's own default sizes, one at a time. The
table gives the verdict, seconds, the device peak against the problem's inputs + outputs
(kgen's target: at most 3x), where the fp64 reference ran, and the candidate's time and
speedups. With ``--out`` it is appended under a heading naming the command, GPU and date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "fixtures" / "kernelbench_solutions"
PROBLEMS = ROOT / "tests" / "fixtures" / "kernelbench"


def pairs(only: list[str] | None) -> list[tuple[Path, Path]]:
    found = []
    for solution in sorted(SOLUTIONS.glob("level*_*.py")):
        level, name = solution.stem.split("_", 1)
        if only and name not in only:
            continue
        found.append((PROBLEMS / level / f"{name}.py", solution))
    return found


def _median(result, key: str) -> str:
    value = result.bench.median(key) if result.bench is not None else None
    return f"{value:.3f}" if value is not None else ""


def row(problem: Path, solution: Path, timeout_s: float, json_dir: Path | None) -> str:
    from kgen.evals.harness import EvalOptions, evaluate

    result = evaluate(problem, solution, EvalOptions(device="cuda", bench=True, timeout_s=timeout_s))
    if json_dir is not None:  # the whole result: stages, trials, memory report, timings
        json_dir.mkdir(parents=True, exist_ok=True)
        (json_dir / f"{problem.stem}.json").write_text(result.model_dump_json(indent=1))
    print("  stages: " + ", ".join(f"{s.name} {s.seconds:.1f} s" for s in result.stages), flush=True)
    memory = result.memory
    peak = f"{memory.peak_bytes / 1e9:.1f}" if memory and memory.peak_bytes is not None else ""
    ratio = f"{memory.peak_ratio:.2f}x" if memory and memory.peak_ratio is not None else ""
    placement = ", ".join(sorted(set(memory.placements.values()))) if memory else ""
    cand, eager, comp = (_median(result, k) for k in ("candidate", "eager", "torch.compile"))
    speed = ""
    if cand and eager:
        speed = f"{float(eager) / float(cand):.2f}x"
    if cand and comp:
        speed += f" / {float(comp) / float(cand):.2f}x"
    reason = "" if result.passed else result.reason.replace("|", "/").replace("\n", " ")[:160]
    size = f"{memory.problem_bytes / 1e9:.1f}" if memory else ""
    return (f"| {problem.stem} | {result.outcome} | {result.seconds:.0f} | {size} | {peak} | {ratio} | {placement} | "
            f"{cand} | {speed} | {reason} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", help="problem names, e.g. 19_ReLU")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per evaluation")
    parser.add_argument("--out", type=Path, help="append the table to this markdown file")
    parser.add_argument("--json-dir", type=Path, help="write each evaluation's whole result here as JSON")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("kernelbench_full_size.py verifies at full size on a GPU: no CUDA GPU is visible here", file=sys.stderr)
        return 2
    lines = ["| problem | verdict | seconds | inputs + outputs GB | device peak GB | peak / (in + out) | "
             "fp64 reference on | candidate ms | vs eager / vs torch.compile | reason |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    failed = 0
    for problem, solution in pairs(args.only):
        line = row(problem, solution, args.timeout, args.json_dir)
        failed += "| passed |" not in line
        print(line, flush=True)
        lines.append(line)
    text = "\n".join(lines)
    if args.out is not None:
        command = "python scripts/kernelbench_full_size.py " + " ".join(argv if argv is not None else sys.argv[1:])
        with args.out.open("a") as fh:
            fh.write(f"\n## KernelBench level 1 at full size ({torch.cuda.get_device_name()}, "
                     f"{dt.date.today().isoformat()})\n\nCommand: `{command}`\n\n{text}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
