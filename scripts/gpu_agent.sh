#!/usr/bin/env bash
# On a GPU machine with kgen installed: the README's main command in offline mode (the seed
# kernel re-measured, then tuned variants), then the scripted two-provider run on the GPU.
# Usage: scripts/gpu_agent.sh OUTDIR [offline|scripted|both]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: gpu_agent.sh OUTDIR [offline|scripted|both]}
what=${2:-both}
mkdir -p "$out"
export KGEN_HOME="$out/home"
cd /tmp  # never import kgen from the source tree's kgen/ folder
# the seeds' evidence is keyed by code hash: it must match under this machine's Python too
python3 -c "from kgen.knowledge_base.seeding import seed_entries; print(len(seed_entries()), 'seeds match their evidence')"
if [ "$what" != scripted ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -m kgen.cli doctor 2>&1 | tail -8
  time python3 -m kgen.cli "Triton RMSNorm backward for H100" --budget 6 --generations 2 --out "$out/run_offline"
  echo "exit $?"
  python3 -m kgen.cli kb list --problem rmsnorm_backward
fi
if [ "$what" != offline ]; then
  TRITON_INTERPRET=0 python3 -m pytest -q -p no:cacheprovider -m gpu -s "$root/tests/agent/runs/test_run_with_models.py" \
    --rootdir "$root" -c "$root/pyproject.toml" 2>&1 | tail -15
fi
