#!/usr/bin/env bash
# On a GPU machine: the fast library ([M]) tuned, verified and benchmarked, in steps spread
# over back-to-back calls of the lent machine (what each step costs on an H100 in brackets).
#
#   setup    installs the carried wheels into $HOME/kgen-lib/site, kept while the machine stays
#            warm (.whl-lib/: kgen, pydantic and Liger-Kernel; .whl-q/: quack-kernels and its two
#            helpers; .whl-agent/: what the main command adds, Chroma and LangGraph; .whl/: all
#            of it, where one call may carry it), so a call carries only what is new; leaves CuTe
#            DSL's part 1 ($HOME/kgen-cute) when the call carries .cute1 (30 s)
#   sweep    scripts/library_sweep.py over the seeds waiting in seed_kernels_unverified/triton:
#            kgen's sweep operator at three shapes each (KGEN_SWEEP_POINTS points, default 8;
#            ends by KGEN_SWEEP_DEADLINE seconds, default 420) (7 min)
#   bench    `kgen bench --device cuda --small` over the whole catalog with the shipped seeds
#            and the swept ones: verified (small and extra sizes), timed at the default sizes
#            beside eager / torch.compile / Liger / quack (CuTe DSL from .cute2) (5 min)
#   verify   each swept seed and each CuTe seed waiting through `kgen eval --device cuda` at the
#            full sizes, four at a time (verification only: no timing shares the GPU) (3 min)
#   cute     `kgen bench --backend cute --small` over the shipped CuTe seeds and those waiting
#            in seed_kernels_unverified/cute (KGEN_CUTE_NEW_ONLY=1: those waiting only) (3 min)
#   shapes   the library's problems at a small and a large hidden size or vocabulary
#            (scripts/library_shapes.py), verified at small sizes, timed with the same baselines
#            (4 min); KGEN_SHAPES_VERIFY=1: each shape verified at its own sizes too (3 min)
#   attention  [O]: scripts/attention_anchors.py, SDPA's backends one at a time, flash-attn-4 (where
#            installed) and kgen's causal attention kernels (the new Triton seed, any CuTe one) at the
#            catalog's size and sequence lengths 512, 8192 and 3001 (3 min)
#   offline  the swept seeds that passed `bench` become the knowledge base's seeds (evidence
#            from bench's results), then the README's main command offline for each new
#            problem (needs .whl/: the knowledge base is Chroma) (3 min)
#
# Usage: scripts/gpu_library.sh OUT STEP...   OUT gets log.txt and one archive per step
# (OUT/<step>.tgz, paths relative to $HOME/kgen-lib).
# KGEN_LIBRARY_PROBLEMS limits sweep, bench, verify and shapes to those problems (bench: a suite of
# those catalog files); KGEN_OFFLINE_REQUESTS (';'-separated) are the offline step's requests; KGEN_VERIFY_JOBS sets how
# many verifications share the GPU (default 4). KGEN_CHECK_DEVICE=cpu runs the same steps on a CPU
# (the sweep --dry, bench and eval through the interpreter): a smoke test of the script.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: gpu_library.sh OUT [setup|sweep|bench|verify|cute|shapes|attention|offline]..."
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "$usage" >&2; exit 2; }
shift
for step in "$@"; do case "$step" in setup|sweep|bench|verify|cute|shapes|attention|offline) ;; *) echo "$usage" >&2; exit 2 ;; esac; done
device=${KGEN_CHECK_DEVICE:-cuda}
problems=${KGEN_LIBRARY_PROBLEMS:-}
lib=${KGEN_LIBRARY_HOME:-$HOME/kgen-lib}
mkdir -p "$lib"
log="$out/log.txt"
stamp() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
: >> "$log"

install_wheels() {
  local folder
  for folder in .whl-lib .whl-q .whl-agent .whl; do
    if ls "$root/$folder"/*.whl > /dev/null 2>&1; then
      stamp "installing $(ls "$root/$folder"/*.whl | wc -l) wheel(s) from $folder into $lib/site"
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$lib/site" \
        "$root/$folder"/*.whl 2>&1 | tail -3 | tee -a "$log"
    fi
  done
}
if [ "$device" = cpu ]; then
  stamp "CPU smoke test: the python3 on PATH as it is, no wheels, no CuTe DSL"
elif [ -f "$root/.cute1/p1.tar.xz" ]; then
  mkdir -p "$HOME/kgen-cute" && cp "$root/.cute1/p1.tar.xz" "$HOME/kgen-cute/" && stamp "CuTe DSL part 1 left in $HOME/kgen-cute"
fi
[ "$device" = cpu ] || install_wheels
export PYTHONPATH=$lib/site${PYTHONPATH:+:$PYTHONPATH} PATH=$lib/site/bin:$PATH PYTHONUNBUFFERED=1
if [ "$device" != cpu ] && [ -f "$root/.cute2/activate" ]; then
  pushd "$root" > /dev/null || exit 3
  . .cute2/activate >> "$log" 2>&1 && stamp "CuTe DSL activated" || stamp "CuTe DSL not activated (make the call that carries .cute1 first)"
  popd > /dev/null || exit 3
fi
export KGEN_HOME=$lib/home
cd /tmp  # never import kgen from the source tree's kgen/ folder
python3 -c "import kgen, torch, triton; print('kgen', kgen.__file__, '| torch', torch.__version__, '| triton', triton.__version__)" 2>&1 | tee -a "$log" || exit 3
python3 -c "import liger_kernel, importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'))" 2>&1 | tail -1 | tee -a "$log"
python3 -c "import quack, importlib.metadata as m; print('quack-kernels', m.version('quack-kernels'))" 2>&1 | tail -1 | tee -a "$log"
[ "$device" = cpu ] || nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | tee -a "$log"

# OUT/<step>.tgz: what a step made, relative to $lib (a device call returns few files, so one each)
keep() {
  local name=$1; shift
  (cd "$lib" && tar czf "$out/$name.tgz" "$@" 2>> "$log") && stamp "kept $out/$name.tgz"
}

# the new Triton seeds: those waiting in seed_kernels_unverified, each replaced by its swept
# version where this machine's sweep made one
new_seeds() {
  local dir=$lib/new_triton
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$root"/knowledge_base/seed_kernels_unverified/triton/*.py "$dir/" 2> /dev/null
  cp "$lib"/sweep/swept/*.py "$dir/" 2> /dev/null
  echo "$dir"
}

# the candidates: the shipped seeds, overridden by the new ones
candidates() {
  local dir=$lib/candidates new
  new=$(new_seeds)
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$root"/knowledge_base/seed_kernels/triton/*.py "$dir/"
  cp "$new"/*.py "$dir/" 2> /dev/null
  echo "$dir"
}

for step in "$@"; do
  stamp "== $step"
  case "$step" in
    setup) ;;
    sweep)
      dry=(); [ "$device" = cpu ] && dry=(--dry)
      # shellcheck disable=SC2086  # the problems are words
      timeout $(( ${KGEN_SWEEP_DEADLINE:-420} + 150 )) python3 "$root/scripts/library_sweep.py" --out "$lib/sweep" \
        --points "${KGEN_SWEEP_POINTS:-8}" --deadline-s "${KGEN_SWEEP_DEADLINE:-420}" --compile-jobs 14 "${dry[@]}" \
        ${problems:+--problems $problems} 2>&1 | tee -a "$log"
      stamp "sweep exit ${PIPESTATUS[0]}"
      keep sweep sweep/swept sweep/sweep.md sweep/sweep.json
      ;;
    bench)
      dir=$(candidates)
      suite=()
      if [ -n "$problems" ]; then  # a suite of those catalog problems only
        rm -rf "$lib/suite" && mkdir -p "$lib/suite"
        for name in $problems; do
          python3 -c "import shutil,sys; from kgen.evals.problem.catalog import resolve_problem as r; shutil.copy(r(sys.argv[1]).path, sys.argv[2])" \
            "$name" "$lib/suite/" 2>&1 | tee -a "$log"
        done
        suite=("$lib/suite")
      fi
      timeout 570 python3 -m kgen.cli bench "${suite[@]}" --device "$device" --small --candidates "$dir" --out "$lib/bench_h100" \
        --timeout 240 2>&1 | tee -a "$log"
      stamp "bench exit ${PIPESTATUS[0]}"
      keep bench bench_h100/suite.md bench_h100/suite.json bench_h100/suite.svg bench_h100/results
      ;;
    verify)
      mkdir -p "$lib/verify"
      for f in "$(new_seeds)"/*.py "$root"/knowledge_base/seed_kernels_unverified/cute/*.py; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .py)
        [ -z "$problems" ] || [[ " $problems " == *" $name "* ]] || continue
        backend=triton; case "$f" in */cute/*) backend=cute ;; esac
        echo "$name $f $backend"
      done | xargs -P "${KGEN_VERIFY_JOBS:-4}" -L 1 sh -c 'timeout 400 python3 -m kgen.cli eval "$0" "$1" --backend "$2" --device '"$device"' \
          --target h100 --json > '"$lib"'/verify/eval_$2_$0.json 2>> '"$lib"'/verify/stderr_$2_$0.txt; echo "$2 $0: exit $?"' \
          2>&1 | tee -a "$log"
      for j in "$lib"/verify/eval_*.json; do
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['problem'], r['verdict'], r.get('rejection') or r.get('inconclusive') or '', len(r['trials']), 'trials', round(r['seconds']), 's:', r['reason'][:150])" "$j" 2>&1 | tee -a "$log"
      done
      keep verify verify
      ;;
    cute)
      dir=$lib/candidates_cute
      rm -rf "$dir" && mkdir -p "$dir"
      [ -n "${KGEN_CUTE_NEW_ONLY:-}" ] || cp "$root"/knowledge_base/seed_kernels/cute/*.py "$dir/"
      cp "$root"/knowledge_base/seed_kernels_unverified/cute/*.py "$dir/" 2> /dev/null
      timeout 570 python3 -m kgen.cli bench --backend cute --device "$device" --small --candidates "$dir" \
        --out "$lib/bench_h100_cute" --timeout 240 2>&1 | tee -a "$log"
      stamp "cute exit ${PIPESTATUS[0]}"
      keep cute bench_h100_cute/suite.md bench_h100_cute/suite.json bench_h100_cute/results
      ;;
    shapes)
      rm -rf "$lib/shapes"
      # shellcheck disable=SC2086  # the problems are words
      python3 "$root/scripts/library_shapes.py" --out "$lib/shapes" --seeds "$(candidates)" \
        ${problems:+--problems $problems} 2>&1 | tee -a "$log"
      timeout 570 python3 -m kgen.cli bench "$lib/shapes/problems" --candidates "$lib/shapes/candidates" --device "$device" \
        --small --out "$lib/bench_shapes" --timeout 180 2>&1 | tee -a "$log"
      stamp "shapes exit ${PIPESTATUS[0]}"
      if [ -n "${KGEN_SHAPES_VERIFY:-}" ]; then  # each shape verified at its own (full) sizes too
        mkdir -p "$lib/bench_shapes/full"
        for f in "$lib"/shapes/problems/*.py; do echo "$(basename "$f" .py)"; done \
          | xargs -P "${KGEN_VERIFY_JOBS:-4}" -I{} sh -c 'timeout 400 python3 -m kgen.cli eval '"$lib"'/shapes/problems/{}.py \
              '"$lib"'/shapes/candidates/{}.py --device '"$device"' --target h100 --json \
              > '"$lib"'/bench_shapes/full/eval_{}.json 2> '"$lib"'/bench_shapes/full/stderr_{}.txt; echo "{}: exit $?"' \
          2>&1 | tee -a "$log"
        for j in "$lib"/bench_shapes/full/eval_*.json; do
          python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['problem'], r['verdict'], r.get('rejection') or r.get('inconclusive') or '', len(r['trials']), 'trials', round(r['seconds']), 's:', r['reason'][:150])" "$j" 2>&1 | tee -a "$log"
        done
      fi
      keep shapes bench_shapes/suite.md bench_shapes/suite.json bench_shapes/results bench_shapes/full
      ;;
    attention)
      cands=()
      for f in "$(new_seeds)/causal_attention_forward.py" "$root"/knowledge_base/seed_kernels*/cute/causal_attention_forward.py \
               "$root"/knowledge_base/seed_kernels/triton/causal_attention_forward.py; do
        [ -f "$f" ] && cands+=("$f")
      done
      mkdir -p "$lib/attention"
      dry=(); [ "$device" = cpu ] && dry=(--dry)
      timeout 560 python3 "$root/scripts/attention_anchors.py" "${dry[@]}" ${cands[@]:+--candidates "${cands[@]}"} \
        --out "$lib/attention/anchors.md" --json "$lib/attention/anchors.json" 2>&1 | tee -a "$log"
      stamp "attention exit ${PIPESTATUS[0]}"
      keep attention attention
      ;;
    offline)
      seeds=$(python3 -c "import kgen.knowledge_base as k; print(k.SEED_KERNELS_DIR / 'triton')")
      # on a CPU (the smoke test) the installed seeds stay as they are: no GPU evidence to give them
      if [ "$device" != cpu ]; then
        mkdir -p "$lib/verify_triton"
        for f in "$(new_seeds)"/*.py; do
          name=$(basename "$f" .py)
          python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['verdict'] != 'passed')" \
            "$lib/verify/eval_triton_$name.json" 2>/dev/null || continue
          cp "$f" "$seeds/" && cp "$lib/verify/eval_triton_$name.json" "$lib/verify_triton/eval_$name.json"
          stamp "seed $name: passed at full size here"
        done
        python3 "$root/scripts/seed_evidence.py" --seeds "$seeds" --runs "$lib/verify_triton" \
          --suite "$lib/bench_h100/suite.json" 2>&1 | tail -3 | tee -a "$log"
      fi
      IFS=';' read -r -a requests <<< "${KGEN_OFFLINE_REQUESTS:-Triton LayerNorm backward for H100;Triton cross-entropy backward for H100}"
      for request in "${requests[@]}"; do
        run=$lib/offline/$(echo "$request" | tr ' ' '_')
        mkdir -p "$run"
        timeout 170 python3 -m kgen.cli "$request" --budget 4 --generations 1 --device "$device" --out "$run/run" \
          > "$run/output.txt" 2>&1
        stamp "kgen \"$request\" --budget 4: exit $?: $(grep -iE 'best for|verified|no .* kernel' "$run/output.txt" | tail -2 | tr '\n' ' ' | cut -c1-240)"
      done
      keep offline offline
      ;;
  esac
done
stamp "done"
