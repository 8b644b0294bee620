"""Candidates per GPU-minute in the agent's loop, and where each evaluation's seconds go.

Usage (GPU machine, kgen installed)::

    python scripts/eval_throughput.py --problems rmsnorm_backward softmax swiglu --n 8 \
        --out docs/benchmarks.md

For each memory-bound catalog problem it evaluates the shipped seed kernel and ``--n - 1``
parametric mutations of it (the offline agent's own operator, ``agent/mutation.py``) with the
options the agent's loop uses on a GPU (``GraphRun.eval_options``: small-size screening plus
timing), one after another as the agent does. The breakdown splits each evaluation's wall time into the verifier's stages (static, load,
correctness, compile, timing) and what happened outside them (process start, waiting).
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel


class Row(BaseModel):
    problem: str
    candidate: str
    mode: str
    verdict: str
    wall_s: float
    stages: dict[str, float]
    prestarted: bool | None = None


def candidates_for(problem: str, n: int, workdir: Path, seed: int) -> list[Path]:
    """The seed kernel and ``n - 1`` mutations, written to ``workdir``."""
    from kgen.agent.mutation import mutate
    from kgen.backends.targets import resolve_target
    from kgen.knowledge_base import SEED_KERNELS_DIR

    source = (SEED_KERNELS_DIR / "triton" / f"{problem}.py").read_text()
    variants = mutate(source, resolve_target("h100"), n=n - 1, rng=random.Random(seed))
    paths = []
    for i, text in enumerate([source, *(v.source for v in variants)]):
        path = workdir / f"{problem}_{i}.py"
        path.write_text(text)
        paths.append(path)
    return paths


def evaluate_all(problem: str, paths: list[Path], mode: str, run_dir: Path) -> list[Row]:
    from kgen.evals.harness import EvalOptions, evaluate

    # the agent's screening options on a GPU (agent/graph.py: eval_options with full=False)
    options = EvalOptions(device="cuda", targets=["h100"], small_sizes=True, n_seeds=2, bench=True)
    rows = []
    for path in paths:
        started = time.monotonic()
        result = evaluate(problem, path, options)
        wall = time.monotonic() - started
        stages = {s.name: round(s.seconds, 3) for s in result.stages}
        stages["outside stages"] = round(max(wall - sum(stages.values()), 0.0), 3)
        rows.append(Row(problem=problem, candidate=path.name, mode=mode, verdict=result.outcome,
                        wall_s=round(wall, 3), stages=stages, prestarted=getattr(result, "prestarted", None)))
        print(f"  {mode:6s} {path.name:28s} {result.outcome:12s} {wall:6.2f} s  "
              + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()), flush=True)
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| problem | mode | candidates | per minute | mean s | process start + waiting | static | load | "
             "correctness | compile | timing |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = ["outside stages", "static", "load", "correctness", "compile", "timing"]
    for problem in dict.fromkeys(r.problem for r in rows):
        for mode in dict.fromkeys(r.mode for r in rows):
            group = [r for r in rows if r.problem == problem and r.mode == mode]
            if not group:
                continue
            total = sum(r.wall_s for r in group)
            means = [sum(r.stages.get(k, 0.0) for r in group) / len(group) for k in keys]
            lines.append(
                f"| {problem} | {mode} | {len(group)} | {60 * len(group) / total:.1f} | {total / len(group):.2f} | "
                + " | ".join(f"{m:.2f}" for m in means) + " |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=["rmsnorm_backward", "softmax", "swiglu"])
    parser.add_argument("--n", type=int, default=8, help="candidates per problem (the seed and n-1 mutations)")
    parser.add_argument("--modes", nargs="+", default=["current"], help="labels for repeated passes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="append the table to this markdown file")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("eval_throughput.py measures GPU evaluations: no CUDA GPU is visible here", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="kgen-throughput-"))
    rows: list[Row] = []
    try:
        for problem in args.problems:
            paths = candidates_for(problem, args.n, workdir, args.seed)
            print(f"{problem}: {len(paths)} candidates", flush=True)
            for mode in args.modes:
                run_dir = workdir / f"run-{problem}-{mode}"
                run_dir.mkdir()
                rows += evaluate_all(problem, paths, mode, run_dir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = table(rows)
    print(text)
    first = args.modes[0]
    mismatched = [
        (b.problem, b.candidate, b.verdict, a.verdict, a.mode)
        for b in rows if b.mode == first
        for a in rows if a.mode != first and a.problem == b.problem and a.candidate == b.candidate
        if a.verdict != b.verdict
    ]
    for problem, candidate, before, after, mode in mismatched:
        print(f"verdicts differ for {problem}/{candidate}: {first} {before}, {mode} {after}", file=sys.stderr)
    if args.out is not None:
        command = "python scripts/eval_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:])
        with args.out.open("a") as fh:
            fh.write(
                f"\n## Evaluation throughput ({torch.cuda.get_device_name()}, {dt.date.today().isoformat()})\n\n"
                f"Command: `{command}`\n\n{text}\n"
            )
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
