#!/usr/bin/env bash
# The whole gate (static, parity, A/B bench with its fresh-worker replay) on the full-size engine against itself, on the
# H200: what a build's first iteration meets. An honest engine must come out green; the figures it leaves (greedy_self,
# the long decodes, replay_check.worst) are where the judge's newest bounds sit at full size. Before it, check_gate.sh
# (the same gate on the tiny engine, about 2 min) while the full-size checkpoint is written beside it (host work only).
#
#   bash scripts/h200/gate_full.sh start > $OUT/call1.log 2>&1   # never piped: the gate outlives the call
#   bash scripts/h200/gate_full.sh wait  > $OUT/call2.log 2>&1   # collect (up to CALL_LIMIT_S) while it runs
#
# TINY=0 skips check_gate.sh (about 5 min); STAGES (static,parity,bench) the gate's stages. PLEN (parity lengths; default a short set that keeps the 2,048-token chunk boundary and a 3-4k draw: the full GPU set
# takes about 13 min, docs/results/h200-2026-12-03-b), ROUNDS (3), CK, GEN. Leaves gate.json, gate.log, tiny_gate.*.
set -uo pipefail
START=$(date +%s)
LIMIT=${CALL_LIMIT_S:-560}
MODE=${1:?usage: gate_full.sh start|wait}
source scripts/h200/env.sh
export METAINFER_LOG=INFO
CK=${CK:-/tmp/ckpt}; GEN=${GEN:-/tmp/gen}; RES=/tmp/gatefull; mkdir -p "$RES"
E=$GEN/qwen3.6-35b-a3b-nvfp4-h200
collect() { cp "$RES"/gate.json "$RES"/gate.log "$RES"/tiny_gate.* "$OUT"/ 2>/dev/null; }
trap collect EXIT

if [ "$MODE" = start ]; then
  [ -f "$CK/model.safetensors.index.json" ] || python3 scripts/h200/full_run.py --steps checkpoint --ckpt "$CK" \
    --out "$RES" > "$RES/checkpoint.log" 2>&1 &
  ck=$!
  if [ "${TINY:-1}" = 1 ]; then
    OUT=$RES bash scripts/h200/check_gate.sh > "$RES/tiny_gate.log" 2>&1
    cp "$RES/gate.json" "$RES/tiny_gate.json" 2>/dev/null; rm -f "$RES/gate.json" "$RES/gate.log"
    echo "== tiny gate ($(( $(date +%s) - START )) s)"; tail -3 "$RES/tiny_gate.log"
  fi
  wait $ck; tail -2 "$RES/checkpoint.log"
  python3 scripts/h200/full_run.py --steps render --gen "$GEN" --out "$RES" --graph-batch "${GRAPH_BATCH:-64}" > "$RES/render.log" 2>&1 \
    || { tail -5 "$RES/render.log"; exit 1; }
  echo "== full-size gate starts at $(( $(date +%s) - START )) s"
  setsid nohup python3 -m harness.gate --engine "$E" --baseline "$E" --checkpoint "$CK" --gpu h200 \
    --stages "${STAGES:-static,parity,bench}" --parity-lengths "${PLEN:-1,17,65,257,1025,2049}" --rounds "${ROUNDS:-3}" \
    --json "$RES/gate.json" > "$RES/gate.out" 2> "$RES/gate.log" < /dev/null &
  echo $! > /tmp/gatefull.pid
fi

wait_bg /tmp/gatefull.pid || true
grep -E "stage|parity|bench|replay|greedy|long|consistency" "$RES/gate.log" | tail -25
[ -f "$RES/gate.json" ] && python3 - "$RES/gate.json" <<'EOF2'
import json, sys
r = json.load(open(sys.argv[1]))
print({k: v for k, v in r.items() if not isinstance(v, (dict, list))})
for s in r.get("stages", []):
    print({k: (str(v)[:300]) for k, v in s.items() if k != "detail"})
print("bench", str(r.get("bench"))[:1500])
EOF2
