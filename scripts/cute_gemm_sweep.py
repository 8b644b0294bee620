"""Compare versions and tilings of the CuTe GEMM seed against cuBLAS on one GPU, in one process.

Usage:
    python3 scripts/cute_gemm_sweep.py SEED.py [SEED.py...] [--rounds 7] [--iters 30]
        [--variant NAME=VALUE[,NAME=VALUE...]]...

Each SEED.py is a version of the GEMM seed (named after its problem, gemm_bias_gelu.py, and
labelled by its folder). Each variant is each version with some of its module constants set
otherwise (``--variant GROUP_M=16``; ``--variant ""`` keeps them; without --variant a
built-in list of tilings). For each it writes
the changed source to a folder of its own, checks it at every size set of the problem with
scripts/cute_seed_gpu_check.py (fp64 reference, kgen's tolerances), and then times the
kernels alone (the executor calls one forward makes, replayed) at the default size.

Timing is interleaved: every round times every variant and both cuBLAS forms (F.linear, and
F.linear + F.gelu(tanh)) once each, median of --iters CUDA-event timed calls, in an order
that rotates by one column per round. An H100 running a large GEMM sits at its power limit
and its clock moves by 10-20% from one round to the next, so the comparison with cuBLAS is
made within each round (cuBLAS's time over the variant's) and reported as the median of
those ratios over the rounds, with quartiles.
A variant that fails its check or its compile is reported and not timed. With --write-best DIR
the fastest variant's source is written to DIR/<problem>.py (for kgen eval and kgen bench).
"""

import argparse
import os
import re
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cute_seed_gpu_check as check  # noqa: E402

#: tilings tried when no --variant is given (each valid for _check_config)
DEFAULT_VARIANTS = [
    {},
    {"GROUP_M": 4},
    {"GROUP_M": 16},
    {"GROUP_M": 32},
    {"CLUSTER_M": 1},
    {"CLUSTER_M": 4},
    {"NUM_STAGES": 3},
    {"BLOCK_N": 128, "NUM_STAGES": 6},
    {"BLOCK_K": 128, "NUM_STAGES": 2},
    {"EPILOGUE_CHUNK": 16},
    {"EPILOGUE_CHUNK": 64},
]


def with_constants(source: str, constants: dict) -> str:
    """The seed's source with each named module constant (a line ``NAME = ...``) set to its value."""
    for name, value in constants.items():
        source, count = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", source, count=1, flags=re.M)
        if count != 1:
            raise SystemExit(f"no module constant {name} in the seed")
    return source


def parse_variant(text: str) -> dict:
    constants = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        constants[name.strip()] = int(value)
    return constants


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", nargs="+")
    ap.add_argument("--variant", action="append", type=parse_variant, default=None)
    ap.add_argument("--write-best", metavar="DIR")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device")
        sys.exit(2)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    names = {os.path.splitext(os.path.basename(seed))[0] for seed in a.seeds}
    if len(names) != 1:
        raise SystemExit(f"the seeds must be versions of one problem's seed, not {sorted(names)}")
    name = names.pop()
    work = tempfile.mkdtemp(prefix="gemm_sweep_")
    versions = [(os.path.basename(os.path.dirname(os.path.abspath(seed))), open(seed).read(), v)
                for seed in a.seeds for v in (a.variant or DEFAULT_VARIANTS)]

    problem = check.load(os.path.join(check.PROBLEMS, name + ".py"), f"problem_{name}")
    torch.manual_seed(0)
    inputs = [t.cuda() for t in problem.get_inputs()]
    runners, sources = {}, {}
    for i, (label, text, constants) in enumerate(versions):
        desc = label + ("" if not constants else " " + ",".join(f"{k}={v}" for k, v in constants.items()))
        folder = os.path.join(work, f"v{i}")
        os.makedirs(folder)
        path = os.path.join(folder, name + ".py")
        with open(path, "w") as f:
            f.write(with_constants(text, constants))
        print(f"--- {desc}", flush=True)
        if not check.check_seed(path, a.iters, timing=False):
            print(f"SKIP {desc}: failed its check", flush=True)
            continue
        try:
            module = check.load(path, f"sweep_{i}")
            with torch.no_grad():
                model = module.ModelNew(*problem.get_init_inputs()).cuda()
                runner = check.replay_runner(model, inputs)
            runners[desc] = (runner, lambda m=model: m(*inputs))
            sources[desc] = path
        except Exception as exc:  # a compile error of one tiling ends that variant only
            print(f"SKIP {desc}: {type(exc).__name__}\n{check.short_tb(exc)}", flush=True)
        torch.cuda.empty_cache()

    library = check.LIBRARY[name]
    columns = {**{d: r for d, (r, _) in runners.items()},
               **{f"{d} (forward, host work included)": f for d, (_, f) in list(runners.items())[:1]},
               **{lib: (lambda f=fn: f(*inputs)) for lib, fn in library.items()}}
    times = {c: [] for c in columns}
    order = list(columns)
    with torch.no_grad():
        for r in range(a.rounds):
            # each round starts one column later, so no column always follows the same one
            for c in order[r % len(order):] + order[:r % len(order)]:
                times[c].append(check.time_calls(columns[c], a.iters, back_to_back=False)[0])
    m, k, n = problem.M, problem.K, problem.N
    bare_name, fused_name = library
    print(f"\nM={m} K={k} N={n}, {a.rounds} interleaved rounds, each the median of {a.iters} calls per column.")
    print("ms: median over the rounds; x cuBLAS: the median over the rounds of that round's cuBLAS time over this "
          "column's (a GPU near its power limit changes clock between rounds; a ratio within one round does not "
          "see that), with its quartiles")
    for c, ts in sorted(times.items(), key=lambda item: statistics.median(item[1])):
        ms = statistics.median(ts)
        bare = [b / t for b, t in zip(times[bare_name], ts, strict=True)]
        fused = [f / t for f, t in zip(times[fused_name], ts, strict=True)]
        q1, _, q3 = statistics.quantiles(bare, n=4) if len(bare) > 1 else (bare[0],) * 3
        print(f"{ms:8.3f} ms  {2 * m * n * k / (ms * 1e-3) / 1e12:6.1f} TFLOP/s  x bare cuBLAS "
              f"{statistics.median(bare):5.3f} [{q1:.3f}-{q3:.3f}]  x cuBLAS+GELU {statistics.median(fused):5.3f}  "
              f"(rounds {min(ts):.3f}-{max(ts):.3f} ms)  {c}")
    if a.write_best and sources:
        best = min(sources, key=lambda d: statistics.median(times[d]))
        os.makedirs(a.write_best, exist_ok=True)
        with open(os.path.join(a.write_best, name + ".py"), "w") as f:
            f.write(open(sources[best]).read())
        print(f"fastest (median ms): {best}, written to {a.write_best}")


if __name__ == "__main__":
    main()
