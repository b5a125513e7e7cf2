#!/usr/bin/env bash
# The worker gate's cost from isolation on the H200 (issue 10), about 150 s: the tiny NVFP4 engine rendered for
# the h200, gated against itself at namespace and at process isolation (static, quick parity, decode-bs1 A/B,
# 2 rounds), then the Triton compile cost every worker pays with its private cache: one engine load with a cold
# cache and one with the same (warm) cache, in a plain process. Prints one table; files under $OUT.
set -uo pipefail
source scripts/h200/env.sh
metainfer checkpoint --model qwen3.6-35b-a3b-tiny --quant nvfp4 --out /tmp/tck --seed 0 > /dev/null
metainfer render --model qwen3.6-35b-a3b-tiny --quant nvfp4 --gpu h200 --out /tmp/tg --force > /dev/null
E=/tmp/tg/qwen3.6-35b-a3b-tiny-nvfp4-h200
for iso in namespace process; do
  s=$(date +%s.%N)
  timeout 200 python3 -m harness.gate --engine $E --baseline $E --checkpoint /tmp/tck --gpu h200 --isolation $iso \
    --stages static,parity,bench --parity-lengths 1,17,65 --parity-steps 4 --workloads decode-bs1 --rounds 2 --seed 5 \
    --json "$OUT/gate-$iso.json" > "$OUT/gate-$iso.log" 2>&1
  echo "$iso rc $? wall $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s"
done
cat > /tmp/load_twice.py <<'PY'
import os, sys, time
from harness.engine_loader import import_engine
t = time.perf_counter()
eng = import_engine(sys.argv[1]).load(sys.argv[2], device="cuda", max_batch=4, max_seq_len=128)
eng.generate([[1, 2, 3] * 5], import_engine(sys.argv[1]).SamplingParams(max_tokens=4, ignore_eos=True))
import torch; torch.cuda.synchronize()
print(f"{sys.argv[3]} load+first generate {time.perf_counter() - t:.1f} s")
PY
export TRITON_CACHE_DIR=/tmp/triton-cold-$$
timeout 120 python3 /tmp/load_twice.py $E /tmp/tck cold-cache
timeout 120 python3 /tmp/load_twice.py $E /tmp/tck warm-cache
python3 - "$OUT" <<'PY'
import json, sys, pathlib
print(f"{'isolation':<12}{'static s':>10}{'parity s':>10}{'bench s':>10}  worker start-ups s (static | parity | bench)")
for p in sorted(pathlib.Path(sys.argv[1]).glob("gate-*.json")):
    r = json.loads(p.read_text())
    st = {s["name"]: s["seconds"] for s in r["stages"]}
    ws = r.get("timings", {}).get("worker_start_s", {})
    print(f"{r.get('isolation')!s:<12}{st.get('static', 0):>10.1f}{st.get('parity', 0):>10.1f}{st.get('bench', 0):>10.1f}  "
          f"{ws.get('static')} | {ws.get('parity')} | {ws.get('bench')}  ok={r['ok']} {r.get('verdict')} "
          + "; ".join(f"{s['name']}: {(s['error'] or '')[:150]}" for s in r["stages"] if not s["ok"]))
PY
