#!/usr/bin/env bash
# The worker gate's cost from isolation on the H200 (issue 10): the tiny NVFP4 engine rendered for the h200,
# gated against itself twice (static, quick parity, decode-bs1 A/B, 3 rounds) at namespace isolation and once
# at process isolation. Prints a table: per stage seconds, and each worker's start-up (spawn to imports
# done), which is what running engines out of the judge's process adds. Results under $OUT. About 5 min.
set -uo pipefail
source scripts/h200/env.sh
metainfer checkpoint --model qwen3.6-35b-a3b-tiny --quant nvfp4 --out /tmp/tck --seed 0 > /dev/null
metainfer render --model qwen3.6-35b-a3b-tiny --quant nvfp4 --gpu h200 --out /tmp/tg --force > /dev/null
E=/tmp/tg/qwen3.6-35b-a3b-tiny-nvfp4-h200
for run in namespace-1 namespace-2 process-1; do
  iso=${run%-*}
  s=$(date +%s.%N)
  timeout 500 python3 -m harness.gate --engine $E --baseline $E --checkpoint /tmp/tck --gpu h200 --isolation $iso \
    --stages static,parity,bench --parity-lengths 1,17,65 --parity-steps 4 --workloads decode-bs1 --rounds 3 --seed 5 \
    --json "$OUT/gate-$run.json" > "$OUT/gate-$run.log" 2>&1
  echo "$run rc $? wall $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s"
done
python3 - "$OUT" <<'PY'
import json, sys, pathlib
print(f"{'run':<14}{'static s':>10}{'parity s':>10}{'bench s':>10}  worker starts s (static | parity | bench)")
for p in sorted(pathlib.Path(sys.argv[1]).glob("gate-*.json")):
    r = json.loads(p.read_text())
    st = {s["name"]: s["seconds"] for s in r["stages"]}
    ws = r.get("timings", {}).get("worker_start_s", {})
    print(f"{p.stem[5:]:<14}{st.get('static', 0):>10.1f}{st.get('parity', 0):>10.1f}{st.get('bench', 0):>10.1f}  "
          f"{ws.get('static')} | {ws.get('parity')} | {ws.get('bench')}  ok={r['ok']} {r.get('verdict')}")
PY
