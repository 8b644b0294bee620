"""Kernels delivered into a real model: exported as torch ops, kept only where they win in the
compiled model, profiled, trained against stock.

Usage (GPU machine, kgen and transformers installed)::

    python scripts/deliver_check.py --out deliver-100m --size 100m --steps 300
    python scripts/deliver_check.py --out deliver-1b --size 1b --steps 30 --verified deliver-100m/verified

    # the same on a CPU, small and in Triton's interpreter (what CI's machine can run)
    TRITON_INTERPRET=1 python scripts/deliver_check.py --out /tmp/deliver --size tiny --steps 4 \\
        --device cpu --compile-backend aot_eager

Phases, each written to ``OUT`` as soon as it ends (a crash loses only the phase it hit):

1. **verify**: the seed kernels a swap needs that wait for their GPU run
   (``knowledge_base/seed_kernels_unverified``: the fused seams) verified by kgen's verifier at
   their full sizes on this device, each verdict kept as ``OUT/verified/<problem>/eval.json``
   beside a copy of the kernel (``--verified DIR`` reuses an earlier call's).
2. **export**: `kgen export` of every kernel a swap group needs (the shipped seeds, or a run's
   winners with ``--run``, and the verified waiting seeds) into one package, each op registered
   so the compiler can see it where it traces (``OUT/package``).
3. **decide**: which groups stay (`kgen/train_check/in_model.py`): each group alone timed in the
   compiled training step against stock, at the model's shapes with two blocks.
4. **compile**: the whole model compiled (``fullgraph``: a graph break raises): the training step of
   stock eager, stock compiled, the ops compiled with the kept groups ("ops compiled") and with
   every group ("every op compiled", unless ``--no-every``); the peak memory of each; the prefill
   (forward, no grad) of stock compiled and the ops where a kept group changes the forward; loss
   and gradients of the kept set compiled against eager and stock; a torch.profiler table of
   stock and the ops, by kind of kernel (``OUT/profile.md``).
5. **train**: `kgen train-check` at ``--size`` for ``--steps`` steps against one pair of stock
   runs: the exported package (must agree; with the fused seams where it holds them), a planted
   embedding backward that accumulates in bf16 (must disagree) and an unusual but correct one
   (must agree); ``OUT/loss_curves.svg``.

``OUT/deliver.json`` holds every figure and ``OUT/deliver.md`` the section for
docs/benchmarks.md. Exit 0 when every expectation held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "candidates"
#: (label, problem, fixture, expected verdict): the kernel sets checked beside the exported package
FIXTURE_SETS = [
    ("planted: embedding backward accumulating in bf16", "embedding_backward",
     "redteam_embedding_bwd_bf16_accumulation.py", "disagree"),
    ("correct: embedding backward over sorted ids in fp64", "embedding_backward",
     "train_check_embedding_bwd_sorted_torch_ok.py", "agree"),
]
PACKAGE = "deliver_ops"
PHASES = ("verify", "export", "decide", "compile", "train")


def _save(out: Path, report: dict[str, Any]) -> None:
    (out / "deliver.json").write_text(json.dumps(report, indent=1, default=str))


def _group_problems() -> list[str]:
    """Every problem some swap group needs, in group order."""
    from kgen.train_check.package_swaps import GROUPS

    return list(dict.fromkeys(p for g in GROUPS for p in g.problems))


def _waiting_seeds() -> dict[str, Path]:
    """The group problems whose seed waits for its GPU run (no shipped seed)."""
    from kgen.knowledge_base import SEED_KERNELS_DIR, UNVERIFIED_SEEDS_DIR

    waiting = {}
    for problem in _group_problems():
        if not (SEED_KERNELS_DIR / "triton" / f"{problem}.py").is_file():
            path = UNVERIFIED_SEEDS_DIR / "triton" / f"{problem}.py"
            if path.is_file():
                waiting[problem] = path
    return waiting


def verify_waiting(out: Path, device: str, timeout_s: float) -> dict[str, Any]:
    """Phase 1: each waiting seed verified at full size here; its folder keeps the kernel and eval.json."""
    from kgen.evals.harness import EvalOptions, evaluate

    rows = {}
    for problem, path in _waiting_seeds().items():
        folder = out / "verified" / problem
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / f"{problem}.py")
        started = time.perf_counter()
        result = evaluate(problem, folder / f"{problem}.py", EvalOptions(device=device, timeout_s=timeout_s))
        (folder / "eval.json").write_text(result.model_dump_json(indent=2))
        # the name scripts/seed_evidence.py --runs reads, so a verdict here can ship the seed
        (out / "verified" / f"eval_{problem}.json").write_text(result.model_dump_json(indent=2))
        rows[problem] = {"verdict": result.outcome, "reason": result.reason[:300],
                         "seconds": time.perf_counter() - started}
        print(f"[deliver] verified {problem}: {result.outcome} in {rows[problem]['seconds']:.0f} s", flush=True)
    return {"seeds": rows}


def export_package(out: Path, run: str | None, verified: Path) -> dict[str, Any]:
    """Phase 2: the package, and what went into it (a problem with no verified kernel is left out)."""
    from kgen.export.package import write_package
    from kgen.export.sources import find_exportables
    from kgen.knowledge_base import SEED_KERNELS_DIR

    seeds = SEED_KERNELS_DIR / "triton"
    problems = _group_problems()
    kernels = [k for k in find_exportables(run) if k.problem in problems] if run is not None else []
    left_out = {}
    for problem in problems:
        if any(k.problem == problem for k in kernels):
            continue
        path = seeds / f"{problem}.py"
        if not path.is_file():
            path = verified / problem / f"{problem}.py"
        if not path.is_file():
            left_out[problem] = "no shipped seed and no verified waiting seed"
            continue
        found = find_exportables(str(path), problem=problem)
        kernels += [k for k in found if k.exportable]
        left_out.update({k.problem: k.reason for k in found if not k.exportable})
    manifest = write_package(kernels, out / "package", PACKAGE)
    return {"package": str(out / "package"), "left_out": left_out, "kernels": [
        {"name": e.name, "verdict": e.verdict, "backward": e.backward, "evidence": e.evidence, "speed": e.speed,
         "registration": e.registration, "registration_note": e.registration_note} for e in manifest.kernels]}


def _package(out: Path) -> Any:
    import importlib

    folder = out / "package"
    if not (folder / PACKAGE / "manifest.json").is_file():
        raise FileNotFoundError(f"{folder}: no exported package (run the export phase first)")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(PACKAGE)


def decide_groups(out: Path, size_name: str, device: str, backend: str, steps: int) -> dict[str, Any]:
    """Phase 3: each group alone in the compiled step against stock; which stay."""
    from kgen.train_check.check import model_size
    from kgen.train_check.in_model import decide

    _, size = model_size(size_name)
    decision = decide(_package(out), size, device, backend=backend, steps=steps,
                      progress=lambda line: print(f"[deliver] decide: {line}", flush=True))
    (out / "decide.md").write_text(decision.markdown())
    print(decision.text(), flush=True)
    return decision.model_dump() | {"kept": decision.kept}


def _rel(a: Any, b: Any) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _peak_bytes(device: str) -> int | None:
    import torch

    return int(torch.cuda.max_memory_allocated()) if device == "cuda" else None


def _reset_peak(device: str) -> None:
    """Free what the previous variant left (its compiled graphs hold its model) before measuring anew."""
    import gc

    import torch
    import torch._dynamo

    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _timed_variant(label: str, module: Any, size: Any, groups: list[str] | None, device: str, backend: str | None,
                   batches: list[Any], profiled: int, kernel_names: set[str]) -> dict[str, Any]:
    """One whole-model variant: compiled (or eager where ``backend`` is None), its median step, peak
    memory, graph breaks and (compiled) a profile of a few steps."""
    import torch
    import torch._dynamo

    from kgen.train_check.in_model import compiled_step, step_seconds, training_step
    from kgen.train_check.model import build_model
    from kgen.train_check.package_swaps import wire_stock
    from kgen.train_check.step_profile import profile_steps

    _reset_peak(device)
    torch._dynamo.utils.counters.clear()
    started = time.perf_counter()
    if backend is None:
        model = build_model(size, 0, device)
        step = training_step(wire_stock(model), model)
    else:
        step, model = compiled_step(module if groups else None, size, groups or [], device, backend)
    seconds = step_seconds(step, batches, device)
    row: dict[str, Any] = {"step_seconds": seconds, "peak_bytes": _peak_bytes(device),
                           "graph_breaks": sum(torch._dynamo.utils.counters["graph_break"].values()),
                           "wall_seconds": time.perf_counter() - started}
    if backend is not None and profiled:
        row["profile"] = profile_steps(label, step, batches[:profiled], device, kernel_names).model_dump()
    del step, model
    return row


def _prefill(module: Any, size: Any, groups: list[str], device: str, backend: str, batches: list[Any]) -> float:
    """Median seconds of the compiled forward (logits, no grad) with the forward ``groups`` swapped in."""
    import torch

    from kgen.train_check.in_model import step_seconds
    from kgen.train_check.model import build_model
    from kgen.train_check.package_swaps import wire

    model = build_model(size, 0, device)
    if groups:
        wire(model, module, groups)
    torch._dynamo.reset()
    forward = torch.compile(lambda ids: model(input_ids=ids).logits, fullgraph=True, backend=backend)

    def step(ids: Any) -> None:
        with torch.no_grad():
            forward(ids)
    return step_seconds(step, batches, device)


def compile_check(out: Path, size_name: str, device: str, backend: str, timing_steps: int,
                  kept: list[str] | None, profile_steps: int, with_every: bool = True) -> dict[str, Any]:
    """Phase 4: the whole model: no graph break, compiled equals eager, step times, memory, prefill, profile."""
    import torch
    import torch._dynamo

    from kgen.train_check.check import model_size
    from kgen.train_check.in_model import all_groups
    from kgen.train_check.loop import next_token_loss
    from kgen.train_check.model import build_model
    from kgen.train_check.package_swaps import group, kernel_names, wire
    from kgen.train_check.step_profile import StepProfile, profile_table
    from kgen.train_check.swaps import stock_loss
    from kgen.train_check.tokens import token_batches

    module = _package(out)
    _, size = model_size(size_name)
    every = all_groups(module)
    if kept is None:
        decided = json.loads((out / "deliver.json").read_text()).get("decide", {}) if (out / "deliver.json").is_file() else {}
        kept = decided.get("kept", every)
    names = kernel_names(module)
    batches = token_batches(size.vocab, size.batch, size.seq, timing_steps + 3, seed=1, device=device)

    # the kept set's numbers first: compiled against eager, against stock, and its graph breaks
    checked = kept or every
    model = build_model(size, 0, device)
    loss_fn = wire(model, module, checked)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(loss_fn, fullgraph=True, backend=backend)
    params = list(model.parameters())
    compiled_loss = compiled(batches[0])
    compiled_grads = torch.autograd.grad(compiled_loss, params, allow_unused=True)
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    eager_loss = loss_fn(batches[0])
    eager_grads = torch.autograd.grad(eager_loss, params, allow_unused=True)
    stock = build_model(size, 0, device)
    stock_value = next_token_loss(stock, batches[0], stock_loss)
    stock_grads = torch.autograd.grad(stock_value, list(stock.parameters()), allow_unused=True)
    pairs = [(g, e, s) for g, e, s in zip(compiled_grads, eager_grads, stock_grads, strict=True) if g is not None]
    numbers = {"groups": checked, "graph_breaks": breaks, "parameters": sum(p.numel() for p in params),
               "loss": {"compiled": float(compiled_loss.detach()), "eager": float(eager_loss.detach()),
                        "stock": float(stock_value.detach())},
               "loss_compiled_vs_eager": abs(float(compiled_loss.detach()) - float(eager_loss.detach())),
               "grad_rel_l2_compiled_vs_eager_max": max(_rel(g, e) for g, e, _ in pairs),
               "grad_rel_l2_ops_vs_stock_max": max(_rel(e, s) for _, e, s in pairs)}
    del model, loss_fn, compiled, stock, compiled_grads, eager_grads, stock_grads, pairs

    variants: dict[str, dict[str, Any]] = {}
    plan = [("stock eager", None, None), ("stock compiled", None, backend), ("ops compiled", kept, backend)]
    if with_every:
        plan.append(("every op compiled", every, backend))
    for label, groups, how in plan:
        if label == "ops compiled" and not kept:
            variants[label] = {k: v for k, v in variants["stock compiled"].items() if k != "profile"}
            variants[label]["note"] = "no group kept: the stock code serves"
            continue
        print(f"[deliver] compile: timing {label} ...", flush=True)
        variants[label] = _timed_variant(label, module, size, groups, device, how, batches,
                                         profile_steps if how is not None else 0, names)
        numbers["graph_breaks"] += variants[label]["graph_breaks"]
        print(f"[deliver] compile: {label} {variants[label]['step_seconds'] * 1000:.2f} ms a step", flush=True)
    forward_kept = [g for g in kept if group(g).in_forward]
    prefill: dict[str, float] = {}
    if forward_kept:
        prefill = {"stock compiled": _prefill(module, size, [], device, backend, batches),
                   "ops compiled": _prefill(module, size, forward_kept, device, backend, batches)}
    profiles = [StepProfile.model_validate(v["profile"]) for k, v in variants.items() if "profile" in v]
    (out / "profile.md").write_text(profile_table(profiles))
    stock_step = variants["stock compiled"]["step_seconds"]
    return numbers | {
        "backend": backend, "fullgraph": True, "kept": kept, "every": every,
        "step_seconds": {k: v["step_seconds"] for k, v in variants.items()},
        "peak_bytes": {k: v["peak_bytes"] for k, v in variants.items()},
        "ratio_to_stock_compiled": {k: v["step_seconds"] / stock_step for k, v in variants.items()},
        "prefill_seconds": prefill,
        "prefill_ratio": prefill["ops compiled"] / prefill["stock compiled"] if prefill else 1.0,
        "prefill_note": "" if forward_kept else ("no kept group changes the forward: the prefill is the stock "
                                                 "code (not timed: the same compiled graph)"),
        "profiles": [p.model_dump() for p in profiles],
        "notes": {k: v["note"] for k, v in variants.items() if "note" in v},
    }


def train_checks(out: Path, size_name: str, steps: int, device: str, seed: int) -> dict[str, Any]:
    """Phase 5: the package and the fixture sets against one pair of stock runs, and the picture."""
    from kgen.train_check.check import model_size, run_check, stock_runs
    from kgen.train_check.kernels import FUSED_PROBLEMS
    from kgen.train_check.plot import loss_curves_svg

    _, size = model_size(size_name)
    manifest = json.loads((out / "package" / PACKAGE / "manifest.json").read_text())
    fused = set(FUSED_PROBLEMS) <= {entry["name"] for entry in manifest["kernels"]}
    started = time.perf_counter()
    stock = stock_runs(size, steps, seed, device)
    stock_seconds = time.perf_counter() - started
    results = {}
    # the package serves the fused seams too where it holds them (the loss then is the fused LM head's)
    sets: list[tuple[str, dict[str, Any], str]] = [("exported package", {"export": out / "package", "fused": fused},
                                                    "agree")]
    for label, problem, fixture, expect in FIXTURE_SETS:
        folder = out / "kernels" / fixture.removesuffix(".py")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture, folder / f"{problem}.py")
        sets.append((label, {"kernels": folder}, expect))
    for label, where, expect in sets:
        started = time.perf_counter()
        result = run_check(steps=steps, size=size, device=device, seed=seed, stock=stock, **where)
        results[label] = {"expect": expect, "verdict": result.verdict, "reason": result.reason,
                          "seconds": time.perf_counter() - started, "result": result.model_dump(mode="json")}
        print(f"[deliver] train: {label}: {result.verdict}", flush=True)
    (out / "loss_curves.svg").write_text(loss_curves_svg(
        f"kgen train-check, Llama {size_name}, {steps} steps, {device}", stock.reference.losses,
        {"stock, jittered": stock.jittered.losses} | {k: v["result"]["kernel"] for k, v in results.items()},
        stock.band.allowed if stock.band else None))
    return {"stock_seconds": stock_seconds, "stock_problem": stock.problem, "fused": fused, "checks": results}


def _gib(value: int | None) -> str:
    return "n/a (CPU)" if value is None else f"{value / 2**30:.2f}"


def _markdown(report: dict[str, Any]) -> str:
    lines = [f"### Delivered kernels in a Llama ({report['size']}, {report['steps']} train-check steps)", "",
             f"`{report['command']}` on {report['device_name']}, {report['date']} (torch {report['torch']}).", ""]
    verified = report.get("verify", {}).get("seeds", {})
    if verified:
        lines += ["Waiting seeds verified here at full size: " + ", ".join(
            f"{p} {v['verdict']} ({v['seconds']:.0f} s)" for p, v in verified.items()), ""]
    exported = report.get("export", {})
    if "kernels" in exported:
        lines.append("Exported: " + ", ".join(
            f"{k['name']} ({k['registration']}{', autograd: ' + k['backward'] if k['backward'] else ''})"
            for k in exported["kernels"]))
        lines += [f"- not exported: {p}: {why}" for p, why in exported.get("left_out", {}).items()]
        lines.append("")
    decided = report.get("decide", {})
    if "rows" in decided:
        lines += ["Per group, each alone in the compiled training step against stock "
                  f"({decided['layers_timed']} blocks, median of {decided['steps']} steps, stock "
                  f"{decided['stock_seconds'] * 1000:.2f} ms, noise {decided['noise']:.1%}):", "",
                  "| group | step ms | change | serves | why |", "|---|---|---|---|---|"]
        lines += [f"| {r['group']} | {r['seconds'] * 1000:.2f} | {r['change']:+.1%} | {r['serves']} | {r['why']} |"
                  for r in decided["rows"]]
        lines.append("")
    compiled = report.get("compile", {})
    if "step_seconds" in compiled:
        lines += [f"Whole model, torch.compile (backend {compiled['backend']}, fullgraph): {compiled['graph_breaks']} "
                  f"graph breaks; {compiled['parameters'] / 1e6:.1f}M parameters; kept groups: "
                  f"{', '.join(compiled['kept']) or 'none'}; every group: {', '.join(compiled['every'])}. Kept set "
                  f"compiled vs eager: loss {compiled['loss_compiled_vs_eager']:.2e}, gradients rel-L2 <= "
                  f"{compiled['grad_rel_l2_compiled_vs_eager_max']:.2e} (vs stock: "
                  f"{compiled['grad_rel_l2_ops_vs_stock_max']:.2e}).", "",
                  "| training step | median seconds | x stock compiled | peak memory GiB |", "|---|---|---|---|"]
        for label, seconds in compiled["step_seconds"].items():
            note = compiled.get("notes", {}).get(label, "")
            lines.append(f"| {label} | {seconds:.4f} | {compiled['ratio_to_stock_compiled'][label]:.2f} | "
                         f"{_gib(compiled['peak_bytes'][label])} |" + (f" {note}" if note else ""))
        prefill = compiled["prefill_seconds"]
        if prefill:
            lines += ["", "| prefill (forward, no grad) | median seconds |", "|---|---|",
                      *[f"| {k} | {v:.4f} |" for k, v in prefill.items()],
                      f"| ops / stock | {compiled['prefill_ratio']:.2f} |"]
        lines += ["", *([f"Prefill: {compiled['prefill_note']}.", ""] if compiled.get("prefill_note") else []),
                  "Where the step goes: `profile.md` (torch.profiler, by kind of kernel).", ""]
    train = report.get("train", {})
    if "checks" in train:
        lines += ["| kernels | expected | verdict | seconds | why |", "|---|---|---|---|---|"]
        for label, check in train["checks"].items():
            reason = check["reason"].replace("|", "/")[:220]
            lines.append(f"| {label} | {check['expect']} | {check['verdict']} | {check['seconds']:.0f} | {reason} |")
        lines += ["", "Loss curves: `loss_curves.svg`.", ""]
    for phase, error in report.get("errors", {}).items():
        lines.append(f"- {phase} failed: {error.strip().splitlines()[-1] if error.strip() else ''}")
    return "\n".join(lines) + "\n"


def _held(report: dict[str, Any]) -> bool:
    """Every expectation: no phase failed, every waiting seed passed, no graph break, the train-check
    verdicts as expected."""
    checks = report.get("train", {}).get("checks", {})
    seeds = report.get("verify", {}).get("seeds", {})
    return (not report["errors"] and all(c["verdict"] == c["expect"] for c in checks.values())
            and all(s["verdict"] == "passed" for s in seeds.values())
            and report.get("compile", {}).get("graph_breaks", 0) == 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the package, JSON, markdown, pictures")
    parser.add_argument("--size", default="100m", help="tiny, small, 100m or 1b")
    parser.add_argument("--steps", type=int, default=300, help="train-check steps")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", help="export this run's winners instead of the seed kernels")
    parser.add_argument("--verified", type=Path, help="a folder an earlier verify phase wrote (OUT/verified)")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend (aot_eager on a CPU)")
    parser.add_argument("--timing-steps", type=int, default=10, help="steps timed per model in the compile phase")
    parser.add_argument("--decide-steps", type=int, default=12, help="steps timed per variant in the decide phase")
    parser.add_argument("--profile-steps", type=int, default=3, help="steps profiled per compiled variant")
    parser.add_argument("--groups", nargs="*", help="the groups the compile phase keeps (default: the decide "
                        "phase's; none given: stock code only)")
    parser.add_argument("--verify-timeout", type=float, default=400, help="seconds one seed's verification may take")
    parser.add_argument("--no-every", action="store_true", help="do not time the model with every group swapped in "
                        "(the compile phase's diagnostic row; a whole-model compile the fewer)")
    parser.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    args = parser.parse_args(argv)
    from kgen.train_check.kernels import prepare_process

    prepare_process(args.device)  # first: on a CPU, the interpreter computing as kgen's verifier computes
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    previous = json.loads((args.out / "deliver.json").read_text()) if (args.out / "deliver.json").is_file() else {}
    report: dict[str, Any] = previous | {
        "command": "python scripts/deliver_check.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), "size": args.size, "steps": args.steps,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "CPU",
        "torch": torch.__version__, "errors": {},
    }
    verified = args.verified or args.out / "verified"
    phases = {
        "verify": lambda: verify_waiting(args.out, args.device, args.verify_timeout),
        "export": lambda: export_package(args.out, args.run, verified),
        "decide": lambda: decide_groups(args.out, args.size, args.device, args.compile_backend, args.decide_steps),
        "compile": lambda: compile_check(args.out, args.size, args.device, args.compile_backend, args.timing_steps,
                                         args.groups, args.profile_steps, with_every=not args.no_every),
        "train": lambda: train_checks(args.out, args.size, args.steps, args.device, args.seed),
    }
    for name in args.phases:
        started = time.perf_counter()
        print(f"[deliver] {name} ...", flush=True)
        try:
            report[name] = phases[name]()
        except Exception:  # noqa: BLE001 - a phase's failure is recorded and the next phase still runs
            report["errors"][name] = traceback.format_exc()
            print(report["errors"][name], file=sys.stderr, flush=True)
        report.setdefault("phase_seconds", {})[name] = time.perf_counter() - started
        _save(args.out, report)
        (args.out / "deliver.md").write_text(_markdown(report))
        print(f"[deliver] {name} done in {report['phase_seconds'][name]:.0f} s", flush=True)
    (args.out / "deliver.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0 if _held(report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
