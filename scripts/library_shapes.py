#!/usr/bin/env python3
"""The fast library's problems at the shapes where published kernels fall off, as a kgen suite.

Each of the library's catalog problems ([M]: norms, losses, embedding backward) is also
benchmarked at a small hidden size (1024) and a large one (16384, or a 128k vocabulary),
each sized to move about as many bytes as the default. Those of [N] (scan, row sum, softcap,
rotary embedding, causal conv1d) at a larger shape and an awkward one whose lengths are no
multiple of any tile. This writes them as a suite folder
``kgen bench`` reads, beside a candidates folder of the seeds under the same names:

    python scripts/library_shapes.py --out shapes [--seeds DIR]
    kgen bench shapes/problems --candidates shapes/candidates --device cuda --small --out bench_shapes

A shape file is the catalog file with its size constants set and ``KGEN_NAME`` changed
(``rmsnorm_forward__h1024``); ``KGEN_VARIANT_OF`` names the catalog problem, so its library
baselines (Liger, quack) are found. ``SHAPES`` is read by ``scripts/library_sweep.py`` too.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: problem -> {tag: sizes}; tags are what the variant's name ends in
SHAPES: dict[str, dict[str, dict[str, int]]] = {
    **{name: {"h1024": {"ROWS": 65536, "HIDDEN": 1024}, "h16384": {"ROWS": 4096, "HIDDEN": 16384}}
       for name in ("rmsnorm_forward", "rmsnorm_backward", "layernorm_forward", "layernorm_backward")},
    **{name: {"v4096": {"N_TOKENS": 32768, "VOCAB": 4096}, "v128256": {"N_TOKENS": 2048, "VOCAB": 128256}}
       for name in ("cross_entropy_forward", "cross_entropy_backward")},
    "embedding_backward": {"d1024": {"N_TOKENS": 65536, "DIM": 1024}, "d16384": {"N_TOKENS": 4096, "DIM": 16384}},
    "fused_embedding_rmsnorm_backward": {"d1024": {"N_TOKENS": 32768, "DIM": 1024},
                                         "d16384": {"N_TOKENS": 4096, "DIM": 16384}},
    # [N]: a larger shape (four times the default's bytes, or 1M-long rows for the scan) and an
    # awkward one (lengths that are no multiple of any tile: rows start unaligned)
    "cumsum": {"r64x1m": {"ROWS": 64, "COLS": 1048576}, "odd": {"ROWS": 3001, "COLS": 5003}},
    "row_sum": {"large": {"ROWS": 65536, "COLS": 4096}, "odd": {"ROWS": 16381, "COLS": 4099}},
    "softcap": {"v128256": {"N_TOKENS": 8192, "VOCAB": 128256}, "odd": {"N_TOKENS": 8191, "VOCAB": 32003}},
    "rope_forward": {"large": {"BATCH": 8, "SEQ": 8192, "HEADS": 32}, "odd": {"BATCH": 3, "SEQ": 4099, "HEADS": 40}},
    "conv1d": {"large": {"BATCH": 8, "CHANNELS": 8192, "SEQ": 5120}, "odd": {"BATCH": 7, "CHANNELS": 5003, "SEQ": 2047}},
    # KernelBench level 1's spellings of the catalog's operations: the level-1 file's own (full)
    # size, and an awkward one (lengths no multiple of any tile)
    "log_softmax": {"kb": {"ROWS": 4096, "COLS": 393216}, "odd": {"ROWS": 4099, "COLS": 8191}},
    "gelu_exact": {"kb": {"TOKENS": 4096, "FFN_DIM": 393216}, "odd": {"TOKENS": 16381, "FFN_DIM": 8191}},
    "rmsnorm_channels": {"kb": {"BATCH": 112, "FEATURES": 64, "DIM1": 512, "DIM2": 512},
                         "odd": {"BATCH": 15, "FEATURES": 63, "DIM1": 255, "DIM2": 257}},
    "layernorm_trailing": {"kb": {"BATCH": 16, "FEATURES": 64, "DIM1": 256, "DIM2": 256},
                           "odd": {"BATCH": 31, "FEATURES": 63, "DIM1": 127, "DIM2": 129}},
    "sum_dim": {"kb": {"BATCH": 128, "DIM1": 4096, "DIM2": 4095}, "odd": {"BATCH": 31, "DIM1": 1023, "DIM2": 1025}},
    "cumsum_dim": {"kb": {"ROWS": 32768, "COLS": 32768}, "odd": {"ROWS": 3001, "COLS": 5003}},
    "cross_entropy_mean": {"kb": {"N_TOKENS": 32768, "VOCAB": 4096}, "odd": {"N_TOKENS": 8191, "VOCAB": 32003}},
    "mean_dim": {"kb": {"BATCH": 128, "DIM1": 4096, "DIM2": 4095}, "odd": {"BATCH": 31, "DIM1": 1023, "DIM2": 1025}},
    "max_dim": {"kb": {"BATCH": 128, "DIM1": 4096, "DIM2": 4095}, "odd": {"BATCH": 31, "DIM1": 1023, "DIM2": 1025}},
    "min_dim": {"kb": {"BATCH": 128, "DIM1": 4096, "DIM2": 4095}, "odd": {"BATCH": 31, "DIM1": 1023, "DIM2": 1025}},
    "cumsum_reverse": {"kb": {"ROWS": 32768, "COLS": 32768}, "odd": {"ROWS": 3001, "COLS": 5003}},
    "cumsum_exclusive": {"kb": {"ROWS": 32768, "COLS": 32768}, "odd": {"ROWS": 3001, "COLS": 5003}},
    # [O]: sequence lengths 512 and 8192 and one no multiple of any tile
    "causal_attention_forward": {"s512": {"BATCH": 16, "SEQ": 512}, "s8192": {"BATCH": 1, "SEQ": 8192},
                                 "odd": {"BATCH": 4, "SEQ": 3001}},
}


def variant_name(problem: str, tag: str) -> str:
    return f"{problem}__{tag}"


def variant_source(source: str, problem: str, tag: str, sizes: dict[str, int]) -> str:
    """The catalog file's text with each size constant's top-level line set and the name changed."""
    for name, value in sizes.items():
        source, count = re.subn(rf"^{name} = \d+", f"{name} = {value}", source, count=1, flags=re.M)
        if count != 1:
            raise ValueError(f"{problem} has no top-level line '{name} = <int>'")
    source, count = re.subn(r'^KGEN_NAME = "[^"]*"', f'KGEN_NAME = "{variant_name(problem, tag)}"\n'
                            f'KGEN_VARIANT_OF = "{problem}"', source, count=1, flags=re.M)
    if count != 1:
        raise ValueError(f"{problem} has no KGEN_NAME line")
    return source


def write_suite(out: Path, seeds: list[Path], problems: list[str] | None = None) -> list[str]:
    """``out/problems/<variant>.py`` and ``out/candidates/<variant>.py`` for every shape of every
    problem that has a seed in ``seeds`` (the first folder holding ``<problem>.py`` wins)."""
    from kgen.evals.problem.catalog import resolve_problem

    written = []
    for problem, shapes in SHAPES.items():
        if problems and problem not in problems:
            continue
        seed = next((folder / f"{problem}.py" for folder in seeds if (folder / f"{problem}.py").is_file()), None)
        if seed is None:
            print(f"skipped {problem}: no seed kernel in {', '.join(map(str, seeds))}")
            continue
        source = resolve_problem(problem).path.read_text()
        for tag, sizes in shapes.items():
            name = variant_name(problem, tag)
            (out / "problems").mkdir(parents=True, exist_ok=True)
            (out / "candidates").mkdir(parents=True, exist_ok=True)
            (out / "problems" / f"{name}.py").write_text(variant_source(source, problem, tag, sizes))
            shutil.copyfile(seed, out / "candidates" / f"{name}.py")
            written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=Path, action="append",
                        help="folder of seed kernels named after their problems (repeatable; first wins; "
                             "default: the unverified seeds, then the shipped ones)")
    parser.add_argument("--problems", nargs="*")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.problems or []) - set(SHAPES))
    if unknown:
        parser.error(f"no shapes for {', '.join(unknown)}; the library's problems: {', '.join(SHAPES)}")
    seeds = args.seeds or [ROOT / "knowledge_base" / "seed_kernels_unverified" / "triton",
                           ROOT / "knowledge_base" / "seed_kernels" / "triton"]
    written = write_suite(args.out, seeds, args.problems)
    print(f"wrote {len(written)} shapes under {args.out}: {', '.join(written)}")
    return 0 if written else 1


if __name__ == "__main__":
    raise SystemExit(main())
