#!/usr/bin/env bash
# On a GPU machine: the fast library ([M]) tuned, verified and benchmarked, in steps spread
# over back-to-back calls of the lent machine (what each step costs on an H100 in brackets).
#
#   setup    installs the carried wheels (.whl-lib/: kgen and the few packages `kgen bench`
#            needs, Liger-Kernel, quack-kernels and its two helpers; or .whl/, everything) into
#            $HOME/kgen-lib/site, kept while the machine stays warm; leaves CuTe DSL's part 1
#            ($HOME/kgen-cute) when the call carries .cute1 (30 s)
#   sweep    scripts/library_sweep.py over the seeds waiting in seed_kernels_unverified/triton:
#            kgen's sweep operator at three shapes each (KGEN_SWEEP_POINTS points, default 8;
#            ends by KGEN_SWEEP_DEADLINE seconds, default 420) (7 min)
#   bench    `kgen bench --device cuda` over the whole catalog with the shipped seeds and the
#            swept ones, whole verification at the default sizes, eager / torch.compile / Liger /
#            quack beside each kernel (CuTe DSL from .cute2) (6-8 min)
#   shapes   the library's problems at a small and a large hidden size or vocabulary
#            (scripts/library_shapes.py), verified at small sizes, timed with the same baselines
#            (4 min)
#   offline  the swept seeds that passed `bench` become the knowledge base's seeds (evidence
#            from bench's results), then the README's main command offline for each new
#            problem (needs .whl/: the knowledge base is Chroma) (3 min)
#
# Usage: scripts/gpu_library.sh OUT STEP...   OUT gets each step's outputs and log.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: gpu_library.sh OUT [setup|sweep|bench|shapes|offline]..."
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "$usage" >&2; exit 2; }
shift
for step in "$@"; do case "$step" in setup|sweep|bench|shapes|offline) ;; *) echo "$usage" >&2; exit 2 ;; esac; done
lib=$HOME/kgen-lib
mkdir -p "$lib"
log="$out/log.txt"
stamp() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
: >> "$log"

install_wheels() {
  local folder
  for folder in .whl-lib .whl; do
    if ls "$root/$folder"/*.whl > /dev/null 2>&1; then
      stamp "installing $(ls "$root/$folder"/*.whl | wc -l) wheel(s) from $folder into $lib/site"
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$lib/site" \
        "$root/$folder"/*.whl 2>&1 | tail -3 | tee -a "$log"
    fi
  done
}
if [ -f "$root/.cute1/p1.tar.xz" ]; then
  mkdir -p "$HOME/kgen-cute" && cp "$root/.cute1/p1.tar.xz" "$HOME/kgen-cute/" && stamp "CuTe DSL part 1 left in $HOME/kgen-cute"
fi
install_wheels
export PYTHONPATH=$lib/site${PYTHONPATH:+:$PYTHONPATH} PATH=$lib/site/bin:$PATH PYTHONUNBUFFERED=1
if [ -f "$root/.cute2/activate" ]; then
  pushd "$root" > /dev/null || exit 3
  . .cute2/activate >> "$log" 2>&1 && stamp "CuTe DSL activated" || stamp "CuTe DSL not activated (make the call that carries .cute1 first)"
  popd > /dev/null || exit 3
fi
export KGEN_HOME=$lib/home
cd /tmp  # never import kgen from the source tree's kgen/ folder
python3 -c "import kgen, torch, triton; print('kgen', kgen.__file__, '| torch', torch.__version__, '| triton', triton.__version__)" 2>&1 | tee -a "$log" || exit 3
python3 -c "import liger_kernel, importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'))" 2>&1 | tail -1 | tee -a "$log"
python3 -c "import quack, importlib.metadata as m; print('quack-kernels', m.version('quack-kernels'))" 2>&1 | tail -1 | tee -a "$log"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | tee -a "$log"

# the candidates: the shipped seeds, overridden by the swept (else the waiting) ones
candidates() {
  local dir=$lib/candidates
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$root"/knowledge_base/seed_kernels/triton/*.py "$dir/"
  if ls "$lib"/sweep/swept/*.py > /dev/null 2>&1; then cp "$lib"/sweep/swept/*.py "$dir/"
  else cp "$root"/knowledge_base/seed_kernels_unverified/triton/*.py "$dir/" 2> /dev/null; fi
  echo "$dir"
}

for step in "$@"; do
  stamp "== $step"
  case "$step" in
    setup) ;;
    sweep)
      timeout $(( ${KGEN_SWEEP_DEADLINE:-420} + 150 )) python3 "$root/scripts/library_sweep.py" --out "$lib/sweep" \
        --points "${KGEN_SWEEP_POINTS:-8}" --deadline-s "${KGEN_SWEEP_DEADLINE:-420}" --compile-jobs 14 2>&1 | tee -a "$log"
      stamp "sweep exit ${PIPESTATUS[0]}"
      mkdir -p "$out/sweep" && cp -r "$lib/sweep/swept" "$lib/sweep/sweep.md" "$lib/sweep/sweep.json" "$out/sweep/" 2>> "$log"
      ;;
    bench)
      dir=$(candidates)
      timeout 570 python3 -m kgen.cli bench --device cuda --candidates "$dir" --out "$lib/bench_h100" --timeout 240 2>&1 | tee -a "$log"
      stamp "bench exit ${PIPESTATUS[0]}"
      mkdir -p "$out/bench_h100" && cp -r "$lib"/bench_h100/suite.* "$lib/bench_h100/results" "$out/bench_h100/" 2>> "$log"
      ;;
    shapes)
      rm -rf "$lib/shapes"
      python3 "$root/scripts/library_shapes.py" --out "$lib/shapes" --seeds "$(candidates)" 2>&1 | tee -a "$log"
      timeout 570 python3 -m kgen.cli bench "$lib/shapes/problems" --candidates "$lib/shapes/candidates" --device cuda \
        --small --out "$lib/bench_shapes" --timeout 180 2>&1 | tee -a "$log"
      stamp "shapes exit ${PIPESTATUS[0]}"
      mkdir -p "$out/bench_shapes" && cp -r "$lib"/bench_shapes/suite.* "$lib/bench_shapes/results" "$out/bench_shapes/" 2>> "$log"
      ;;
    offline)
      seeds=$(python3 -c "import kgen.knowledge_base as k; print(k.SEED_KERNELS_DIR / 'triton')")
      for f in "$lib"/sweep/swept/*.py; do
        name=$(basename "$f" .py)
        python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['verdict'] != 'passed')" \
          "$lib/bench_h100/results/$name.json" 2>/dev/null && cp "$f" "$seeds/" && stamp "seed $name: passed on this GPU"
      done
      python3 "$root/scripts/seed_evidence.py" --seeds "$seeds" --runs "$lib/bench_h100/results" \
        --suite "$lib/bench_h100/suite.json" 2>&1 | tail -3 | tee -a "$log"
      for request in "Triton LayerNorm backward for H100" "Triton cross-entropy backward for H100" \
                     "Triton fused embedding RMSNorm backward for H100"; do
        timeout 170 python3 -m kgen.cli "$request" --budget 4 --generations 1 --device cuda --out "$lib/offline/$(echo "$request" | tr ' ' '_')" \
          > "$lib/offline.txt" 2>&1
        stamp "kgen \"$request\" --budget 4: exit $?: $(grep -iE 'best for|verified|no .* kernel' "$lib/offline.txt" | tail -2 | tr '\n' ' ' | cut -c1-240)"
      done
      ;;
  esac
done
stamp "done"
