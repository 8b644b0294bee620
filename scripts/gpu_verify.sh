#!/usr/bin/env bash
# On a GPU machine with kgen installed: every seed kernel through `kgen eval --device cuda`
# at full sizes, the red-team matrix on the GPU, and the training check on the GPU.
# Usage: scripts/gpu_verify.sh OUTDIR
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: gpu_verify.sh OUTDIR}
mkdir -p "$out"
cd /tmp  # never import kgen from the source tree's kgen/ folder
for f in "$root"/knowledge_base/seed_kernels/triton/*.py; do
  name=$(basename "$f" .py)
  python3 -m kgen.cli eval "$name" "$f" --device cuda --target h100 --json > "$out/eval_$name.json"
  echo "kgen eval $name --device cuda: exit $?"
  python3 - "$out/eval_$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
worst = max((o["rel_l2_error"] / o["tolerance_rel_l2"] for t in r["trials"] for o in t["outputs"]), default=float("nan"))
print(f"  {r['verdict']} {r.get('rejection') or ''} trials={len(r['trials'])} worst={worst:.2f}x tol {r['seconds']:.0f}s: {r['reason'][:160]}")
PY
done
python3 "$root/scripts/verification_matrix.py" --device cuda --out "$out/verification_gpu.md"
for f in "$root/knowledge_base/seed_kernels/triton/embedding_backward.py" \
         "$root/tests/fixtures/candidates/redteam_embedding_bwd_bf16_accumulation.py"; do
  python3 -m kgen.cli eval embedding_backward "$f" --device cuda --train-check --no-distributions --json > "$out/train_$(basename "$f" .py).json"
  echo "train check $(basename "$f"): exit $?"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  ', r['verdict'], r.get('rejection'), (r.get('train_check') or {}).get('message', r['reason'])[:300])" "$out/train_$(basename "$f" .py).json"
done
