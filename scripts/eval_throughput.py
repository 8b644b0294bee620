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
* ``one_by_one``: one complete evaluation after another, as before the batch existed;
* ``all_problems``: every problem's batch at once (a thread each, as `kgen solve` runs problems
  on several GPUs), over the executor's lanes: with ``--gpus 1 2 4`` the same candidates are
  evaluated on 1, 2 and 4 GPUs (``--executor local`` or ``ray``), and the table's last lines give
  each count's candidates per minute and its speed-up over the first count. The lanes are started
  before the clock starts (their start-up is printed apart: once per process in real use).

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
#: where the candidates run ("cpu" for a dry run of this script)
DEVICE = "cuda"


class Row(BaseModel):
    problem: str
    mode: str
    #: GPUs the executor used (its lanes) and which executor
    gpus: int = 1
    executor: str = "local"
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


def run_mode(problem: str, paths: list[Path], mode: str, run_dir: Path, json_dir: Path | None = None,
             keep: bool = False):
    """One problem's candidates in ``mode``; with ``keep``, the row and the results."""
    from kgen.agent.run_options import RunOptions
    from kgen.agent.search.graph import agent_eval_options
    from kgen.backends.device import Device
    from kgen.evals.batch import evaluate_batch

    defaults = RunOptions(request=problem)
    options = agent_eval_options(Device(DEVICE), BACKEND, TARGET, full=False, train_check=defaults.train_check,
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
    row = Row(
        problem=problem, mode=mode, candidates=len(results), wall_s=round(wall, 2),
        verdicts=[r.outcome for r in results],
        stages=_means([{s.name: s.seconds for s in r.stages} for r in results]),
        timing_phases=_means([r.bench.phase_seconds for r in results if r.bench is not None]),
        phases={k: round(v / max(len(results), 1), 2) for k, v in phase_totals([r.timeline for r in results]).items()
                if SEPARATOR not in k},
        gpu_busy=round(busy, 3) if busy is not None else None,
    )
    return (row, results) if keep else row


def open_lanes(executor: str, gpus: int, ray_address: str | None) -> float:
    """Choose the executor and start its lanes; the seconds it took."""
    from kgen.backends.device import Device
    from kgen.evals.executors.session import ExecutorChoice, choose, executor_for

    started = time.monotonic()
    choose(ExecutorChoice(executor=executor, gpus=gpus, ray_address=ray_address), say=print)
    executor_for(Device(DEVICE), [TARGET])
    return time.monotonic() - started


def run_all_problems(paths: dict[str, list[Path]], run_dir: Path, json_dir: Path | None) -> Row:
    """Every problem's batch at once, a thread each, over the open executor's lanes."""
    import threading

    results: dict[str, Row] = {}
    started, started_epoch = time.monotonic(), time.time()
    timelines = []
    lock = threading.Lock()

    def one(problem: str) -> None:
        folder = run_dir / problem
        folder.mkdir()
        row, found = run_mode(problem, paths[problem], "batch", folder, json_dir, keep=True)
        with lock:
            results[problem] = row
            timelines.extend(r.timeline for r in found)

    threads = [threading.Thread(target=one, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    busy = busy_fraction(timelines, (started_epoch, started_epoch + wall))
    rows = [results[p] for p in paths if p in results]
    return Row(problem="all", mode="all_problems", candidates=sum(r.candidates for r in rows), wall_s=round(wall, 2),
               verdicts=[v for r in rows for v in r.verdicts],
               stages=_means([r.stages for r in rows]), timing_phases=_means([r.timing_phases for r in rows]),
               phases=_means([r.phases for r in rows]), gpu_busy=round(busy, 3) if busy is not None else None)


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
        "| problem | mode | executor | GPUs | candidates | wall s | per minute | passed | " + " | ".join(f"{k} s" for k in stage_keys)
        + " | " + " | ".join(f"timing: {k} s" for k in phase_keys) + " |",
        "|" + "---|" * (8 + len(stage_keys) + len(phase_keys)),
    ]
    for r in rows:
        lines.append(
            f"| {r.problem} | {r.mode} | {r.executor} | {r.gpus} | {r.candidates} | {r.wall_s:.1f} | {r.per_minute:.1f} | "
            f"{sum(v == 'passed' for v in r.verdicts)} | "
            + " | ".join(f"{r.stages.get(k, 0.0):.2f}" for k in stage_keys) + " | "
            + " | ".join(f"{r.timing_phases.get(k, 0.0):.2f}" for k in phase_keys) + " |"
        )
    total: dict[tuple[str, str, int], tuple[int, float]] = {}
    for r in rows:
        n, wall = total.get((r.executor, r.mode, r.gpus), (0, 0.0))
        total[(r.executor, r.mode, r.gpus)] = (n + r.candidates, wall + r.wall_s)
    lines.append("")
    first: dict[tuple[str, str], float] = {}
    for (executor, mode, gpus), (n, wall) in total.items():
        rate = 60 * n / wall
        later = (executor, mode) in first
        base = first.setdefault((executor, mode), rate)
        lines.append(f"{executor} {mode} on {gpus} GPU(s): {n} candidates in {wall:.1f} s, {rate:.1f} per minute"
                     + (f", {rate / base:.2f}x the first count" if later else ""))
    lines += ["", "Where each candidate's seconds went (timeline phases, per candidate):", "", phase_table(rows)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=["rmsnorm_backward", "softmax", "swiglu"])
    parser.add_argument("--n", type=int, default=8, help="candidates per problem (the seed and n-1 mutations)")
    parser.add_argument("--modes", nargs="+", default=["batch"], choices=["batch", "one_by_one", "all_problems"])
    parser.add_argument("--gpus", nargs="+", type=int, default=[1], help="GPU counts to measure (a lane each)")
    parser.add_argument("--executor", default="local", choices=["local", "ray"])
    parser.add_argument("--ray-address", default=None)
    parser.add_argument("--warmup", action="store_true",
                        help="before measuring, evaluate each problem's seed once on the most GPUs asked for: "
                             "the baselines kgen keeps per GPU model (KGEN_HOME) and the compile caches are then "
                             "as warm for the first GPU count as for the later ones")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a dry run of the script's own logic (verification only, no timings)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="append the table to this markdown file")
    parser.add_argument("--json-dir", type=Path, help="write every evaluation's whole result here as JSON")
    args = parser.parse_args(argv)

    import torch

    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("eval_throughput.py measures GPU evaluations: no CUDA GPU is visible here", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="kgen-throughput-"))
    rows: list[Row] = []
    try:
        paths = {problem: candidates_for(problem, args.n, workdir, args.seed) for problem in args.problems}
        if args.warmup:
            started = time.monotonic()
            open_lanes(args.executor, max(args.gpus), args.ray_address)
            warm_dir = workdir / "warmup"
            warm_dir.mkdir()
            run_all_problems({p: found[:1] for p, found in paths.items()}, warm_dir, None)
            print(f"warm-up: each problem's seed once in {time.monotonic() - started:.1f} s", flush=True)
        for gpus in args.gpus:
            lanes_s = open_lanes(args.executor, gpus, args.ray_address)
            print(f"{args.executor} executor, {gpus} GPU(s): lanes started in {lanes_s:.1f} s", flush=True)
            json_dir = args.json_dir / f"{args.executor}-{gpus}gpu" if args.json_dir else None
            for mode in args.modes:
                if mode == "all_problems":
                    run_dir = workdir / f"run-all-{gpus}"
                    run_dir.mkdir()
                    row = run_all_problems(paths, run_dir, json_dir)
                    rows.append(row.model_copy(update={"gpus": gpus, "executor": args.executor}))
                    print(table(rows[-1:]), flush=True)
                    continue
                for problem in args.problems:
                    run_dir = workdir / f"run-{problem}-{mode}-{gpus}"
                    run_dir.mkdir()
                    row = run_mode(problem, paths[problem], mode, run_dir, json_dir)
                    rows.append(row.model_copy(update={"gpus": gpus, "executor": args.executor}))
                    print(table(rows[-1:]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        from kgen.evals.executors.session import close_all

        close_all()
    text = table(rows)
    print(text)
    mismatched = [
        (a.problem, f"{a.mode}@{a.gpus}", f"{b.mode}@{b.gpus}") for a in rows for b in rows
        if a.problem == b.problem and (a.mode, a.gpus) < (b.mode, b.gpus) and a.verdicts != b.verdicts
    ]
    for problem, first, second in mismatched:
        print(f"verdicts differ for {problem} between {first} and {second}", file=sys.stderr)
    if args.out is not None:
        command = "python scripts/eval_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:])
        with args.out.open("a") as fh:
            fh.write(
                f"\n## Evaluation throughput ({torch.cuda.get_device_name() if DEVICE == 'cuda' else 'CPU dry run'}, {dt.date.today().isoformat()})\n\n"
                f"Command: `{command}`\n\n{text}\n"
            )
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
