#!/usr/bin/env bash
# On a GPU machine: kgen's offline search from a de-tuned seed against an exhaustive sweep of the
# same knobs (scripts/search_vs_sweep.py) for RMSNorm backward, LayerNorm forward and softmax.
# Claim under test: the search's winner is within 5% of the sweep's best, with at most 25% of the
# sweep's evaluations.
#
# Usage: scripts/gpu_search.sh OUT [PROBLEM...] [-- EXTRA_ARGS...]
#   OUT       everything is written here, at most 8 files:
#               log.txt              progress with timestamps
#               search_vs_sweep.md   the table (pass / fail per problem)
#               search_vs_sweep.json every figure: each swept configuration's time, the search's trail
#               <problem>.json       one problem's result (what --merge takes)
#               work.tar.gz          each problem's kgen run directory, knowledge base and result
#   PROBLEM   rmsnorm_backward layernorm_forward softmax (default: all three)
#   EXTRA     passed to search_vs_sweep.py, e.g. -- --run-option plateau_generations=2
# Exit code: 0 every problem passed, 1 one failed (the table says which), 2 usage, 3 set-up.
#
# GPU time: about 3 to 5 minutes a problem (the search's candidates cost about 10 s each in kgen's
# verifier, its winner is verified again at full size, the sweep about 0.5 s a configuration). If
# one 10-minute window cannot hold all three, run one problem per call and merge the results
# anywhere (no GPU needed):
#   python3 scripts/search_vs_sweep.py --merge A/rmsnorm_backward.json B/layernorm_forward.json \
#     C/softmax.json --out merged
# Wheels carried in .whl/ (kgen's dependencies the GPU image lacks) are installed first; kgen
# itself comes from them or, failing that, from this checkout.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: gpu_search.sh OUT [PROBLEM...] [-- EXTRA_ARGS...]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "$usage" >&2; exit 2; }
shift
problems=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do problems+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
extra=("$@")
[ ${#problems[@]} -gt 0 ] || problems=(rmsnorm_backward layernorm_forward softmax)
log="$out/log.txt"
stamp() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
: > "$log"
started=$SECONDS

if ls "$root"/.whl/*.whl > /dev/null 2>&1; then
  stamp "installing $(ls "$root"/.whl/*.whl | wc -l) carried wheel(s)"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$root"/.whl/*.whl 2>&1 | tee -a "$log" || { stamp "wheel install failed"; exit 3; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
cd /tmp  # never import kgen from the source tree's kgen/ folder
if ! python3 -c "from kgen.agent.search.mutation import parameter_space" 2> /dev/null; then
  stamp "installing kgen from $root"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/kgen_site \
    "$root" 2>&1 | tail -5 | tee -a "$log"
  export PYTHONPATH=/tmp/kgen_site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "from kgen.agent.search.mutation import parameter_space" 2>&1 | tee -a "$log" || { stamp "kgen does not import"; exit 3; }
fi
export KGEN_HOME="$out/work/home" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | tee -a "$log"
python3 -c "import torch, triton, kgen; print('torch', torch.__version__, '| triton', triton.__version__, '| kgen', kgen.__file__)" 2>&1 | tee -a "$log"
python3 "$root/scripts/search_vs_sweep.py" --help > /dev/null || { stamp "search_vs_sweep.py does not start"; exit 3; }

for problem in "${problems[@]}"; do
  stamp "=== $problem (${SECONDS}s into the call)"
  python3 "$root/scripts/search_vs_sweep.py" --problems "$problem" --out "$out/work" "${extra[@]}" 2>&1 | tee -a "$log"
  stamp "=== $problem: exit ${PIPESTATUS[0]} ($((SECONDS - started)) s so far)"
  [ -f "$out/work/$problem/result.json" ] && cp "$out/work/$problem/result.json" "$out/$problem.json"
done

python3 "$root/scripts/search_vs_sweep.py" --report-only --out "$out/work" > /dev/null 2>> "$log"
code=$?
for f in search_vs_sweep.md search_vs_sweep.json; do
  [ -f "$out/work/$f" ] && cp "$out/work/$f" "$out/$f"
done
[ -f "$out/search_vs_sweep.md" ] && cat "$out/search_vs_sweep.md" | tee -a "$log"
tar -czf "$out/work.tar.gz" -C "$out" work && rm -rf "$out/work"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1 | tee -a "$log"  # nothing may be left
stamp "done in $((SECONDS - started)) s, exit $code (0: every problem passed; 1: see the table)"
exit $code
