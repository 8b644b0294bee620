#!/usr/bin/env bash
# On a GPU machine with CuTe DSL and kgen installed: every CuTe seed through kgen's whole
# verifier at full size, timed by `kgen bench` against eager and torch.compile, then the agent
# on "CuTe RMSNorm backward for H100" with the seeds that passed in its knowledge base.
#
# Usage: scripts/gpu_cute.sh OUT [SEEDS_DIR] [STEP...]
#   OUT        written here: quick.txt (scripts/cute_seed_gpu_check.py), eval_<problem>.json
#              (kgen eval --json), bench/ (kgen bench of the CuTe seeds), bench_triton/ (the
#              shipped Triton seeds of the same problems, same call), kb_<file>.json (an
#              unmodified KernelBench file at full size against its CuTe candidate from
#              tests/fixtures/kernelbench_cute/), evidence.json, agent.txt, log.txt
#   SEEDS_DIR  default: knowledge_base/seed_kernels/cute
#   STEP       any of quick eval bench kernelbench agent (default: all five, in that order)
# Each step skips what OUT already holds, so a step cut by the 10-minute window resumes in the
# next call. Exit code 0 unless a step could not start.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:?usage: gpu_cute.sh OUT [SEEDS_DIR] [STEP...]}" && cd "$1" && pwd)
seeds=$(cd "${2:-$root/knowledge_base/seed_kernels/cute}" && pwd)
shift 2 2>/dev/null || shift $#
steps=${*:-quick eval bench kernelbench agent}
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$out/log.txt"; }
cd /tmp  # never import kgen from the source tree's kgen/ folder

for step in $steps; do
  case $step in
  quick)
    [ -s "$out/quick.txt" ] && continue
    log "quick check (ModelNew vs fp64 reference, timing) of $seeds"
    timeout 300 python3 "$root/scripts/cute_seed_gpu_check.py" "$seeds"/*.py > "$out/quick.txt" 2>&1
    log "quick check exit $?"; tail -40 "$out/quick.txt" ;;
  eval)
    for f in "$seeds"/*.py; do
      name=$(basename "$f" .py)
      [ -s "$out/eval_$name.json" ] && continue
      log "kgen eval $name --backend cute --device cuda"
      timeout 300 python3 -m kgen.cli eval "$name" "$f" --backend cute --device cuda --target h100 --json > "$out/eval_$name.json"
      log "  exit $?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['verdict'], r.get('rejection') or r.get('inconclusive') or '', r['reason'][:200])" "$out/eval_$name.json" 2>&1)"
    done ;;
  bench)
    [ -s "$out/bench/suite.json" ] && continue
    log "kgen bench --backend cute"
    python3 -m kgen.cli bench --backend cute --candidates "$seeds" --small --out "$out/bench" > "$out/bench.txt" 2>&1
    log "kgen bench exit $?"; tail -30 "$out/bench.txt"
    [ -s "$out/bench_triton/suite.json" ] && continue
    triton_seeds=$(mktemp -d)
    for f in "$seeds"/*.py; do
      cp "$root/knowledge_base/seed_kernels/triton/$(basename "$f")" "$triton_seeds/" 2>/dev/null
    done
    log "kgen bench --backend triton (the shipped Triton seeds of the same problems)"
    python3 -m kgen.cli bench --backend triton --candidates "$triton_seeds" --small --out "$out/bench_triton" > "$out/bench_triton.txt" 2>&1
    log "kgen bench (triton) exit $?"; tail -30 "$out/bench_triton.txt" ;;
  kernelbench)
    for f in "$root"/tests/fixtures/kernelbench_cute/*.py; do
      name=$(basename "$f" .py)
      [ -s "$out/kb_$name.json" ] && continue
      log "kgen eval KernelBench level1/$name.py (unmodified, full size) --backend cute --bench"
      timeout 400 python3 -m kgen.cli eval "$root/tests/fixtures/kernelbench/level1/$name.py" "$f" --backend cute \
        --device cuda --target h100 --bench --json > "$out/kb_$name.json"
      log "  exit $?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['verdict'], r['reason'][:300])" "$out/kb_$name.json" 2>&1)"
    done ;;
  agent)
    [ -s "$out/agent.txt" ] && continue
    # the seeds the GPU passed, with their evidence, into the installed package's knowledge base
    python3 "$root/scripts/seed_evidence.py" --backend cute --seeds "$seeds" --runs "$out" \
      --suite "$out/bench/suite.json" --out "$out/evidence.json" || { log "no evidence: agent skipped"; continue; }
    shipped=$(python3 -c "from kgen.knowledge_base import SEED_KERNELS_DIR; print(SEED_KERNELS_DIR / 'cute')")
    mkdir -p "$shipped"
    python3 - "$out/evidence.json" "$seeds" "$shipped" <<'PY'
import json, shutil, sys
from pathlib import Path
evidence, seeds, shipped = json.load(open(sys.argv[1])), Path(sys.argv[2]), Path(sys.argv[3])
for problem in evidence:
    shutil.copy(seeds / f"{problem}.py", shipped / f"{problem}.py")
shutil.copy(sys.argv[1], shipped / "evidence.json")
print("shipped for the agent run:", ", ".join(sorted(evidence)) or "none")
PY
    log "kgen \"CuTe RMSNorm backward for H100\" --device cuda (offline)"
    KGEN_HOME="$out/home" timeout 420 python3 -m kgen.cli "CuTe RMSNorm backward for H100" --device cuda \
      --budget 4 --out "$out/run" > "$out/agent.txt" 2>&1
    log "agent exit $?"; tail -25 "$out/agent.txt" ;;
  *) log "unknown step $step (quick eval bench kernelbench agent)"; exit 2 ;;
  esac
done
