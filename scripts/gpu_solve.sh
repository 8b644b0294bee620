#!/usr/bin/env bash
# On a GPU machine: `kgen solve` over a folder of problems, offline (the knowledge base's seed
# kernels, re-measured and tuned), ending with the fast_p table; what docs/benchmarks.md records.
#
# Usage: scripts/gpu_solve.sh OUT [SUITE_DIR] [-- KGEN_SOLVE_ARGS...]
#   SUITE_DIR  default: five of kgen's catalog problems (KernelBench format) that have seeds:
#              gelu, softmax, swiglu, rmsnorm_forward, layernorm_forward (copied to OUT/suite)
#   OUT        log.txt, suite.md (the table), index.html, solve.tar.gz (every run directory)
# Wheels carried in .whl/ (kgen and the dependencies the GPU image lacks) are installed first.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: gpu_solve.sh OUT [SUITE_DIR] [-- ARGS...]" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
suite=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then suite=$(cd "$1" && pwd); shift; fi
[ "${1:-}" = "--" ] && shift
log="$out/log.txt"; : > "$log"
stamp() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
if ls "$root"/.whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$root"/.whl/*.whl 2>&1 | tail -3 | tee -a "$log"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
if [ -z "$suite" ]; then
  suite="$out/suite"; mkdir -p "$suite"
  for p in gelu softmax swiglu rmsnorm_forward layernorm_forward; do cp "$root/evals/problem/problems/$p.py" "$suite/"; done
fi
export KGEN_HOME=/tmp/kgen_solve_home PYTHONUNBUFFERED=1
cd /tmp
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
stamp "kgen solve $suite $*"
python3 -m kgen.cli solve "$suite" --out "$out/solve" --device cuda "$@" 2>&1 | tee -a "$log"
code=${PIPESTATUS[0]}
stamp "kgen solve exit $code"
cp "$out/solve/table/suite.md" "$out/suite.md" 2>/dev/null
cp "$out/solve/index.html" "$out/index.html" 2>/dev/null
tar -czf "$out/solve.tar.gz" -C "$out" solve suite 2>/dev/null && rm -rf "$out/solve"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$log"  # nothing may be left
exit $code
