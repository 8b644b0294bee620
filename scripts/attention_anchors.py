#!/usr/bin/env python3
"""Causal attention against the kernels it must beat ([O]), timed the same way in one process.

For ``causal_attention_forward`` at the catalog's size and the other sequence lengths of
``scripts/library_shapes.SHAPES`` (512, 8192, and 3001, no multiple of any tile):

- torch's ``scaled_dot_product_attention(is_causal=True)`` with each backend it offers forced
  one at a time (flash, cuDNN, memory-efficient): which one PyTorch would pick depends on the
  build and the shape, so the fastest of them is the bar;
- flash-attn-4 (``flash_attn.cute``, Dao-AILab's FlashAttention in CuTe DSL), where installed;
  it takes [batch, seq, heads, dim], so it is given transposed copies made before the timing;
- Triton's fused-attention tutorial, given as a file with ``--tutorial`` (its ``attention(q, k,
  v, causal, sm_scale)``), where the user has one;
- kgen's kernels (``--candidates``: files defining ``ModelNew``, as ``kgen eval`` takes them).

Each is first checked against the problem's ``Model`` in fp64 on the first input set (a loose
rel-L2 of 2e-2: a layout mistake, not rounding, is what this catches; ``kgen eval`` is the
verifier), and the row says whether that output meets the bounds kgen's verifier holds a
kernel to against fp64 (a flash kernel rounds its probabilities to bf16 before P @ V: where
that misses the bound, the bound is stricter than what users run), then timed with kgen's timer (``evals/timing/measure.time_on_gpu``: L2 flushed, input
sets rotated, the median). TFLOP/s count the causal triangle only (the problem's ``kgen_flops``).

    python scripts/attention_anchors.py --candidates K.py [K2.py ...] --out anchors.md [--json anchors.json]

``--dry`` runs on the CPU at the problem's small sizes, with no timing: every anchor that can
run there (SDPA's math path, the candidates through Triton's interpreter) is checked, the rest
say why not. It is the script's own test.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import library_shapes  # noqa: E402  (a script beside this one)

PROBLEM = "causal_attention_forward"
#: rel-L2 against the fp64 Model above which an anchor is reported wrong, not timed
CHECK_REL_L2 = 2e-2
SDPA_BACKENDS = {"sdpa flash": "FLASH_ATTENTION", "sdpa cuDNN": "CUDNN_ATTENTION",
                 "sdpa efficient": "EFFICIENT_ATTENTION"}


class Unavailable(Exception):
    """This anchor cannot run here (not installed, no such backend, the shape is refused)."""


def say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def sizes_to_run(dry: bool) -> dict[str, dict[str, int] | None]:
    """tag -> sizes (None: the catalog's defaults); a dry run uses the small sizes only."""
    if dry:
        from kgen.evals.problem.catalog import resolve_problem

        return {"small": resolve_problem(PROBLEM).cpu_sizes()}
    return {"default": None, **library_shapes.SHAPES[PROBLEM]}


def _import_file(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Unavailable(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sdpa_anchor(backend: str) -> Callable[[Any, Any, Any], Any]:
    """SDPA with one backend forced; torch raises when that backend refuses the inputs."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, backend, None)
    if chosen is None:
        raise Unavailable(f"this torch has no SDPBackend.{backend}")

    def run(q, k, v):
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


def flash_attn_4_anchor() -> Callable[[Any, Any, Any], Any]:
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError as exc:
        raise Unavailable(f"flash-attn-4 is not installed ({exc})") from exc
    transposed: dict[int, tuple[Any, Any, Any]] = {}

    def run(q, k, v):
        # [B, H, S, D] -> [B, S, H, D] once per input set, outside the timed calls after the first
        key = q.data_ptr()
        if key not in transposed:
            transposed[key] = tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))
        tq, tk, tv = transposed[key]
        out = flash_attn_func(tq, tk, tv, causal=True)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)

    return run


def tutorial_anchor(path: Path) -> Callable[[Any, Any, Any], Any]:
    module = _import_file(path, "kgen_attention_tutorial")
    attention = getattr(module, "attention", None)
    if attention is None:
        raise Unavailable(f"{path} defines no attention(q, k, v, causal, sm_scale)")

    def run(q, k, v):
        return attention(q, k, v, True, 1.0 / math.sqrt(q.shape[-1]))

    return run


def candidate_anchor(path: Path, index: int) -> Callable[[Any, Any, Any], Any]:
    module = _import_file(path, f"kgen_attention_candidate_{index}")
    model = module.ModelNew()

    def run(q, k, v):
        return model(q, k, v)

    return run


def anchors(args: argparse.Namespace) -> dict[str, Callable[[], Callable[[Any, Any, Any], Any]]]:
    """name -> a factory (called once per size, so a missing library is said per row)."""
    made: dict[str, Callable[[], Callable[[Any, Any, Any], Any]]] = {
        name: (lambda b=backend: sdpa_anchor(b)) for name, backend in SDPA_BACKENDS.items()
    }
    made["flash-attn-4"] = flash_attn_4_anchor
    if args.tutorial:
        made["Triton tutorial"] = lambda: tutorial_anchor(args.tutorial)
    stems = [path.stem for path in args.candidates]
    for i, path in enumerate(args.candidates):
        # a Triton and a CuTe kernel of one problem share their file name: their folder tells them apart
        label = path.stem if stems.count(path.stem) == 1 else f"{path.parent.name}/{path.stem}"
        made[f"kgen {label}"] = lambda p=path, i=i: candidate_anchor(p, i)
    return made


def bound_note(c: Any) -> str:
    """Whether an output's comparison with fp64 meets the bounds kgen's verifier holds a kernel
    to (rel-L2 and elementwise, on the problem's own inputs): an anchor that does not shows
    where the bound is stricter than the kernels users run."""
    if c.passed:
        return "meets kgen's bounds"
    return (f"misses kgen's bounds: {c.mismatched_count} elements over the elementwise bound, "
            f"rel-L2 {c.rel_l2_error / c.tolerance_rel_l2:.2f}x its tolerance")


def run_size(tag: str, sizes: dict[str, int] | None, args: argparse.Namespace, device: str) -> list[dict[str, Any]]:
    import torch

    from kgen.evals.checks.compare import compare_output
    from kgen.evals.problem.catalog import resolve_problem
    from kgen.evals.problem.format import load_problem

    loaded = load_problem(resolve_problem(PROBLEM).path, sizes)
    torch.manual_seed(0)
    input_sets = [[x.to(device) for x in loaded.get_inputs()] for _ in range(args.input_sets)]
    with torch.no_grad():
        ref64 = loaded.model_class()(*[x.double() for x in input_sets[0]])
    flops = loaded.module.kgen_flops()
    rows = []
    for name, factory in anchors(args).items():
        row: dict[str, Any] = {"size": tag, "anchor": name, "ms": None, "tflops": None, "note": ""}
        rows.append(row)
        try:
            fn = factory()
            with torch.no_grad():
                got = fn(*input_sets[0])
            if device == "cuda":
                torch.cuda.synchronize()
            comparison = compare_output(0, got.contiguous(), ref64)
            if not comparison.rel_l2_error <= CHECK_REL_L2:
                row["note"] = f"wrong: rel-L2 {comparison.rel_l2_error:.3g} against the fp64 Model"
                continue
            row["note"] = f"checked (rel-L2 {comparison.rel_l2_error:.1e}); {bound_note(comparison)}"
            del got
            if args.dry:
                continue
            from kgen.evals.timing.measure import time_on_gpu

            with torch.no_grad():
                timing = time_on_gpu(fn, input_sets, budget_s=args.budget_s, check_sync=False)
            row["ms"] = timing.median_ms
            row["p10_ms"], row["p90_ms"] = timing.p10_ms, timing.p90_ms
            row["tflops"] = flops / (timing.median_ms * 1e-3) / 1e12
        except Unavailable as exc:
            row["note"] = f"not run: {exc}"
        except Exception as exc:  # noqa: BLE001 - an anchor that fails says so in its row; the others go on
            row["note"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()
        timed = f"{row['ms']:.3f} ms, {row['tflops']:.0f} TFLOP/s; " if row["ms"] else ""
        say(f"[{tag}] {name}: {timed}{row['note']}")
    return rows


def table(rows: list[dict[str, Any]], sizes: dict[str, dict[str, int] | None], header: str) -> str:
    lines = [header, "", "| size | anchor | ms (p10-p90) | TFLOP/s | vs fastest SDPA backend | note |",
             "|---|---|---|---|---|---|"]
    for tag in sizes:
        these = [r for r in rows if r["size"] == tag]
        sdpa = [r["ms"] for r in these if r["anchor"] in SDPA_BACKENDS and r["ms"]]
        best = min(sdpa) if sdpa else None
        for r in these:
            ms = f"{r['ms']:.3f} ({r['p10_ms']:.3f}-{r['p90_ms']:.3f})" if r["ms"] else "-"
            tflops = f"{r['tflops']:.0f}" if r["tflops"] else "-"
            versus = f"{best / r['ms']:.2f}x" if best and r["ms"] else "-"
            lines.append(f"| {tag} | {r['anchor']} | {ms} | {tflops} | {versus} | {r['note']} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=Path, nargs="*", default=[], help="kgen kernels (files defining ModelNew)")
    parser.add_argument("--tutorial", type=Path, help="a copy of Triton's fused-attention tutorial, if you have one")
    parser.add_argument("--out", type=Path, help="the markdown table (default: printed only)")
    parser.add_argument("--json", type=Path, help="every row, as JSON")
    parser.add_argument("--sizes", nargs="*", help="tags to run (default, s512, s8192, odd); default: all")
    parser.add_argument("--budget-s", type=float, default=1.0, help="seconds of timing per anchor and size")
    parser.add_argument("--input-sets", type=int, default=3)
    parser.add_argument("--dry", action="store_true", help="CPU, small sizes, check only")
    args = parser.parse_args(argv)
    for path in [*args.candidates, *([args.tutorial] if args.tutorial else [])]:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    device = "cpu" if args.dry else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device here; --dry checks the anchors on the CPU", file=sys.stderr)
        return 2
    sizes = sizes_to_run(args.dry)
    if args.sizes:
        unknown = sorted(set(args.sizes) - set(sizes))
        if unknown:
            print(f"error: no size {', '.join(unknown)}; the sizes: {', '.join(sizes)}", file=sys.stderr)
            return 2
        sizes = {tag: s for tag, s in sizes.items() if tag in args.sizes}
    rows = []
    for tag, s in sizes.items():
        rows.extend(run_size(tag, s, args, device))
    gpu = torch.cuda.get_device_name() if device == "cuda" else "CPU (check only)"
    versions = [f"torch {torch.__version__}"]
    for dist in ("triton", "flash-attn-4", "nvidia-cutlass-dsl"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    header = (f"`scripts/attention_anchors.py` on {gpu}, {time.strftime('%Y-%m-%d')}; {', '.join(versions)}; "
              f"sizes: " + "; ".join(f"{t} {s or 'catalog default'}" for t, s in sizes.items()))
    text = table(rows, sizes, header)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    checked = [r for r in rows if r["note"].startswith("checked")]
    return 0 if checked and not any(r["note"].startswith("wrong") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
