"""Write a backend's seed kernels' evidence file from the GPU runs recorded in docs/.

The knowledge base holds only verified kernels, with the evidence of their
verification and the timings kgen measured. The seed kernels are verified on a
lent GPU (`scripts/gpu_verify.sh` -> docs/gpu_runs/eval_<problem>.json for Triton,
`scripts/gpu_cute.sh` -> docs/gpu_runs/cute/eval_<problem>.json for CuTe DSL) and
timed by `kgen bench` (docs/bench_h100/suite.json, docs/bench_h100_cute/suite.json);
or by `kgen bench --device cuda` alone (its --out folder's results/<problem>.json are the
verdicts, its suite.json the timings: `--runs OUT/results --suite OUT/suite.json`);
this script distils both into knowledge_base/seed_kernels/<backend>/evidence.json,
keyed by problem and tied to each seed's normalised code hash, so a seed edited later
without a new GPU run is caught (tests/knowledge_base/test_seeding.py). A seed whose
GPU verdict is not "passed" gets no evidence (and so cannot ship). A seed with no run in
``--runs`` keeps its recorded evidence if its code is unchanged.

Beside the evidence, each seed's evidence bundle (``bundles/<problem>.json``, which
``kgen kb show ID --bundle`` prints and ``kgen verify`` re-checks) is built from the same GPU
run: only where that run is the one the evidence was distilled from (the same verdict, seeds
and sizes) for the seed's current code. The run's options are the command's that made it
(``--small``, ``--timeout``); what the run did not record (the libraries' versions) stays
empty, never this machine's.

    python scripts/seed_evidence.py                      # triton
    python scripts/seed_evidence.py --backend cute --seeds DIR
    python scripts/seed_evidence.py --bundles-only --runs docs/gpu_runs/library_ii/level1_spellings_results \
        --small --timeout 150                            # bundles of seeds verified by kgen bench --small
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kgen.backends.device import Device
from kgen.evals.bundle import build_bundle, write_bundle
from kgen.evals.harness import EvalOptions
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.result import EvalResult
from kgen.knowledge_base import SEED_KERNELS_DIR
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.schema import Timing, VerificationSummary
from kgen.knowledge_base.seeding import BUNDLES_DIR
from kgen.knowledge_base.write_back import summarise_verification

ROOT = Path(__file__).resolve().parent.parent
#: backend -> (its GPU verification runs, its kgen bench suite, the script that made the runs)
RECORDS = {
    "triton": (ROOT / "docs" / "gpu_runs", ROOT / "docs" / "bench_h100" / "suite.json",
               "kgen eval at full size (scripts/gpu_verify.sh or scripts/gpu_library.sh verify)"),
    "cute": (ROOT / "docs" / "gpu_runs" / "cute", ROOT / "docs" / "bench_h100_cute" / "suite.json",
             "kgen eval at full size (scripts/gpu_cute.sh or scripts/gpu_library.sh verify)"),
}


def _run_file(runs: Path, problem: str) -> Path | None:
    """``eval_<problem>.json`` (scripts/gpu_verify.sh) or ``<problem>.json`` (kgen bench's results/)."""
    return next((p for p in (runs / f"eval_{problem}.json", runs / f"{problem}.json") if p.is_file()), None)


def evidence_for(seeds: Path, runs: Path, suite_path: Path, script: str,
                 previous: dict[str, dict] | None = None) -> dict[str, dict]:
    """problem -> evidence record, for every seed in ``seeds`` the GPU passed (or, with no run
    in ``runs``, whose ``previous`` record is for the same code)."""
    suite = json.loads(suite_path.read_text())
    rows = {row["problem"]: row for row in suite["rows"] if row["verdict"] == "passed"}
    evidence: dict[str, dict] = {}
    for seed in sorted(seeds.glob("*.py")):
        run = _run_file(runs, seed.stem)
        if run is None:
            kept = (previous or {}).get(seed.stem)
            if kept is not None and kept["code_hash"] == normalised_code_hash(seed.read_text()):
                evidence[seed.stem] = kept
                print(f"kept {seed.name}: no new GPU run, its recorded evidence is for this code")
            else:
                print(f"skipped {seed.name}: no GPU verification in {runs}")
            continue
        result = EvalResult.model_validate_json(run.read_text())
        if not result.passed:
            print(f"skipped {seed.name}: the GPU verdict was {result.outcome}: {result.reason[:200]}")
            continue
        summary = summarise_verification(result)
        row = rows.get(seed.stem, {})
        timing = Timing(
            device_name=row.get("device_name", ""),
            time_ms=row.get("candidate_ms"),
            eager_ms=row.get("eager_ms"),
            compile_ms=row.get("compile_ms"),
            speedup_vs_eager=row.get("speedup_vs_eager"),
            speedup_vs_compile=row.get("speedup_vs_compile"),
            pct_of_sol=row.get("pct_of_sol"),
            achieved_tbs=row.get("achieved_tbs"),
            achieved_tflops=row.get("achieved_tflops"),
        )
        evidence[seed.stem] = {
            "code_hash": normalised_code_hash(seed.read_text()),
            "target": result.targets[0] if result.targets else "h100",
            "measured_by": (f"{suite['command']} ({suite['date']}); verified by {script}" if row
                            else f"verified by {script}; not timed by kgen bench"),
            "evidence": summary.model_dump(mode="json"),
            "timing": timing.model_dump(mode="json"),
        }
    return evidence


def write_bundles(seeds: Path, runs: Path, evidence: dict[str, dict], *, small: bool, timeout_s: float | None) -> int:
    """Write ``bundles/<problem>.json`` for every seed whose run in ``runs`` is the one its
    ``evidence`` stands on (see the module docstring); how many were written."""
    written = 0
    for seed in sorted(seeds.glob("*.py")):
        record, run = evidence.get(seed.stem), _run_file(runs, seed.stem)
        source = seed.read_text()
        if record is None or run is None or record["code_hash"] != normalised_code_hash(source):
            continue
        result = EvalResult.model_validate_json(run.read_text())
        if not result.passed or summarise_verification(result) != VerificationSummary.model_validate(record["evidence"]):
            print(f"no bundle for {seed.name}: {run} is not the run its evidence was distilled from")
            continue
        options = EvalOptions(device=Device(result.device), backend=result.backend, targets=list(result.targets),
                              small_sizes=small, bench=result.bench is not None,
                              **({} if timeout_s is None else {"timeout_s": timeout_s}))
        problem = resolve_problem(result.problem).path
        bundle = build_bundle(result, options, source, problem.read_text(), seed.name, problem.name, libraries={})
        write_bundle(bundle, seeds / BUNDLES_DIR / f"{seed.stem}.json")
        written += 1
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="triton", choices=sorted(RECORDS))
    parser.add_argument("--seeds", type=Path, help="the seed folder (default: the knowledge base's for the backend)")
    parser.add_argument("--out", type=Path, help="where evidence.json goes (default: beside the seeds)")
    parser.add_argument("--runs", type=Path, help="the folder of eval_<problem>.json GPU verdicts")
    parser.add_argument("--suite", type=Path, help="the kgen bench suite.json with the timings")
    parser.add_argument("--verified-by", help="what made the verdicts in --runs, as the evidence will say "
                        "(default: the backend's full-size kgen eval script)")
    parser.add_argument("--small", action="store_true", help="the runs in --runs verified at the small size plan "
                        "(kgen bench --small): their bundles say so")
    parser.add_argument("--timeout", type=float, help="the per-candidate timeout the runs had (default: kgen's)")
    parser.add_argument("--bundles-only", action="store_true", help="write the bundles of the recorded evidence's "
                        "runs, leave evidence.json as it is")
    args = parser.parse_args(argv)
    seeds = args.seeds or SEED_KERNELS_DIR / args.backend
    runs, suite, script = RECORDS[args.backend]
    runs, suite, script = args.runs or runs, args.suite or suite, args.verified_by or script
    out = args.out or seeds / "evidence.json"
    previous = json.loads(out.read_text()) if out.is_file() else {}
    evidence = previous if args.bundles_only else evidence_for(seeds, runs, suite, script, previous)
    if not args.bundles_only:
        out.write_text(json.dumps(evidence, indent=1, sort_keys=True) + "\n")
        print(f"wrote {out}: {len(evidence)} seed kernels")
    written = write_bundles(seeds, runs, evidence, small=args.small, timeout_s=args.timeout)
    print(f"wrote {written} evidence bundles under {seeds / BUNDLES_DIR}")


if __name__ == "__main__":
    main()
