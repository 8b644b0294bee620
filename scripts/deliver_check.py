"""Kernels delivered into a real model: exported as torch ops, compiled, trained against stock.

Usage (GPU machine, kgen and transformers installed)::

    python scripts/deliver_check.py --out deliver-out --size 100m --steps 300

    # the same on a CPU, small and in Triton's interpreter (what CI's machine can run)
    TRITON_INTERPRET=1 python scripts/deliver_check.py --out /tmp/deliver --size tiny --steps 4 \
        --device cpu --compile-backend aot_eager

Three phases, each written to ``OUT`` as soon as it ends (a crash loses only the phase it hit):

1. **export**: `kgen export` of the kernels a Llama swaps in (RMSNorm forward and backward,
   SwiGLU, cross-entropy forward and backward, the embedding backward): a run's winners with
   ``--run RUN``, else the library's seed kernels, into one package (``OUT/package``).
2. **compile**: a `transformers` Llama whose RMSNorm, SwiGLU, embedding backward and loss call
   the package's ops, traced by ``torch.compile(fullgraph=True)`` (a graph break raises), one
   training step compiled against the same step in eager mode: loss and gradients compared, the
   graph breaks counted, and the median step time of stock eager, stock compiled and the
   compiled model with the ops.
3. **train**: `kgen train-check` at ``--size`` for ``--steps`` steps against one pair of stock
   runs: the exported package (must agree), a planted embedding backward that accumulates in
   bf16 (must disagree) and an unusual but correct one (must agree); the loss curves as
   ``OUT/loss_curves.svg``.

``OUT/deliver.json`` holds every figure and ``OUT/deliver.md`` the section for
docs/benchmarks.md. Exit 0 when every expectation held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import statistics
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


def _save(out: Path, report: dict[str, Any]) -> None:
    (out / "deliver.json").write_text(json.dumps(report, indent=1, default=str))


def export_package(out: Path, run: str | None) -> dict[str, Any]:
    """Phase 1: the package, and what went into it."""
    from kgen.export.package import write_package
    from kgen.export.sources import find_exportables
    from kgen.train_check.kernels import KERNEL_PROBLEMS, seed_kernel_dir

    if run is not None:
        kernels = [k for k in find_exportables(run) if k.problem in KERNEL_PROBLEMS]
    else:
        seeds = seed_kernel_dir()
        kernels = [k for p in KERNEL_PROBLEMS for k in find_exportables(str(seeds / f"{p}.py"), problem=p)]
    manifest = write_package(kernels, out / "package", PACKAGE)
    return {"package": str(out / "package"), "kernels": [
        {"name": e.name, "verdict": e.verdict, "backward": e.backward, "evidence": e.evidence, "speed": e.speed}
        for e in manifest.kernels]}


def _ops_model(module: Any, model: Any) -> Any:
    """``model`` with RMSNorm, SwiGLU, the embedding's backward and the loss calling the package's ops,
    as a user would wire them: the pairs' autograd is the package's; SwiGLU (no catalog backward) gets
    a torch formula and the embedding a custom op whose backward is the exported kernel."""
    import torch

    from kgen.train_check.swaps import replace_rmsnorms, replace_swiglus, swiglu_gradients

    ns = module.package.namespace
    qualified = f"{ns}_glue"

    embedding = torch.library.custom_op(f"{qualified}::embedding", lambda ids, weight: torch.nn.functional.embedding(
        ids, weight), mutates_args=(), schema="(Tensor ids, Tensor weight) -> Tensor")
    embedding.register_fake(lambda ids, weight: weight.new_empty((*ids.shape, weight.shape[-1])))

    def embedding_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.vocab, ctx.dtype = inputs[1].shape[0], inputs[1].dtype

    def embedding_backward(ctx: Any, grad: Any) -> Any:
        (ids,) = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1]).contiguous()
        return None, module.embedding_backward(rows, ids.reshape(-1).contiguous(), num_embeddings=ctx.vocab).to(
            ctx.dtype)

    embedding.register_autograd(embedding_backward, setup_context=embedding_setup)

    def swiglu_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0], inputs[1])

    def swiglu_backward(ctx: Any, grad: Any) -> Any:
        return swiglu_gradients(*ctx.saved_tensors, grad)

    torch.library.register_autograd(f"{ns}::swiglu", swiglu_backward, setup_context=swiglu_setup)

    class OpsRMSNorm(torch.nn.Module):
        def __init__(self, stock: Any) -> None:
            super().__init__()
            self.weight, self.eps = stock.weight, stock.variance_epsilon

        def forward(self, x: Any) -> Any:
            rows = x.reshape(-1, x.shape[-1])
            return module.rmsnorm_forward(rows, self.weight, eps=self.eps).view(x.shape)

    def rows_swiglu(gate: Any, up: Any) -> Any:
        width = gate.shape[-1]
        return module.swiglu(gate.reshape(-1, width), up.reshape(-1, width)).view(gate.shape)

    replace_rmsnorms(model, OpsRMSNorm)
    replace_swiglus(model, rows_swiglu)
    embed = model.get_input_embeddings()
    embed.forward = lambda ids: embedding(ids, embed.weight)
    return model


def _loss(model: Any, ids: Any, ce: Any | None) -> Any:
    """The next-token loss: stock cross-entropy, or the exported op ``ce`` averaged over tokens."""
    from kgen.train_check.loop import next_token_loss
    from kgen.train_check.swaps import stock_loss

    if ce is None:
        return next_token_loss(model, ids, stock_loss)
    return next_token_loss(model, ids, lambda logits, targets: ce(logits.contiguous(), targets.contiguous()).mean())


def _step_seconds(step: Any, batches: list[Any], device: str) -> float:
    """Median seconds of ``step`` over ``batches`` after two warm-up calls."""
    import torch

    times = []
    for i, ids in enumerate(batches):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        step(ids)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - started)
    return statistics.median(times) if times else float("nan")


def _rel(a: Any, b: Any) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def compile_check(out: Path, size_name: str, device: str, backend: str, timing_steps: int) -> dict[str, Any]:
    """Phase 2: no graph break, compiled equals eager, and the step times."""
    import importlib

    import torch
    import torch._dynamo

    from kgen.train_check.check import model_size
    from kgen.train_check.model import build_model
    from kgen.train_check.tokens import token_batches

    sys.path.insert(0, str(out / "package"))
    module = importlib.import_module(PACKAGE)
    _, size = model_size(size_name)
    batches = token_batches(size.vocab, size.batch, size.seq, timing_steps + 3, seed=1, device=device)
    ops_model = _ops_model(module, build_model(size, 0, device))
    ops_loss = lambda ids: _loss(ops_model, ids, module.cross_entropy_forward)  # noqa: E731
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(ops_loss, fullgraph=True, backend=backend)
    params = [p for p in ops_model.parameters()]
    compiled_loss = compiled(batches[0])
    compiled_grads = torch.autograd.grad(compiled_loss, params, allow_unused=True)
    eager_loss = ops_loss(batches[0])
    eager_grads = torch.autograd.grad(eager_loss, params, allow_unused=True)
    stock = build_model(size, 0, device)
    stock_loss = _loss(stock, batches[0], None)
    stock_grads = torch.autograd.grad(stock_loss, list(stock.parameters()), allow_unused=True)
    pairs = [(g, e, s) for g, e, s in zip(compiled_grads, eager_grads, stock_grads, strict=True) if g is not None]
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())

    def train_step(loss_fn: Any, model: Any) -> Any:
        def step(ids: Any) -> None:
            loss = loss_fn(ids)
            loss.backward()
            model.zero_grad(set_to_none=True)
        return step

    stock_compiled = torch.compile(lambda ids: _loss(stock, ids, None), backend=backend)
    times = {
        "stock_eager": _step_seconds(train_step(lambda ids: _loss(stock, ids, None), stock), batches, device),
        "stock_compiled": _step_seconds(train_step(stock_compiled, stock), batches, device),
        "ops_compiled": _step_seconds(train_step(compiled, ops_model), batches, device),
    }
    return {
        "backend": backend, "graph_breaks": breaks, "fullgraph": True,
        "parameters": sum(p.numel() for p in params),
        "loss": {"compiled": float(compiled_loss.detach()), "eager": float(eager_loss.detach()),
                 "stock": float(stock_loss.detach())},
        "loss_compiled_vs_eager": abs(float(compiled_loss.detach()) - float(eager_loss.detach())),
        "grad_rel_l2_compiled_vs_eager_max": max(_rel(g, e) for g, e, _ in pairs),
        "grad_rel_l2_ops_vs_stock_max": max(_rel(e, s) for _, e, s in pairs),
        "step_seconds": times,
    }


def train_checks(out: Path, size_name: str, steps: int, device: str, seed: int) -> dict[str, Any]:
    """Phase 3: the package and the fixture sets against one pair of stock runs, and the picture."""
    from kgen.train_check.check import model_size, run_check, stock_runs
    from kgen.train_check.plot import loss_curves_svg

    _, size = model_size(size_name)
    started = time.perf_counter()
    stock = stock_runs(size, steps, seed, device)
    stock_seconds = time.perf_counter() - started
    results = {}
    sets: list[tuple[str, dict[str, Any], str]] = [("exported package", {"export": out / "package"}, "agree")]
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
    (out / "loss_curves.svg").write_text(loss_curves_svg(
        f"kgen train-check, Llama {size_name}, {steps} steps, {device}", stock.reference.losses,
        {"stock, jittered": stock.jittered.losses} | {k: v["result"]["kernel"] for k, v in results.items()},
        stock.band.allowed if stock.band else None))
    return {"stock_seconds": stock_seconds, "stock_problem": stock.problem, "checks": results}


def _markdown(report: dict[str, Any]) -> str:
    lines = [f"### Delivered kernels in a Llama ({report['size']}, {report['steps']} steps)", "",
             f"`{report['command']}` on {report['device_name']}, {report['date']}.", ""]
    exported = report.get("export", {})
    if "kernels" in exported:
        lines.append("Exported: " + ", ".join(
            f"{k['name']}{' (autograd: ' + k['backward'] + ')' if k['backward'] else ''}" for k in exported["kernels"]))
        lines.append("")
    compiled = report.get("compile", {})
    if "graph_breaks" in compiled:
        t = compiled["step_seconds"]
        lines += [f"torch.compile (backend {compiled['backend']}, fullgraph): {compiled['graph_breaks']} graph breaks; "
                  f"{compiled['parameters'] / 1e6:.1f}M parameters; loss compiled vs eager "
                  f"{compiled['loss_compiled_vs_eager']:.2e}, gradients rel-L2 <= "
                  f"{compiled['grad_rel_l2_compiled_vs_eager_max']:.2e} (vs stock: "
                  f"{compiled['grad_rel_l2_ops_vs_stock_max']:.2e}).", "",
                  "| training step | median seconds |", "|---|---|",
                  *[f"| {k.replace('_', ' ')} | {v:.4f} |" for k, v in t.items()], ""]
    train = report.get("train", {})
    if "checks" in train:
        lines += ["| kernels | expected | verdict | seconds | why |", "|---|---|---|---|---|"]
        for label, check in train["checks"].items():
            reason = check["reason"].replace("|", "/")[:220]
            lines.append(f"| {label} | {check['expect']} | {check['verdict']} | {check['seconds']:.0f} | {reason} |")
        lines += ["", "Loss curves: `loss_curves.svg`.", ""]
    for phase, error in report.get("errors", {}).items():
        lines.append(f"- {phase} failed: {error.splitlines()[-1] if error else ''}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the package, JSON, markdown, picture")
    parser.add_argument("--size", default="100m", help="tiny, small or 100m")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", help="export this run's winners instead of the seed kernels")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend (aot_eager on a CPU)")
    parser.add_argument("--timing-steps", type=int, default=10, help="steps timed per model in the compile phase")
    parser.add_argument("--phases", nargs="+", default=["export", "compile", "train"],
                        choices=["export", "compile", "train"])
    args = parser.parse_args(argv)
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": "python scripts/deliver_check.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), "size": args.size, "steps": args.steps,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "CPU",
        "torch": torch.__version__, "errors": {},
    }
    phases = {
        "export": lambda: export_package(args.out, args.run),
        "compile": lambda: compile_check(args.out, args.size, args.device, args.compile_backend, args.timing_steps),
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
        print(f"[deliver] {name} done in {report['phase_seconds'][name]:.0f} s", flush=True)
    (args.out / "deliver.md").write_text(_markdown(report))
    print(_markdown(report))
    checks = report.get("train", {}).get("checks", {})
    held = not report["errors"] and all(c["verdict"] == c["expect"] for c in checks.values())
    held = held and report.get("compile", {}).get("graph_breaks", 0) == 0
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
