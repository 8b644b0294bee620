#!/usr/bin/env bash
# On a GPU machine: the delivery check (scripts/deliver_check.py) at one model size, as back-to-back
# calls of the lent machine can run it: every call installs the carried wheels once per machine
# (.whl/: kgen's own wheel and pydantic; the image has torch, triton and transformers), then runs
# the phases asked for into OUT, which keeps deliver.json between calls (a later call adds its
# phases to it).
#
# Usage: scripts/gpu_deliver.sh OUT SIZE [deliver_check.py arguments...]
#   e.g.  scripts/gpu_deliver.sh "$OUT/100m" 100m --steps 300 --phases verify export decide
#         scripts/gpu_deliver.sh "$OUT/100m" 100m --steps 300 --phases compile train
# The work folder is /tmp/kgen-deliver/SIZE, kept while the machine stays warm, so a later call
# finds the package and the earlier phases' deliver.json there; on a fresh machine they come from
# .deliver-carry/SIZE/ (package.tgz and deliver.json of an earlier call, carried with the call).
# OUT gets the small files: deliver.json, deliver.md, decide.md, profile.md, loss_curves.svg,
# log.txt and package.tgz (the package and the verified seeds, to carry to a later call).
# Exit code: deliver_check.py's (0 every expectation held, 1 not), 2 usage, 3 set-up.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { echo "usage: gpu_deliver.sh OUT SIZE [deliver_check.py arguments...]" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd) || exit 2
size=$2
shift 2
work=/tmp/kgen-deliver/$size
mkdir -p "$work"
log="$work/log.txt"
stamp() { echo "$(date +%H:%M:%S) $*" | tee -a "$log"; }
site=/tmp/kgen-deliver-site
if ls "$root"/.whl/*.whl > /dev/null 2>&1; then
  wheels=$(cd "$root/.whl" && ls -l *.whl | md5sum | cut -d' ' -f1)
  if [ "$(cat "$site/.wheels" 2>/dev/null)" != "$wheels" ]; then
    stamp "installing $(ls "$root"/.whl/*.whl | wc -l) carried wheel(s)"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "$root"/.whl/*.whl 2>&1 | tail -3 | tee -a "$log"
    echo "$wheels" > "$site/.wheels"
  fi
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export KGEN_HOME=/tmp/kgen-deliver-home TORCHINDUCTOR_CACHE_DIR=/tmp/kgen-deliver-inductor
carried=$root/.deliver-carry/$size
if [ ! -d "$work/package" ] && [ -f "$carried/package.tgz" ]; then
  tar -xzf "$carried/package.tgz" -C "$work" && stamp "unpacked the carried package"
fi
[ -f "$work/deliver.json" ] || cp "$carried/deliver.json" "$work/" 2>/dev/null || true
cd /tmp  # never import kgen from the source tree
python3 -c "import kgen, torch, triton, transformers; print('kgen', kgen.__version__, '| torch', torch.__version__, \
'| triton', triton.__version__, '| transformers', transformers.__version__)" 2>&1 | tee -a "$log" \
  || { stamp "kgen does not import"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | tee -a "$log"
keep() {  # the small files into OUT: after every phase (a call cut off by its limit keeps what it did)
  for f in deliver.json deliver.md decide.md profile.md loss_curves.svg log.txt; do
    [ -f "$work/$f" ] && cp "$work/$f" "$out/"
  done
  for f in "$work"/verified/eval_*.json; do [ -f "$f" ] && mkdir -p "$out/verified" && cp "$f" "$out/verified/"; done
}
( while sleep 10; do keep; done ) & keeper=$!
stamp "deliver_check --size $size $*"
# KGEN_DELIVER_LIMIT_S: end deliver_check itself this long after it started (0: no limit), leaving
# the call's remaining seconds for packing what it did
timeout "${KGEN_DELIVER_LIMIT_S:-0}" python3 "$root/scripts/deliver_check.py" --out "$work" --size "$size" "$@" \
  2>&1 | tee -a "$log"
code=${PIPESTATUS[0]}
kill "$keeper" 2>/dev/null
stamp "exit $code"
parts=$(cd "$work" && ls -d package verified 2>/dev/null)
[ -n "$parts" ] && tar -czf "$out/package.tgz" -C "$work" $parts
keep
exit "$code"
