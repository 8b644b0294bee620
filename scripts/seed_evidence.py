"""Write the shipped seed kernels' evidence file from the GPU runs recorded in docs/.

The knowledge base holds only verified kernels, with the evidence of their
verification and the timings kgen measured. The seed kernels were verified
on a lent H100 (`scripts/gpu_verify.sh` -> docs/gpu_runs/eval_<problem>.json)
and timed by `kgen bench` (docs/bench_h100/suite.json); this script distils
both into knowledge_base/seed_kernels/triton/evidence.json, keyed by problem
and tied to each seed's normalised code hash, so a seed edited later without
a new GPU run is caught (tests/knowledge_base/test_seeding.py).

    python scripts/seed_evidence.py
"""

from __future__ import annotations

import json
from pathlib import Path

from kgen.evals.result import EvalResult
from kgen.knowledge_base import SEED_KERNELS_DIR
from kgen.knowledge_base.code_hash import normalised_code_hash
from kgen.knowledge_base.schema import Timing
from kgen.knowledge_base.write_back import summarise_verification

ROOT = Path(__file__).resolve().parent.parent
GPU_RUNS = ROOT / "docs" / "gpu_runs"
SUITE = ROOT / "docs" / "bench_h100" / "suite.json"


def main() -> None:
    suite = json.loads(SUITE.read_text())
    rows = {row["problem"]: row for row in suite["rows"] if row["verdict"] == "passed"}
    evidence: dict[str, dict] = {}
    for seed in sorted((SEED_KERNELS_DIR / "triton").glob("*.py")):
        run = GPU_RUNS / f"eval_{seed.stem}.json"
        result = EvalResult.model_validate_json(run.read_text())
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
            "target": "h100",
            "measured_by": f"{suite['command']} ({suite['date']}); verified by scripts/gpu_verify.sh",
            "evidence": summary.model_dump(mode="json"),
            "timing": timing.model_dump(mode="json"),
        }
    out = SEED_KERNELS_DIR / "triton" / "evidence.json"
    out.write_text(json.dumps(evidence, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out.relative_to(ROOT)}: {len(evidence)} seed kernels")


if __name__ == "__main__":
    main()
