"""The KernelBench problems for a harness self-test at scale: the largest inputs first, then a spread.

Usage (any machine; planning allocates nothing)::

    python scripts/self_test_selection.py OUT_FOLDER [--largest 15] [--total 40]
    kgen bench --self-test OUT_FOLDER --device cuda --out selftest-gpu

Every problem of the vendored KernelBench levels 1-3 is planned from meta tensors
(``evals/problem/memory_plan.py``); the ``--largest`` with the largest inputs + outputs are taken, and the
rest of ``--total`` is an even spread over the remaining problems in level and number order, so
every level and kind of operator (matmuls, convolutions, reductions, fusions, whole models) is
represented. The chosen files are copied unchanged into ``OUT_FOLDER`` as ``levelN_<file>``
(numbers repeat across levels), and the list is printed with each problem's size.
Re-running ``kgen bench --self-test`` into the same ``--out`` continues where it stopped.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELBENCH = ROOT / "tests" / "fixtures" / "kernelbench"


def problems() -> list[Path]:
    from kgen.evals.suites.suite import scan_suite

    found: list[Path] = []
    for level in ("level1", "level2", "level3"):
        infos, _ = scan_suite(KERNELBENCH / level)
        found.extend(Path(info.path) for info in infos)
    return found


def spread(items: list[Path], count: int) -> list[Path]:
    """``count`` items evenly spaced over ``items`` (all of them when there are fewer)."""
    if count >= len(items):
        return list(items)
    if count <= 0:
        return []
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def select(largest: int, total: int) -> list[tuple[Path, int]]:
    """(problem file, inputs + outputs bytes): the largest first, then the spread."""
    from kgen.evals.problem.memory_plan import plan_memory

    sized = [(path, plan_memory(path).problem_bytes) for path in problems()]
    by_size = sorted(sized, key=lambda item: -item[1])
    chosen = by_size[:largest]
    taken = {path for path, _ in chosen}
    rest = [item for item in sized if item[0] not in taken]
    picked = {path for path in spread([path for path, _ in rest], max(0, total - len(chosen)))}
    return chosen + [item for item in rest if item[0] in picked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder to copy the chosen problem files into")
    parser.add_argument("--largest", type=int, default=15, help="problems with the largest inputs + outputs")
    parser.add_argument("--total", type=int, default=40, help="problems in all")
    args = parser.parse_args(argv)
    if args.largest < 0 or args.total < args.largest:
        parser.error("--total must be at least --largest, and both at least 0")
    args.out.mkdir(parents=True, exist_ok=True)
    warnings.filterwarnings("ignore")  # the problems' own constructors warn (nested tensors, meshgrid)
    chosen = select(args.largest, args.total)
    for number, (path, size) in enumerate(chosen, 1):
        shutil.copy(path, args.out / f"{path.parent.name}_{path.name}")
        kind = "largest" if number <= args.largest else "spread"
        print(f"{number:3d} {kind:8s} {path.parent.name}/{path.name:70s} {size / 1e9:7.2f} GB")
    print(f"{len(chosen)} problem files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
