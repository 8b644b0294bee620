#!/usr/bin/env python3
"""Does kgen's offline search find a near-best configuration with a quarter of a sweep's evaluations?

The claim under test (run on a GPU): starting from a deliberately de-tuned seed
(bad block sizes and warps; ``scripts/detuned_seeds/``) for RMSNorm backward,
LayerNorm forward and softmax, kgen's offline search reaches within 5% of the
best configuration an exhaustive sweep of the same parameter space finds,
using at most 25% of the sweep's evaluations.

For each problem:

1. SEARCH. A temporary knowledge base holds one kernel: the de-tuned seed
   (with its verification evidence: ``detuned_seeds/evidence.json`` when it
   matches the seed's code, else a fresh ``kgen.evaluate``). kgen's real
   offline run (``kgen.generate``, no model, ``persist=False``) tunes it with a
   budget of floor(0.25 x the space's size) candidates, kgen's default number
   of generations unless ``--generations`` says otherwise. Its winner's knob
   values are read back from the winning source. (A block-size knob's choices
   are relative to its value, so a search that moves on from a variant can
   leave the seed's space: such a winner is timed in the sweep too, and the
   table says it was outside.)
2. SWEEP. Every point of ``kgen.agent.search.mutation.parameter_space(seed)`` (the
   product of the knobs' choices, as ``mutate`` would propose them) is built
   with ``apply_values``, imported, checked once against the problem's
   ``Model`` (loose tolerance: a failure is recorded, never fatal) and timed
   in this one process with kgen's own timer (``kgen.evals.timing.measure.time_on_gpu``:
   L2 flushed before each trial, three input sets rotated, median of the
   trials) at the problem's default sizes. The sweep's best few and the
   search's winner are then timed again, alternately and longer, and those
   figures decide.
3. JUDGE. ratio = the winner's time / the sweep's best time (pass: <= 1.05);
   share = the search's evaluations (``summary.candidates``, the seed's
   re-measure included) / the space's size (pass: <= 0.25).

Outputs under ``--out``: ``<problem>/result.json`` (every swept time, the run's
summary, the verdicts), ``<problem>/run/`` (the kgen run directory),
``search_vs_sweep.json`` and ``search_vs_sweep.md`` (one row per problem
result found under ``--out``, so problems run in separate calls into the same
folder add up). Exit code 0: every problem passed both criteria; 1: one
failed (the table says which) or could not be run; 2: bad usage.

``--dry-run`` needs no GPU: it enumerates the spaces, builds and imports every
variant, checks a few of them in Triton's interpreter at the problem's small
sizes, and runs the search on the CPU with a tiny budget (3), so every code
path but the timing runs. Nothing is judged in a dry run.

Examples:
  python scripts/search_vs_sweep.py --out /tmp/svs                        # on the GPU, all three
  python scripts/search_vs_sweep.py --problems softmax --out /tmp/svs     # one problem per call
  python scripts/search_vs_sweep.py --report-only --out /tmp/svs          # the table again
  python scripts/search_vs_sweep.py --merge a/softmax.json b/layernorm_forward.json --out merged
  python scripts/search_vs_sweep.py --dry-run --problems layernorm_forward --out /tmp/svs_dry
  python scripts/search_vs_sweep.py --write-evidence --device cpu         # refresh evidence.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEEDS_DIR = ROOT / "scripts" / "detuned_seeds"
#: the de-tuned seeds are Triton kernels (run under TRITON_INTERPRET on a CPU): their backend
#: finds their knobs and names them in the knowledge base
BACKEND = "triton"
EVIDENCE_FILE = "evidence.json"
DEFAULT_PROBLEMS = ("rmsnorm_backward", "layernorm_forward", "softmax")
RESULT_FILE = "result.json"
REPORT_NAME = "search_vs_sweep"
#: the sweep's best this many configurations are timed again, with the search's winner
CONFIRM_TOP = 3


def say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


# --------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="search_vs_sweep.py",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--problems", nargs="+", default=list(DEFAULT_PROBLEMS), metavar="NAME",
                        help="catalog problems, each with a seed NAME.py in --seeds-dir "
                             f"(default: {' '.join(DEFAULT_PROBLEMS)})")
    parser.add_argument("--out", type=Path, default=Path("search_vs_sweep_out"),
                        help="output folder (default: ./search_vs_sweep_out); a problem's folder in it "
                             "is replaced when that problem runs again")
    parser.add_argument("--seeds-dir", type=Path, default=SEEDS_DIR,
                        help="where the de-tuned seeds are (default: scripts/detuned_seeds)")
    parser.add_argument("--target", default="auto",
                        help="kgen hardware target of the space and the run (default: auto, the local "
                             "GPU's, else h100): the search ranks only times measured on its target's GPU")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="cuda (default), or cpu (implied by --dry-run)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: build and import every variant, check a few in the interpreter, "
                             "run the search on the CPU with a tiny budget; nothing timed or judged")
    parser.add_argument("--share", type=float, default=0.25,
                        help="the search's budget as a share of the space's size, rounded down "
                             "(default: 0.25), and the criterion it is judged by")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="how much slower than the sweep's best the winner may be (default: 0.05)")
    parser.add_argument("--budget", type=int, default=None,
                        help="candidates for the search instead of floor(share x size) "
                             "(default in a dry run: 3)")
    parser.add_argument("--generations", type=int, default=None,
                        help="generations of the search (default: kgen's own, as `kgen --budget B` "
                             "runs it; a CPU run has one)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the search's mutation moves (default: 0)")
    parser.add_argument("--run-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra keyword for kgen.generate (repeatable; a value is read as JSON "
                             "when it parses, e.g. plateau_generations=2, islands=2)")
    parser.add_argument("--search-time", type=float, default=None, metavar="SECONDS",
                        help="wall-time limit of each search (kgen's --time; default: none)")
    parser.add_argument("--sweep-budget", type=float, default=0.3, metavar="SECONDS",
                        help="timing budget per swept configuration (default: 0.3)")
    parser.add_argument("--confirm-budget", type=float, default=1.0, metavar="SECONDS",
                        help="timing budget of each confirming re-measure (default: 1.0)")
    parser.add_argument("--compile-jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="processes that compile the variants ahead of the timed sweep "
                             "(default: min(8, cores); 0: compile in the sweep itself)")
    parser.add_argument("--dry-run-checks", type=int, default=2, metavar="N",
                        help="variants checked against the reference in the interpreter in a dry run "
                             "(default: 2, always the seed's own point among them)")
    parser.add_argument("--report-only", action="store_true",
                        help="only (re)write the table from the results already under --out")
    parser.add_argument("--merge", nargs="+", type=Path, default=None, metavar="RESULT_JSON",
                        help="no GPU: put these per-problem results (a problem folder's result.json, or "
                             "gpu_search.sh's <problem>.json) under --out and write the table over all")
    parser.add_argument("--write-evidence", action="store_true",
                        help="verify each seed with kgen.evaluate on --device and save the evidence to "
                             "detuned_seeds/evidence.json (keyed by code hash), then stop")
    args = parser.parse_args(argv)
    if args.dry_run:
        if args.device == "cuda":
            parser.error("--dry-run runs on the CPU; leave out --device cuda")
        args.device = "cpu"
    args.device = args.device or "cuda"
    if not 0 < args.share <= 1:
        parser.error("--share must be in (0, 1]")
    if args.budget is not None and args.budget < 1:
        parser.error("--budget must be at least 1")
    if args.generations is not None and args.generations < 1:
        parser.error("--generations must be at least 1")
    try:
        args.run_options = dict(_run_option(text) for text in args.run_option)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def _run_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--run-option takes KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


# --------------------------------------------------------------------------------------
# Seeds, spaces, variants
# --------------------------------------------------------------------------------------


def knob_values(source: str, target) -> dict[str, Any]:
    from kgen.agent.search.mutation import find_tunables

    return {t.name: t.value for t in find_tunables(source, target, BACKEND)}


def config_key(config: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in config.items())


def short_config(config: dict[str, Any] | None) -> str:
    """``num_warps@_kernel=8`` reads as ``num_warps=8`` in the table."""
    if not config:
        return "-"
    return ", ".join(f"{name.split('@')[0]}={value}" for name, value in config.items())


def import_file(path: Path, module_name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def write_variants(name: str, seed_source: str, points: list[dict[str, int]], target, folder: Path) -> list[Path]:
    from kgen.agent.search.mutation import apply_values

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, point in enumerate(points):
        path = folder / f"{name}_{index:03d}.py"
        path.write_text(apply_values(seed_source, point, target, BACKEND))
        paths.append(path)
    return paths


def as_list(value) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def compare(got: list, expected: list) -> str | None:
    """None when every output is close to the reference's (a loose check: the verifier is the
    strict one); else what differs."""
    import torch

    if len(got) != len(expected):
        return f"{len(got)} outputs, the reference has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if not isinstance(g, torch.Tensor) or g.shape != e.shape:
            return f"output {i}: {getattr(g, 'shape', type(g).__name__)} instead of {tuple(e.shape)}"
        loose = e.dtype in (torch.bfloat16, torch.float16)
        rtol, atol = (5e-2, 5e-2) if loose else (1e-3, 1e-5)
        g32, e32 = g.detach().float(), e.detach().float()
        if not torch.allclose(g32, e32, rtol=rtol, atol=atol):
            worst = (g32 - e32).abs().nan_to_num(float("inf")).max().item()
            return f"output {i}: max abs error {worst:.3g} (rtol {rtol}, atol {atol})"
    return None


# --------------------------------------------------------------------------------------
# The knowledge base the search starts from: the de-tuned seed alone
# --------------------------------------------------------------------------------------


def _evidence_cache(seeds_dir: Path) -> dict[str, Any]:
    path = seeds_dir / EVIDENCE_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def verify_seed(name: str, seed_path: Path, target: str, device: str):
    """The seed through kgen's verifier (on a GPU at the small size plan: the search re-measures it)."""
    import kgen

    result = kgen.evaluate(name, seed_path, device=device, targets=[target], small_sizes=device == "cuda")
    if not result.passed:
        raise RuntimeError(f"the de-tuned seed {seed_path.name} did not pass kgen's verifier: "
                           f"{result.verdict.value} ({result.rejection or result.inconclusive}): {result.reason}")
    return result


def seed_knowledge_base(name: str, seed_path: Path, kb_dir: Path, target: str, device: str,
                        seeds_dir: Path) -> str:
    """A fresh store holding only the seed as ``name``'s kernel; how its evidence was had."""
    from kgen.evals.problem.catalog import resolve_problem
    from kgen.evals.problem.format import input_dtype
    from kgen.knowledge_base.code_hash import normalised_code_hash
    from kgen.knowledge_base.schema import (
        KernelEntry,
        Provenance,
        VerificationSummary,
        kernel_id,
        target_family,
    )
    from kgen.knowledge_base.store import KnowledgeBase
    from kgen.knowledge_base.write_back import entry_from_result, record_kernel

    source = seed_path.read_text()
    info = resolve_problem(name)
    dtype = input_dtype(info)
    code_hash = normalised_code_hash(source)
    spec_text = f"{info.name.replace('_', ' ')}; {info.description}; de-tuned seed"
    provenance = Provenance(model="detuned-seed", run_id="search_vs_sweep")
    cached = _evidence_cache(seeds_dir).get(name)
    if cached and cached.get("code_hash") == code_hash:
        how = f"evidence from {EVIDENCE_FILE} ({cached.get('measured_by', 'recorded')})"
        entry = KernelEntry(
            id=kernel_id(code_hash, info.name, BACKEND, target, dtype), source=source,
            spec_text=spec_text, problem=info.name, operation=info.name.replace("_", " "),
            backend=BACKEND, target=target, target_family=target_family(target), dtype=dtype,
            evidence=VerificationSummary.model_validate(cached["evidence"]), provenance=provenance,
            code_hash=code_hash,
        )
    else:
        say(f"[{name}] verifying the seed on {device} for the knowledge base "
            f"({EVIDENCE_FILE} has {'other code' if cached else 'no entry'} for it)")
        result = verify_seed(name, seed_path, target, device)
        how = f"evidence from kgen.evaluate on {device} ({result.seconds:.0f} s)"
        entry = entry_from_result(result, source, spec_text=spec_text, target=target, dtype=dtype,
                                  provenance=provenance, operation=info.name.replace("_", " "))
    kb = KnowledgeBase.open(str(kb_dir))
    record_kernel(kb, entry, generation_best=True, starting_point=True)  # untimed on a CPU dry run
    if kb.kernel_count() != 1:
        raise RuntimeError(f"the search's knowledge base should hold the seed alone, it holds {kb.kernel_count()}")
    return how


def write_evidence(args: argparse.Namespace) -> int:
    from kgen.knowledge_base.code_hash import normalised_code_hash
    from kgen.knowledge_base.write_back import summarise_verification

    path = args.seeds_dir / EVIDENCE_FILE
    recorded = _evidence_cache(args.seeds_dir)
    for name in args.problems:
        seed_path = args.seeds_dir / f"{name}.py"
        say(f"[{name}] kgen.evaluate on {args.device}")
        result = verify_seed(name, seed_path, args.target, args.device)
        recorded[name] = {
            "code_hash": normalised_code_hash(seed_path.read_text()),
            "measured_by": f"kgen.evaluate(device={args.device!r}) in scripts/search_vs_sweep.py --write-evidence",
            "evidence": summarise_verification(result).model_dump(mode="json"),
        }
        say(f"[{name}] passed: {len(result.trials)} trials in {result.seconds:.0f} s")
    path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    say(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------------------
# Search: kgen's offline run from the seed
# --------------------------------------------------------------------------------------


def run_search(name: str, seed_path: Path, target, budget: int, generations: int | None,
               args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    import kgen
    from kgen.evals.problem.catalog import resolve_problem

    kb_dir, run_dir = folder / "kb", folder / "run"
    evidence = seed_knowledge_base(name, seed_path, kb_dir, target.name, args.device, args.seeds_dir)
    request = f"Triton {resolve_problem(name).name.replace('_', ' ')} for {target.name}"
    say(f"[{name}] search: kgen.generate({request!r}, budget={budget}, "
        f"generations={generations if generations else 'default'}, "
        f"device={args.device!r}{''.join(f', {k}={v!r}' for k, v in args.run_options.items())}); {evidence}")
    started = time.monotonic()
    summary = kgen.generate(
        request, models=[], targets=[target.name], kb=str(kb_dir), budget=budget,
        generations=generations, persist=False, out=run_dir, device=args.device, seed=args.seed,
        time_s=args.search_time, progress=lambda line: say(f"[{name}]   {line}"), **args.run_options,
    )
    seconds = time.monotonic() - started
    if summary.problem != resolve_problem(name).name:
        raise RuntimeError(f"the request {request!r} was read as {summary.problem}, not {name}")
    candidates_dir = run_dir / "candidates"
    on_disk = sorted(p.name for p in candidates_dir.iterdir() if p.is_dir()) if candidates_dir.is_dir() else []
    found: dict[str, Any] = {
        "request": request, "run_dir": str(run_dir), "seconds": round(seconds, 1),
        "budget": budget, "generations": generations, "run_options": args.run_options,
        "evaluations": summary.candidates, "candidate_dirs": len(on_disk), "passed": summary.passed,
        "rejected": summary.rejected, "stop_reason": summary.stop_reason, "seed_evidence": evidence,
        "winner": None,
    }
    best = summary.best.get(target.name)
    if best is not None:
        module = Path(best.module)
        if not module.is_absolute():
            module = run_dir / module
        # the candidate's own file: the best module is the same code under a header
        own = candidates_dir / best.candidate / f"{best.candidate}.py"
        source = (own if own.is_file() else module).read_text()
        found["winner"] = {
            "candidate": best.candidate, "module": str(module), "origin": best.origin,
            "description": best.description, "config": knob_values(source, target),
            "search_ms": best.time_ms, "source": source,
        }
    # every candidate's knob values, to see where the search went
    trail = []
    for candidate in on_disk:
        source_file = candidates_dir / candidate / f"{candidate}.py"
        eval_file = candidates_dir / candidate / "eval.json"
        row: dict[str, Any] = {"candidate": candidate}
        if source_file.is_file():
            row["config"] = knob_values(source_file.read_text(), target)
        if eval_file.is_file():
            data = json.loads(eval_file.read_text())
            row["verdict"] = data.get("verdict")
            measured = ((data.get("bench") or {}).get("measurements") or {}).get("candidate") or {}
            row["search_ms"] = measured.get("median_ms")
        trail.append(row)
    found["trail"] = trail
    return found


# --------------------------------------------------------------------------------------
# Sweep: every point, one process
# --------------------------------------------------------------------------------------

_WARM: dict[str, Any] = {}


def _problem_inputs(name: str, device: str, sizes: dict[str, int] | None, sets: int, seed: int):
    """(init inputs, input sets on ``device``, the loaded problem) at ``sizes`` (None: defaults)."""
    import torch

    from kgen.evals.problem.catalog import resolve_problem
    from kgen.evals.problem.format import load_problem

    loaded = load_problem(resolve_problem(name).path, sizes)
    torch.manual_seed(seed)
    input_sets = [[x.to(device) if isinstance(x, torch.Tensor) else x for x in loaded.get_inputs()]
                  for _ in range(sets)]
    return loaded.get_init_inputs(), input_sets, loaded


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def gpu_timer(fn, input_sets: list, budget_s: float, min_trials: int) -> dict[str, Any]:
    """kgen's own timer: L2 flushed before each trial, input sets rotated, median of the trials."""
    from kgen.evals.timing.measure import time_on_gpu

    timing = time_on_gpu(fn, input_sets, budget_s=budget_s, warmup=2, min_trials=min_trials,
                         max_trials=max(500, 10 * min_trials), check_sync=False)
    return {"ms": timing.median_ms, "trials": timing.trials, "device_name": timing.device_name}


def _warm_init(name: str, device: str, sizes: dict[str, int] | None) -> None:
    """A compile worker: the problem's inputs on the device, once."""
    _WARM["init"], input_sets, _ = _problem_inputs(name, device, sizes, 1, 0)
    _WARM["inputs"], _WARM["device"] = input_sets[0], device


def _warm_one(path: str) -> str | None:
    """Compile one variant (Triton caches the binary on disk) by calling it once; why not, if not."""
    import torch

    try:
        module = import_file(Path(path), f"kgen_warm_{Path(path).stem}")
        with torch.no_grad():
            module.ModelNew(*_WARM["init"]).to(_WARM["device"])(*_WARM["inputs"])
        _synchronize(_WARM["device"])
        return None
    except Exception as exc:  # noqa: BLE001 - the sweep itself records the failure
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def precompile(name: str, paths: list[Path], jobs: int, device: str, sizes: dict[str, int] | None) -> None:
    """Compile every variant in ``jobs`` fresh processes, so the timed sweep finds them built."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_warm_init,
                             initargs=(name, device, sizes)) as pool:
        list(pool.map(_warm_one, [str(p) for p in paths]))


def sweep_timed(name: str, points: list[dict[str, int]], paths: list[Path], args: argparse.Namespace, *,
                device: str = "cuda", sizes: dict[str, int] | None = None, timer=gpu_timer,
                check=None) -> list[dict]:
    """Every point in this one process: checked once against the problem's Model (``check``,
    default :func:`compare`), then timed."""
    check = check or compare
    import torch

    if args.compile_jobs > 0:
        started = time.monotonic()
        try:
            precompile(name, paths, args.compile_jobs, device, sizes)
            say(f"[{name}] sweep: {len(paths)} variants compiled in {time.monotonic() - started:.0f} s "
                f"({args.compile_jobs} processes)")
        except Exception as exc:  # noqa: BLE001 - only a head start: the sweep compiles what is missing
            say(f"[{name}] sweep: compiling ahead failed ({type(exc).__name__}: {exc}); compiling in turn")
    init, input_sets, loaded = _problem_inputs(name, device, sizes, 3, 0)
    with torch.no_grad():
        expected = as_list(loaded.model_class(*init).to(device)(*input_sets[0]))
    rows = []
    started = time.monotonic()
    for index, (point, path) in enumerate(zip(points, paths, strict=True)):
        row: dict[str, Any] = {"config": point, "ms": None, "error": None}
        try:
            module = import_file(path, f"kgen_sweep_{name}_{index:03d}")
            model = module.ModelNew(*init).to(device)
            with torch.no_grad():
                got = as_list(model(*input_sets[0]))
            _synchronize(device)
            row["error"] = check(got, expected)
            del got
            if row["error"] is None:
                with torch.no_grad():
                    row.update(timer(model, input_sets, args.sweep_budget, 10))
        except Exception as exc:  # noqa: BLE001 - a configuration that fails is a row, not the end
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        rows.append(row)
        shown = f"{row['ms']:.4f} ms" if row["ms"] is not None else f"FAILED ({row['error']})"
        say(f"[{name}] sweep {index + 1}/{len(points)}: {short_config(point)}: {shown}")
    say(f"[{name}] sweep timed in {time.monotonic() - started:.0f} s")
    return rows


def confirm(name: str, paths: dict[str, Path], args: argparse.Namespace, *, device: str = "cuda",
            sizes: dict[str, int] | None = None, timer=gpu_timer) -> dict[str, float]:
    """The deciding figures: each named configuration timed again with a longer budget, twice,
    in alternating order (fresh inputs), so drift of the GPU's clocks falls on all alike; the
    lower of its two medians counts."""
    import torch

    init, input_sets, _ = _problem_inputs(name, device, sizes, 3, 1)
    models = {key: import_file(path, f"kgen_confirm_{name}_{i}").ModelNew(*init).to(device)
              for i, (key, path) in enumerate(paths.items())}
    best: dict[str, float] = {}
    order = list(models)
    for round_ in range(2):
        for key in (order if round_ == 0 else order[::-1]):
            with torch.no_grad():
                ms = timer(models[key], input_sets, args.confirm_budget, 20)["ms"]
            best[key] = min(best.get(key, math.inf), ms)
    return best


def sweep_dry(name: str, points: list[dict[str, int]], paths: list[Path], seed_config: dict,
              args: argparse.Namespace) -> list[dict]:
    """No GPU: import and instantiate every variant; check a few in the interpreter at small sizes."""
    import torch

    from kgen.evals.problem.catalog import resolve_problem
    from kgen.evals.problem.format import load_problem

    info = resolve_problem(name)
    loaded = load_problem(info.path, info.cpu_sizes())
    init = loaded.get_init_inputs()
    rng = random.Random(args.seed)
    checked = set(rng.sample(range(len(points)), min(args.dry_run_checks, len(points))))
    if seed_config in points and args.dry_run_checks > 0:
        checked = {points.index(seed_config)} | set(sorted(checked)[: args.dry_run_checks - 1])
    torch.manual_seed(0)
    inputs = loaded.get_inputs()
    expected = as_list(loaded.model_class(*init)(*inputs))
    rows = []
    for index, (point, path) in enumerate(zip(points, paths, strict=True)):
        row: dict[str, Any] = {"config": point, "ms": None, "error": None, "checked": index in checked}
        try:
            module = import_file(path, f"kgen_dry_{name}_{index:03d}")
            model = module.ModelNew(*init)
            if index in checked:
                row["error"] = compare(as_list(model(*inputs)), expected)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        rows.append(row)
    bad = [r for r in rows if r["error"]]
    say(f"[{name}] dry sweep: {len(rows)} variants built and imported, {len(checked)} checked in the "
        f"interpreter at {info.cpu_sizes()}: {len(bad)} failed")
    return rows


# --------------------------------------------------------------------------------------
# One problem
# --------------------------------------------------------------------------------------


def run_problem(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from kgen.agent.search.mutation import apply_values, parameter_space, source_key
    from kgen.backends.targets import resolve_target
    from kgen.evals.problem.catalog import resolve_problem

    target = resolve_target(args.target)  # main() resolved "auto"
    info = resolve_problem(name)
    seed_path = args.seeds_dir / f"{name}.py"
    seed_source = seed_path.read_text()
    folder = args.out / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    points = parameter_space(seed_source, target, BACKEND)
    if not points:
        raise RuntimeError(f"{seed_path} has no knobs kgen's mutation can move")
    seed_config = knob_values(seed_source, target)
    budget = args.budget or (3 if args.dry_run else math.floor(args.share * len(points)))
    generations = args.generations  # None: kgen's configured default
    say(f"[{name}] space: {len(points)} configurations of {', '.join(seed_config)}; seed at "
        f"{short_config(seed_config)}; search budget {budget} ({budget / len(points):.0%} of the space)")
    result: dict[str, Any] = {
        "problem": info.name, "target": target.name, "device": args.device, "dry_run": args.dry_run,
        "seed": str(seed_path), "seed_config": seed_config, "space_size": len(points),
        "knobs": list(seed_config), "share_allowed": args.share, "tolerance": args.tolerance,
    }

    result["search"] = run_search(name, seed_path, target, budget, generations, args, folder)
    winner = result["search"]["winner"]

    with tempfile.TemporaryDirectory(prefix=f"svs_{name}_") as tmp:
        extra = []
        if winner is not None and winner["config"] not in points:
            extra = [winner["config"]]  # the search left the swept space: time its winner too
            say(f"[{name}] the winner {short_config(winner['config'])} is outside the swept space; timed too")
        sweep_points = points + extra
        try:
            paths = write_variants(name, seed_source, sweep_points, target, Path(tmp))
        except (KeyError, ValueError) as exc:  # the winner's knobs are not the seed's
            paths = write_variants(name, seed_source, points, target, Path(tmp))
            sweep_points, extra = points, []
            result["note"] = f"the winner's knobs do not apply to the seed ({exc})"
        if args.dry_run:
            rows = sweep_dry(name, sweep_points, paths, seed_config, args)
        else:
            rows = sweep_timed(name, sweep_points, paths, args)
        for row, point in zip(rows, sweep_points, strict=True):
            row["in_space"] = point in points
        result["sweep"] = rows
        if winner is not None:
            winner["same_source_as_applied"] = source_key(winner.pop("source")) == source_key(
                apply_values(seed_source, winner["config"], target, BACKEND)) if winner["config"] in sweep_points else False
        if not args.dry_run:
            timed = sorted((r for r in rows if r["in_space"] and r["ms"] is not None), key=lambda r: r["ms"])
            keys = {config_key(r["config"]): sweep_points.index(r["config"]) for r in timed[:CONFIRM_TOP]}
            if winner is not None and winner["config"] in sweep_points:
                keys[config_key(winner["config"])] = sweep_points.index(winner["config"])
            if keys:
                say(f"[{name}] confirming {len(keys)} configurations ({args.confirm_budget:.1f} s each, twice)")
                confirmed = confirm(name, {k: paths[i] for k, i in keys.items()}, args)
                for key, ms in confirmed.items():
                    rows[keys[key]]["confirm_ms"] = ms
    judge(result)
    (folder / RESULT_FILE).write_text(json.dumps(result, indent=1))
    say(f"[{name}] {result['verdict']}: {result['verdict_reason']}")
    return result


def _row_for(result: dict[str, Any], config: dict | None) -> dict | None:
    return next((r for r in result["sweep"] if r["config"] == config), None) if config is not None else None


def judge(result: dict[str, Any]) -> None:
    """Fill in the figures and the verdict: pass only when both criteria hold."""
    search, rows = result["search"], result["sweep"]
    size = result["space_size"]
    result["evaluations"] = search["evaluations"]
    result["evaluation_share"] = search["evaluations"] / size
    seed_row = _row_for(result, result["seed_config"])
    result["seed_ms"] = seed_row["ms"] if seed_row else None
    result["sweep_failures"] = sum(1 for r in rows if r["error"])

    # the re-timed figures decide when there are some (the sweep's best few and the winner, all
    # timed the same way, side by side); else the sweep's own
    confirmed = any("confirm_ms" in r for r in rows)
    figure = "confirm_ms" if confirmed else "ms"

    def decisive(row: dict) -> float | None:
        return row.get(figure)

    timed = [r for r in rows if r["in_space"] and decisive(r) is not None]
    best = min(timed, key=decisive) if timed else None
    result["sweep_best"] = {"config": best["config"], "ms": decisive(best), "sweep_ms": best["ms"]} if best else None
    winner = search["winner"]
    winner_row = _row_for(result, winner["config"]) if winner else None
    result["winner_config"] = winner["config"] if winner else None
    result["winner_in_space"] = bool(winner_row and winner_row["in_space"])
    result["winner_ms"] = decisive(winner_row) if winner_row else None
    result["decided_by"] = "re-timed" if confirmed else "sweep"
    result["ratio"] = (result["winner_ms"] / result["sweep_best"]["ms"]
                       if result["winner_ms"] is not None and best else None)
    result["within_tolerance"] = (result["ratio"] <= 1 + result["tolerance"]) if result["ratio"] is not None else None
    result["within_share"] = result["evaluation_share"] <= result["share_allowed"] + 1e-12
    if result["dry_run"]:
        failed = [r for r in rows if r["error"]]
        result["verdict"] = "dry run" if winner and not failed else "FAIL"
        result["verdict_reason"] = (
            f"{size} variants built, {sum(1 for r in rows if r.get('checked'))} checked; search ran "
            f"{search['evaluations']} candidate(s), winner {short_config(result['winner_config'])}"
            if result["verdict"] == "dry run" else
            ("no verified winner" if not winner else f"{len(failed)} variant(s) failed: {failed[0]['error']}"))
        return
    reasons = []
    if winner is None:
        reasons.append("the search produced no verified kernel")
    elif result["ratio"] is None:
        reasons.append("the winner's configuration could not be timed in the sweep")
    elif not result["within_tolerance"]:
        reasons.append(f"winner {result['ratio']:.3f}x the sweep's best (allowed {1 + result['tolerance']:.2f}x)")
    if not result["within_share"]:
        reasons.append(f"{search['evaluations']} evaluations = {result['evaluation_share']:.0%} of the "
                       f"space (allowed {result['share_allowed']:.0%})")
    if best is None:
        reasons.append("no configuration of the sweep could be timed")
    result["verdict"] = "FAIL" if reasons else "PASS"
    result["verdict_reason"] = "; ".join(reasons) if reasons else (
        f"winner {result['ratio']:.3f}x the sweep's best with {search['evaluations']} of {size} evaluations "
        f"({result['evaluation_share']:.0%})")


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"


def _ratio(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def write_report(out: Path) -> int:
    results = []
    for path in sorted(out.glob(f"*/{RESULT_FILE}")):
        results.append(json.loads(path.read_text()))
    order = {name: i for i, name in enumerate(DEFAULT_PROBLEMS)}
    results.sort(key=lambda r: (order.get(r["problem"], len(order)), r["problem"]))
    devices = sorted({r.get("device_name") for res in results for r in res["sweep"] if r.get("device_name")})
    lines = [
        "# kgen's offline search vs an exhaustive sweep",
        "",
        f"Seeds: `scripts/detuned_seeds/` (de-tuned on purpose). Device: {', '.join(devices) or 'not timed'}. "
        "Times: median ms at the problem's default sizes (`kgen.evals.timing.measure.time_on_gpu`, L2 flushed, "
        f"3 input sets); the sweep's best {CONFIRM_TOP} and the winner re-timed alternately, the lower "
        "median counting. Pass: winner <= (1 + tolerance) x sweep best, and evaluations <= share x space.",
        "",
        "| problem | space | knobs | seed ms | sweep best | best ms | search winner | winner ms | ratio "
        "| evaluations | share | <= 5% | <= 25% | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        best = r.get("sweep_best") or {}
        within = {True: "yes", False: "**no**", None: "-"}
        winner = short_config(r.get("winner_config"))
        if r.get("winner_config") is not None and not r.get("winner_in_space"):
            winner += " (outside the space)"
        lines.append(
            f"| {r['problem']} | {r['space_size']} | {', '.join(k.split('@')[0] for k in r['knobs'])} "
            f"| {_ms(r.get('seed_ms'))} | {short_config(best.get('config'))} | {_ms(best.get('ms'))} "
            f"| {winner} | {_ms(r.get('winner_ms'))} "
            f"| {_ratio(r.get('ratio'))} "
            f"| {r['evaluations']} of {r['space_size']} | {r['evaluation_share']:.0%} "
            f"| {within[r.get('within_tolerance')]} | {within[r.get('within_share')]} | {r['verdict']} |"
        )
    for r in results:
        lines += ["", f"- **{r['problem']}**: {r['verdict_reason']}. Search: {r['search']['stop_reason']} "
                  f"({r['search']['seconds']:.0f} s, {r['search']['passed']} passed, run `{r['search']['run_dir']}`); "
                  f"{r['sweep_failures']} swept configuration(s) failed the check."]
    failed = [r["problem"] for r in results if r["verdict"] == "FAIL"]
    lines += ["", f"**{len(results) - len(failed)} of {len(results)} problem(s) without failure**"
              + (f"; failed: {', '.join(failed)}" if failed else "") + "."]
    combined = [{k: v for k, v in r.items() if k != "sweep"} | {"sweep": r["sweep"]} for r in results]
    (out / f"{REPORT_NAME}.json").write_text(json.dumps(combined, indent=1))
    (out / f"{REPORT_NAME}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not results:
        say(f"no results under {out}")
        return 1
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    args.out = args.out.expanduser().resolve()
    args.seeds_dir = args.seeds_dir.expanduser().resolve()
    if args.merge:
        for path in args.merge:
            result = json.loads(path.read_text())
            (args.out / result["problem"]).mkdir(parents=True, exist_ok=True)
            (args.out / result["problem"] / RESULT_FILE).write_text(json.dumps(result, indent=1))
    if args.report_only or args.merge:
        return write_report(args.out)
    for name in args.problems:
        if not (args.seeds_dir / f"{name}.py").is_file():
            print(f"search_vs_sweep.py: no seed {args.seeds_dir / f'{name}.py'} for problem {name}", file=sys.stderr)
            return 2
    if args.target == "auto":
        from kgen.agent.run_options import local_target
        from kgen.backends.targets import DEFAULT_TARGET

        args.target = (local_target() if args.device == "cuda" else None) or DEFAULT_TARGET
    if args.write_evidence:
        return write_evidence(args)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("search_vs_sweep.py: no CUDA GPU here; use --dry-run to exercise the script on the CPU",
                  file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    crashed = []
    for name in args.problems:
        started = time.monotonic()
        try:
            run_problem(name, args)
        except Exception as exc:  # noqa: BLE001 - one problem's failure must not lose the others
            import traceback

            traceback.print_exc()
            crashed.append(name)
            say(f"[{name}] could not be run: {type(exc).__name__}: {exc}")
        say(f"[{name}] done in {time.monotonic() - started:.0f} s")
    code = write_report(args.out)
    return 1 if crashed else code


if __name__ == "__main__":
    sys.exit(main())
