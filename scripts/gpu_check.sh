#!/usr/bin/env bash
# On a GPU machine: kgen's whole path once, as a user meets it, in steps that can be spread over
# several 10-minute calls of the lent machine (each step's time on an H100 in brackets):
#
#   pytest       the GPU-marked timing and Triton-backend tests (1 min)
#   seeds        every Triton seed kernel verified and timed at the catalog's full sizes
#                (`kgen eval --bench`, about 30 s each)
#   kernelbench  unmodified KernelBench level-1 files (ReLU, Softmax, LayerNorm) at their full
#                sizes with solutions written for them (`kgen eval --bench`, 3 min)
#   agent        the README's main command, offline: the seed re-measured, tuned variants
#                verified as a batch and timed one at a time, the winner verified again at
#                full size (3 min)
#   selftest     the harness self-test over the same three KernelBench files at full size (2 min)
#   scripted     the scripted two-provider run on the GPU (its pytest test, 2 min)
#   matrix       the red-team confusion matrix of both backends, Triton and CuTe DSL
#                (scripts/verification_matrix.py --device cuda --backend all; written to
#                OUT/verification_gpu.md; KGEN_MATRIX_JOBS candidates at once, default 4;
#                KGEN_MATRIX_BACKEND=triton|cute splits it over two calls)
#   public       the public LLM-written KernelBench solutions against their hand judgements
#                (scripts/public_solutions.py; its section of OUT/verification.md; 3 min)
#   throughput   candidates per GPU-minute in the agent's loop on four memory-bound catalog
#                problems (scripts/eval_throughput.py, 8 candidates each; OUT/throughput.md; 2 min)
#   main24       the README's main command with --budget 24, twice in one KGEN_HOME (the second
#                finds the baselines and the winner's full-size verification kept): candidates
#                per minute end to end, start-up and final verification included (5 min)
#   scale        the engine at scale: gpu_scale.sh agent (three catalog problems offline, their
#                sync ratios) and full_size (five unmodified KernelBench files at full size) (6 min)
#
# Usage: scripts/gpu_check.sh OUT [STEP...]   (no step: all of them, in this order)
#   OUT gets at most 8 files: log.txt (everything, with timestamps), summary.md (one line per
#   check), work.tar.gz (each evaluation's JSON, the run folders, the tests' output).
# Wheels carried in .whl/ (kgen's own and the dependencies the GPU image lacks) are installed
# first. CuTe DSL, which the GPU image lacks, travels as .cute1/.cute2 (see the cute-device tool's
# README): when .cute2/activate is in the checkout it is sourced here, after the call that
# carried .cute1 has left part 1 in $HOME/kgen-cute. KGEN_CHECK_DEVICE=cpu runs the same commands on a CPU (a smoke test of the script).
# Exit code: 0 every check as expected, 1 one was not (summary.md says which), 2 usage, 3 set-up.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: gpu_check.sh OUT [pytest|seeds|kernelbench|agent|selftest|scripted|matrix|public|throughput|main24|scale]..."
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "$usage" >&2; exit 2; }
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(pytest seeds kernelbench agent selftest scripted matrix public)
for step in "${steps[@]}"; do
  case "$step" in pytest|seeds|kernelbench|agent|selftest|scripted|matrix|public|throughput|main24|scale) ;;
    *) echo "$usage" >&2; exit 2 ;; esac
done
wants() { [[ " ${steps[*]} " == *" $1 "* ]]; }
device=${KGEN_CHECK_DEVICE:-cuda}
log="$out/log.txt"
summary="$out/summary.md"
stamp() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
record() { echo "| $1 | $2 | $3 |" >> "$summary"; stamp "$1: $2 ($3)"; }
failed=0
: >> "$log"
[ -f "$summary" ] || printf '| check | outcome | detail |\n|---|---|---|\n' > "$summary"
started=$SECONDS

if ls "$root"/.whl/*.whl > /dev/null 2>&1; then
  wheels=$(cd "$root/.whl" && ls -l *.whl | md5sum | cut -d' ' -f1)
  if [ "$(cat /tmp/site/.kgen-wheels 2>/dev/null)" != "$wheels" ]; then
    stamp "installing $(ls "$root"/.whl/*.whl | wc -l) carried wheel(s)"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$root"/.whl/*.whl 2>&1 | tail -3 | tee -a "$log"
    echo "$wheels" > /tmp/site/.kgen-wheels
  fi
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
elif [ -f /tmp/site/.kgen-wheels ]; then  # installed by an earlier call while the machine stayed warm
  stamp "using the wheels an earlier call installed in /tmp/site"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
if [ -f "$root/.cute2/activate" ]; then  # it unpacks relative to the checkout, once per machine
  pushd "$root" > /dev/null || exit 3
  . .cute2/activate >> "$log" 2>&1 || stamp "CuTe DSL not activated (part 1 missing: make the call that carries .cute1)"
  popd > /dev/null || exit 3
fi
work=$(mktemp -d /tmp/kgen-check.XXXXXX)  # everything but the archive stays off $OUT
mkdir -p "$work"
export KGEN_HOME="$work/home" PYTHONUNBUFFERED=1
# never import kgen from the source tree's kgen/ folder: not from the working directory, and in
# pytest not from the checkout the project's `pythonpath = ["."]` would put first (that setting
# serves an editable install, which maps kgen's other folders; here kgen is the installed wheel)
cd /tmp
python3 -c "import kgen, torch, triton; from kgen.evals.harness import evaluate; \
print('kgen', kgen.__version__, kgen.__file__, '| torch', torch.__version__, '| triton', triton.__version__)" \
  2>&1 | tee -a "$log" || { stamp "kgen does not import"; exit 3; }
[ "$device" = cpu ] || nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | tee -a "$log"

# One evaluation: `kgen eval PROBLEM CANDIDATE --bench`, its verdict and figures in summary.md.
evaluate() {  # NAME PROBLEM CANDIDATE
  local name=$1 json="$work/eval_$1.json"
  timeout 300 python3 -m kgen.cli eval "$2" "$3" --device "$device" --target h100 --bench --json > "$json" 2>> "$log"
  local code=$?
  local line
  line=$(python3 - "$json" <<'PY' 2>&1
import json, sys
r = json.load(open(sys.argv[1]))
m = (r.get("bench") or {}).get("measurements") or {}
cand, comp = (m.get("candidate") or {}), (m.get("torch.compile") or {})
t = f"{cand.get('median_ms'):.4f} ms" if cand.get("median_ms") else "not timed"
vs = f", {comp['median_ms'] / cand['median_ms']:.2f}x torch.compile" if cand.get("median_ms") and comp.get("median_ms") else ""
print(f"{r['verdict']} {r.get('rejection') or r.get('inconclusive') or ''}|{len(r['trials'])} trials, {t}{vs}, "
      f"{r['seconds']:.0f} s: {r['reason'][:120]}")
PY
)
  record "eval $name" "${line%%|*} (exit $code)" "${line#*|}"
  case "$line" in passed*) ;; *) failed=1 ;; esac
}

if wants pytest && [ "$device" != cpu ]; then
  stamp "=== pytest (${SECONDS}s)"
  TRITON_INTERPRET=0 timeout 480 python3 -m pytest -q -p no:cacheprovider -n 0 -m gpu \
    "$root/tests/evals/timing" "$root/tests/evals/verifier" "$root/tests/evals/checks" \
    "$root/tests/backends/test_triton_backend.py" \
    --rootdir "$root" -c "$root/pyproject.toml" -o pythonpath="$root/tests/support" > "$work/pytest_gpu_timing.txt" 2>&1
  code=$?
  record "pytest -m gpu (timing, verifier, checks, triton backend)" "exit $code" "$(tail -1 "$work/pytest_gpu_timing.txt")"
  [ $code -eq 0 ] || failed=1
fi
if wants seeds; then
  stamp "=== seeds (${SECONDS}s)"
  seeds=("$root"/knowledge_base/seed_kernels/triton/*.py)
  [ "$device" = cpu ] && seeds=("$root/knowledge_base/seed_kernels/triton/softmax.py")
  for seed in "${seeds[@]}"; do
    name=$(basename "$seed" .py)
    evaluate "$name" "$name" "$seed"
  done
fi
if wants kernelbench; then
  stamp "=== kernelbench (${SECONDS}s)"
  kb="$root/tests/fixtures/kernelbench/level1"
  solutions="$root/tests/fixtures/kernelbench_solutions"
  problems=(19_ReLU 23_Softmax 40_LayerNorm)
  [ "$device" = cpu ] && problems=(23_Softmax)
  for problem in "${problems[@]}"; do
    evaluate "kernelbench_$problem" "$kb/$problem.py" "$solutions/level1_$problem.py"
  done
fi
if wants agent; then
  stamp "=== agent (${SECONDS}s)"
  budget=(--budget 6 --generations 2)
  [ "$device" = cpu ] && budget=(--budget 2)
  timeout 420 python3 -m kgen.cli "Triton RMSNorm backward for H100" "${budget[@]}" --device "$device" \
    --out "$work/run_offline" > "$work/run_offline.txt" 2>&1
  code=$?
  record "kgen \"Triton RMSNorm backward for H100\" ${budget[*]}" "exit $code" \
    "$(grep -E 'best for h100' "$work/run_offline.txt" | tail -1 | cut -c1-200)"
  [ $code -eq 0 ] || failed=1
fi
if wants selftest; then
  stamp "=== selftest (${SECONDS}s)"
  selftest=(19_ReLU 23_Softmax 40_LayerNorm)
  [ "$device" = cpu ] && selftest=(23_Softmax)
  mkdir -p "$work/selftest_suite"
  for problem in "${selftest[@]}"; do cp "$root/tests/fixtures/kernelbench/level1/$problem.py" "$work/selftest_suite/"; done
  timeout 300 python3 -m kgen.cli bench --self-test "$work/selftest_suite" --device "$device" \
    --out "$work/selftest" > "$work/selftest.txt" 2>&1
  code=$?
  record "kgen bench --self-test (${selftest[*]})" "exit $code" "$(grep -iE 'passed|judged' "$work/selftest.txt" | tail -1 | cut -c1-160)"
  [ $code -eq 0 ] || failed=1
fi
if wants scripted && [ "$device" != cpu ]; then
  stamp "=== scripted (${SECONDS}s)"
  TRITON_INTERPRET=0 timeout 480 python3 -m pytest -q -p no:cacheprovider -n 0 -m gpu \
    "$root/tests/agent/runs/test_run_with_models.py" --rootdir "$root" -c "$root/pyproject.toml" -o pythonpath="$root/tests/support" \
    > "$work/pytest_gpu_agent.txt" 2>&1
  code=$?
  record "pytest -m gpu (scripted two-provider run)" "exit $code" "$(tail -1 "$work/pytest_gpu_agent.txt")"
  [ $code -eq 0 ] || failed=1
fi
if wants matrix; then
  stamp "=== matrix (${SECONDS}s)"
  backend=${KGEN_MATRIX_BACKEND:-all}
  if [ "$backend" != triton ] && ! python3 -c "import cutlass.cute" > /dev/null 2>&1; then
    backend=triton  # the CuTe half cannot run: said in the summary, and the check is not as expected
    record "CuTe DSL on this machine" "missing" "carry .cute1, then .cute2 (the cute-device tool's README); Triton only"
    failed=1
  fi
  # the doc's other sections (the other backend's, from an earlier call) are kept
  [ -f "$out/verification_gpu.md" ] || cp "$root/docs/verification_gpu.md" "$out/verification_gpu.md"
  timeout "${KGEN_MATRIX_TIMEOUT:-560}" python3 "$root/scripts/verification_matrix.py" --device "$device" --backend "$backend" \
    --jobs "${KGEN_MATRIX_JOBS:-4}" --out "$out/verification_gpu.md" > "$work/matrix.txt" 2>&1
  code=$?
  record "verification_matrix.py --backend $backend" "exit $code" "$(grep -E 'candidates as expected|as expected,' "$work/matrix.txt" | tr '\n' ' ' | cut -c1-300)"
  [ $code -eq 0 ] || failed=1
fi
if wants public; then
  stamp "=== public (${SECONDS}s)"
  [ -f "$out/verification.md" ] || cp "$root/docs/verification.md" "$out/verification.md"
  timeout 500 python3 "$root/scripts/public_solutions.py" --device "$device" --jobs "${KGEN_MATRIX_JOBS:-4}" \
    --out "$out/verification.md" > "$work/public.txt" 2>&1
  code=$?
  record "public_solutions.py" "exit $code" "$(tail -3 "$work/public.txt" | tr '\n' ' ' | cut -c1-300)"
  [ $code -eq 0 ] || failed=1
fi
if wants throughput && [ "$device" != cpu ]; then
  stamp "=== throughput (${SECONDS}s)"
  timeout 560 python3 "$root/scripts/eval_throughput.py" --problems rmsnorm_backward softmax swiglu layernorm_forward \
    --n 8 --modes batch --json-dir "$work/throughput" --out "$out/throughput.md" > "$work/throughput.txt" 2>&1
  code=$?
  record "eval_throughput.py (4 problems x 8, batch)" "exit $code" "$(grep -E 'per GPU-minute' "$work/throughput.txt" | tail -1)"
  [ $code -eq 0 ] || failed=1
fi
if wants main24; then
  stamp "=== main24 (${SECONDS}s)"
  budget=(--budget 24)
  [ "$device" = cpu ] && budget=(--budget 2)
  for attempt in 1 2; do
    begun=$SECONDS
    timeout 560 python3 -m kgen.cli "Triton RMSNorm backward for H100" "${budget[@]}" --device "$device" \
      --out "$work/main24_$attempt" > "$work/main24_$attempt.txt" 2>&1
    code=$?
    wall=$((SECONDS - begun))
    line=$(python3 - "$work/main24_$attempt/summary.json" "$wall" <<'PY' 2>&1
import json, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[2])
print(f"{s['candidates']} candidates ({s['passed']} passed) in {wall:.0f} s: {60 * s['candidates'] / wall:.1f} per minute "
      f"end to end; stop: {s['stop_reason']}")
PY
)
    record "kgen \"Triton RMSNorm backward for H100\" ${budget[*]} (run $attempt)" "exit $code" "$line; $(grep -E 'best for h100|not repeated|verified at full' "$work/main24_$attempt.txt" | tail -2 | tr '\n' ' ' | cut -c1-200)"
    [ $code -eq 0 ] || failed=1
  done
fi
if wants scale && [ "$device" != cpu ]; then
  for phase in agent full_size; do
    stamp "=== scale $phase (${SECONDS}s)"
    timeout 420 bash "$root/scripts/gpu_scale.sh" "$phase" "$work/scale_$phase" > "$work/scale_$phase.txt" 2>&1
    code=$?
    cp "$work/scale_$phase"/*.md "$out/" 2>/dev/null
    record "gpu_scale.sh $phase" "exit $code" "$(grep -E 'exit|passed|flag' "$work/scale_$phase.txt" | tail -4 | tr '\n' ' ' | cut -c1-300)"
    [ $code -eq 0 ] || failed=1
  done
fi
tar -czf "$out/work.tar.gz" --exclude=home -C "$work" . 2>> "$log"

[ "$device" = cpu ] || nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1 | tee -a "$log"  # nothing may be left
stamp "done in $((SECONDS - started)) s, exit $failed"
cat "$summary"
exit $failed
