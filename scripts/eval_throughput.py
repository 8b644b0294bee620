"""Candidates per GPU-minute in the agent's loop, and where each evaluation's seconds go.

Usage (GPU machine, kgen installed)::

    python scripts/eval_throughput.py --problems rmsnorm_backward softmax swiglu --n 8 \
        --modes one_by_one batch --out docs/benchmarks.md

For each memory-bound catalog problem it evaluates the shipped seed kernel and ``--n - 1``
parametric mutations of it (the offline agent's own operator, ``agent/search/mutation.py``) with the
options the agent's loop uses on a GPU (``kgen.agent.search.graph.agent_eval_options``: small-size screening
plus timing at the default sizes, warm verifiers started ahead, baselines kept in the run
directory). Modes:

* ``batch``: as the agent does (``evals/batch.py``): verified side by side, each timed alone on
  the GPU by the verifier that verified it (``evals/sandbox/gpu_turns.py``);
* ``one_by_one``: one complete evaluation after another, as before the batch existed.

Each mode starts with a fresh run directory (its first candidate times the baselines, the
rest reuse them). The throughput is candidates over the mode's wall time; the breakdown gives
the mean seconds of the verifier's stages and of the timing stage's phases, and the timeline's
phases per candidate (``evals/timeline.py``: start-up, hand-over, each stage, the report, the
parent's own work, and the unaccounted remainder as ``other``) with the share of the mode's wall
time during which at least one evaluation kept the GPU busy. Verdicts must not
depend on the mode: the script exits 1 when they differ.
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

from pydantic import BaseModel, Field

from kgen.evals.timeline import SEPARATOR, busy_fraction, phase_totals

#: the shipped seed kernels it mutates are Triton's, measured on an H100
BACKEND = "triton"
TARGET = "h100"


class Row(BaseModel):
    problem: str
    mode: str
    candidates: int
    wall_s: float
    verdicts: list[str]
    stages: dict[str, float] = Field(default_factory=dict)
    timing_phases: dict[str, float] = Field(default_factory=dict)
    #: the evaluations' timeline phases (``evals/timeline.py``), seconds per candidate
    phases: dict[str, float] = Field(default_factory=dict)
    #: the union of every evaluation's GPU spans over the mode's wall time
    gpu_busy: float | None = None

    @property
    def per_minute(self) -> float:
        return 60.0 * self.candidates / self.wall_s if self.wall_s > 0 else 0.0


def candidates_for(problem: str, n: int, workdir: Path, seed: int) -> list[Path]:
    """The seed kernel and ``n - 1`` mutations, written to ``workdir``."""
    from kgen.agent.search.mutation import mutate
    from kgen.backends.targets import resolve_target
    from kgen.knowledge_base import SEED_KERNELS_DIR

    source = (SEED_KERNELS_DIR / BACKEND / f"{problem}.py").read_text()
    variants = mutate(source, resolve_target(TARGET), n=n - 1, rng=random.Random(seed), backend=BACKEND)
    paths = []
    for i, text in enumerate([source, *(v.source for v in variants)]):
        path = workdir / f"{problem}_{i}.py"
        path.write_text(text)
        paths.append(path)
    return paths


def _means(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys = list(dict.fromkeys(k for d in dicts for k in d))
    return {k: round(sum(d.get(k, 0.0) for d in dicts) / max(len(dicts), 1), 2) for k in keys}


def run_mode(problem: str, paths: list[Path], mode: str, run_dir: Path, json_dir: Path | None = None) -> Row:
    from kgen.agent.run_options import RunOptions
    from kgen.agent.search.graph import agent_eval_options
    from kgen.backends.device import Device
    from kgen.evals.batch import evaluate_batch

    defaults = RunOptions(request=problem)
    options = agent_eval_options(Device.CUDA, BACKEND, TARGET, full=False, train_check=defaults.train_check,
                                 timeout_s=defaults.eval_timeout_s, run_path=run_dir)

    def heard(index: int, result) -> None:
        print(f"  {mode:10s} {paths[index].name:24s} {result.outcome:18s} {result.seconds:6.2f} s  "
              + ", ".join(f"{s.name} {s.seconds:.2f}" for s in result.stages)
              + (f"  [timing: {', '.join(f'{k} {v:.2f}' for k, v in result.bench.phase_seconds.items())}]"
                 if result.bench is not None else ""), flush=True)
        if not result.passed:
            print(f"    {result.reason[:400]}", flush=True)
        if json_dir is not None:
            json_dir.mkdir(parents=True, exist_ok=True)
            (json_dir / f"{mode}_{paths[index].stem}.json").write_text(result.model_dump_json(indent=1))

    started, started_epoch = time.monotonic(), time.time()
    results = evaluate_batch(problem, paths, options, on_result=heard, side_by_side=mode == "batch",
                             on_phase=lambda line: print(f"  {mode:10s} {line}", flush=True))
    wall = time.monotonic() - started
    busy = busy_fraction([r.timeline for r in results], (started_epoch, started_epoch + wall))
    return Row(
        problem=problem, mode=mode, candidates=len(results), wall_s=round(wall, 2),
        verdicts=[r.outcome for r in results],
        stages=_means([{s.name: s.seconds for s in r.stages} for r in results]),
        timing_phases=_means([r.bench.phase_seconds for r in results if r.bench is not None]),
        phases={k: round(v / max(len(results), 1), 2) for k, v in phase_totals([r.timeline for r in results]).items()
                if SEPARATOR not in k},
        gpu_busy=round(busy, 3) if busy is not None else None,
    )


def phase_table(rows: list[Row]) -> str:
    """Per mode, the timeline's top-level phases in seconds per candidate and the GPU-busy share:
    where an evaluation's seconds go, and how much of the wall the GPU was working."""
    keys = list(dict.fromkeys(k for r in rows for k in r.phases))
    lines = [
        "| problem | mode | GPU busy | " + " | ".join(f"{k} s" for k in keys) + " |",
        "|" + "---|" * (3 + len(keys)),
    ]
    for r in rows:
        busy = f"{100 * r.gpu_busy:.0f}%" if r.gpu_busy is not None else "-"
        lines.append(f"| {r.problem} | {r.mode} | {busy} | "
                     + " | ".join(f"{r.phases.get(k, 0.0):.2f}" for k in keys) + " |")
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    stage_keys = ["static", "load", "correctness", "compile", "timing"]
    phase_keys = list(dict.fromkeys(k for r in rows for k in r.timing_phases))
    lines = [
        "| problem | mode | candidates | wall s | per minute | passed | " + " | ".join(f"{k} s" for k in stage_keys)
        + " | " + " | ".join(f"timing: {k} s" for k in phase_keys) + " |",
        "|" + "---|" * (6 + len(stage_keys) + len(phase_keys)),
    ]
    for r in rows:
        lines.append(
            f"| {r.problem} | {r.mode} | {r.candidates} | {r.wall_s:.1f} | {r.per_minute:.1f} | "
            f"{sum(v == 'passed' for v in r.verdicts)} | "
            + " | ".join(f"{r.stages.get(k, 0.0):.2f}" for k in stage_keys) + " | "
            + " | ".join(f"{r.timing_phases.get(k, 0.0):.2f}" for k in phase_keys) + " |"
        )
    total = {}
    for r in rows:
        n, wall = total.get(r.mode, (0, 0.0))
        total[r.mode] = (n + r.candidates, wall + r.wall_s)
    lines.append("")
    lines += [f"{mode}: {n} candidates in {wall:.1f} s, {60 * n / wall:.1f} per GPU-minute" for mode, (n, wall) in total.items()]
    lines += ["", "Where each candidate's seconds went (timeline phases, per candidate):", "", phase_table(rows)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=["rmsnorm_backward", "softmax", "swiglu"])
    parser.add_argument("--n", type=int, default=8, help="candidates per problem (the seed and n-1 mutations)")
    parser.add_argument("--modes", nargs="+", default=["batch"], choices=["batch", "one_by_one"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="append the table to this markdown file")
    parser.add_argument("--json-dir", type=Path, help="write every evaluation's whole result here as JSON")
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
                rows.append(run_mode(problem, paths, mode, run_dir, args.json_dir))
                print(table(rows[-1:]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = table(rows)
    print(text)
    mismatched = [
        (a.problem, a.mode, b.mode) for a in rows for b in rows
        if a.problem == b.problem and a.mode < b.mode and a.verdicts != b.verdicts
    ]
    for problem, first, second in mismatched:
        print(f"verdicts differ for {problem} between {first} and {second}", file=sys.stderr)
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
