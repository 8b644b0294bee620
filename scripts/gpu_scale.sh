#!/usr/bin/env bash
# On a GPU machine with kgen installed: the evaluation engine at real scale, one phase per call
# (each fits a 10-minute window; the self-test resumes where the last call stopped).
#
# Usage: scripts/gpu_scale.sh PHASE OUTDIR [SECONDS]
#   throughput  candidates per GPU-minute on four memory-bound catalog problems (batch mode)
#   full_size   kgen's own solutions for unmodified KernelBench files at full size
#   agent       the offline main command on three catalog problems, then their timing verdicts
#   self_test   the 15 largest KernelBench problems and 25 more, reference as candidate, for
#               SECONDS (default 540) at most; run it again into the same OUTDIR to continue
#               (every visible GPU, a lane each: the local executor's default)
#   scale_local candidates per minute at 1, 2 and 4 GPUs with the local executor (all_problems mode)
#   scale_ray   the same with Ray: a head started here on every GPU (Ray on PATH: .big*/activate),
#               then the offline main command with --executor ray; the head is stopped by its pid
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
phase=${1:?usage: gpu_scale.sh PHASE OUTDIR [SECONDS]}
out=$(mkdir -p "${2:?usage: gpu_scale.sh PHASE OUTDIR [SECONDS]}" && cd "$2" && pwd)
seconds=${3:-540}
export KGEN_HOME="$out/home"
cd /tmp  # never import kgen from the source tree's kgen/ folder
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
case "$phase" in
  throughput)
    python3 "$root/scripts/eval_throughput.py" --problems rmsnorm_backward softmax swiglu layernorm_forward \
      --n 8 --modes batch --json-dir "$out/throughput" --out "$out/throughput.md"
    ;;
  full_size)
    python3 "$root/scripts/kernelbench_full_size.py" --timeout 400 --json-dir "$out/full_size" --out "$out/full_size.md" \
      --only 47_Sum_reduction_over_a_dimension 24_LogSoftmax 25_Swish 26_GELU_ 38_L1Norm_
    ;;
  agent)
    i=0
    for request in "Triton RMSNorm backward for H100" "Triton softmax for H100" "Triton LayerNorm forward for H100"; do
      i=$((i + 1))
      python3 -m kgen.cli "$request" --budget 6 --generations 2 --out "$out/run_$i"
      echo "exit $?"
    done
    python3 "$root/scripts/sync_ratios.py" "$out"/run_* --out "$out/sync_ratios.md"
    echo "sync_ratios exit $?"
    ;;
  self_test)
    [ -d "$out/selection" ] || python3 "$root/scripts/self_test_selection.py" "$out/selection"
    timeout -s TERM "$seconds" python3 -m kgen.cli bench --self-test "$out/selection" --device cuda \
      --out "$out/self_test" --timeout 400
    echo "exit $? (124: stopped at the time limit; run again to continue)"
    ;;
  scale_local)
    timeout -s INT "$seconds" python3 "$root/scripts/eval_throughput.py" \
      --problems rmsnorm_backward softmax swiglu layernorm_forward --n 8 --modes all_problems --gpus 1 2 4 \
      --executor local --warmup --json-dir "$out/scale_local" --out "$out/scale_local.md"
    echo "exit $?"
    ;;
  scale_ray)
    export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
    gpus=$(nvidia-smi -L | wc -l)
    setsid ray start --head --block --port=6390 --node-ip-address=127.0.0.1 --num-gpus="$gpus" \
      --include-dashboard=false --disable-usage-stats --temp-dir=/tmp/kgen-ray > "$out/ray_head.log" 2>&1 &
    head=$!
    for _ in $(seq 60); do
      python3 -c "import ray; ray.init(address='127.0.0.1:6390', logging_level='ERROR'); print(ray.cluster_resources())" \
        2>/dev/null && break
      sleep 2
    done
    timeout -s INT "$seconds" python3 "$root/scripts/eval_throughput.py" \
      --problems rmsnorm_backward softmax swiglu layernorm_forward --n 8 --modes all_problems --gpus 1 2 4 \
      --executor ray --ray-address 127.0.0.1:6390 --warmup --json-dir "$out/scale_ray" --out "$out/scale_ray.md"
    echo "exit $?"
    timeout -s INT 150 python3 -m kgen.cli "Triton softmax for H100" --executor ray --ray-address 127.0.0.1:6390 \
      --budget 8 --generations 1 --out "$out/ray_run"
    echo "main command exit $?"
    kill -TERM "$head"; wait "$head"
    ;;
  *)
    echo "unknown phase: $phase (throughput, full_size, agent, self_test, scale_local, scale_ray)" >&2
    exit 2
    ;;
esac
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader  # nothing may be left
