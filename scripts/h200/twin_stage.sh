#!/usr/bin/env bash
# The gate's twin stage on the H200, first run (docs/PARITY.md, "A float32 twin pass"): the full-size engine
# ($E) on the full-size synthetic checkpoint, stages parity-free so only the twin runs: the checkpoint
# cut to one layer period, the twin render with the engine's files carried, float32 reference, the GPU set plus
# one prompt in [12,000, 16,000]. Then the same stage on the engine with rope_slow_pairs_dropped applied (killed
# on the twin by hand in docs/results/h200-2026-12-03-c; must be red here).
#
#   RUNS=honest bash scripts/h200/twin_stage.sh > $OUT/twin.log 2>&1   # one device call each: a gate takes
#   RUNS=rope bash scripts/h200/twin_stage.sh > $OUT/twin.log 2>&1     # about 5 min, a call at most 10
#
# Leaves $OUT/twin_honest.json, $OUT/twin_rope.json (gate JSONs) and the stage lines. About 135 s for the checkpoint
# (unless at $CK), then about 6 min per gate (honest: 359 s on 2026-12-04, docs/results/h200-2026-12-04/twin).
set -uo pipefail
source scripts/h200/env.sh
export METAINFER_LOG=INFO
CK=${CK:-/tmp/ck-qwen3.6-35b-a3b-nvfp4}
# E: the engine (default: the template rendered into /tmp/gen, as serve_session.sh does; generated/ predates the render
# record engine/rendered_for.json that the twin needs, so it is refused there)
E=${E:-/tmp/gen/qwen3.6-35b-a3b-nvfp4-h200}
[ -f "$E/engine/rendered_for.json" ] || python3 scripts/h200/full_run.py --steps render --gen "$(dirname "$E")" --out "$OUT" || exit 1
[ -f "$CK/model.safetensors.index.json" ] || metainfer checkpoint --model qwen3.6-35b-a3b --quant nvfp4 --out "$CK" \
  --seed 1234 --force > /tmp/ck.log 2>&1 || { tail -5 /tmp/ck.log; exit 1; }
python3 - "$E" /tmp/rope <<'PY'
import sys
from pathlib import Path
from metainfer.mutants.catalogue import by_name
from metainfer.mutants.runner import apply_mutant
src = Path(sys.argv[1])
apply_mutant(by_name("rope_slow_pairs_dropped"), src, Path(sys.argv[2]) / src.name)
PY
for run in honest:$E rope:/tmp/rope/qwen3.6-35b-a3b-nvfp4-h200; do
  name=${run%%:*}; eng=${run#*:}
  case ",${RUNS:-honest,rope}," in *",$name,"*) ;; *) continue;; esac
  t0=$(date +%s)
  twin=$(python3 -c "import sys; from pathlib import Path; from metainfer.twin import make_twin; print(make_twin(Path(sys.argv[1]), 1)[1])" "$eng") || exit 1
  timeout 560 python3 -m harness.gate --engine "$eng" --twin-engine "$twin" --checkpoint "$CK" --gpu h200 --stages twin --seed 7 \
    --json "$OUT/twin_$name.json" 2> "$OUT/twin_$name.log"
  echo "$name: gate rc $? in $(( $(date +%s) - t0 )) s"
  python3 -c "import json,sys; g=json.load(open(sys.argv[1])); print([(s['name'], s['verdict'], round(s['seconds'],1), s['error']) for s in g['stages']])" "$OUT/twin_$name.json"
  grep "harness.parity" "$OUT/twin_$name.log" | tail -4
done
