#!/usr/bin/env bash
# The workloads of issues 11/12 (conc64, conc128, ttft-2k, ttft-8k, prefill-16k) at full size on the H200.
#   bash scripts/h200/workloads_new.sh ours   # our engine (generated/, or E=...), one load, ROUNDS samples each
#   bash scripts/h200/workloads_new.sh vllm   # vLLM 0.25.1 on the same checkpoint (after harness/peers/vllm/README.md's
#                                             # install calls 1-3 on this warm machine: /tmp/site/vllm present)
# CK: the full NVFP4 checkpoint (written with seed 0 when absent, several minutes); WORKLOADS: comma list (default the
# five); ROUNDS (default 3). Writes $OUT/ours.json or $OUT/vllm.json (+ .log) and prints one row per workload:
# median, spread, roofline and fraction of it (harness/workload_roofline.py). Our engine holds max S + 1 = 129 slots
# of max(P + N) + 8 = 16,009 tokens (unpaged: ~43 GB KV + 8 GB GDN state + ~22 GB weights): one engine fits, an A/B
# gate of both engines with conc128 and prefill-16k together does not (select them in two gate runs).
set -uo pipefail
MODE=${1:?usage: workloads_new.sh ours|vllm}
source scripts/h200/env.sh
CK=${CK:-/tmp/ck-qwen3.6-35b-a3b-nvfp4}
E=${E:-generated/qwen3.6-35b-a3b-nvfp4-h200}
WORKLOADS=${WORKLOADS:-conc64,conc128,ttft-2k,ttft-8k,prefill-16k}
ROUNDS=${ROUNDS:-3}
if [ ! -f "$CK/model.safetensors.index.json" ]; then
  metainfer checkpoint --model qwen3.6-35b-a3b --quant nvfp4 --out "$CK" --seed 0 --force > "$OUT/checkpoint.log" 2>&1 \
    || { tail -5 "$OUT/checkpoint.log"; exit 1; }
fi
echo "mode $MODE engine $E checkpoint $CK workloads $WORKLOADS rounds $ROUNDS"

if [ "$MODE" = ours ]; then
  grep -q "capacity(" harness/bench.py || { echo "harness/bench.py does not size engine.load by harness.workloads.capacity yet (W's patch)"; exit 1; }
  timeout 560 python3 - "$E" "$CK" "$WORKLOADS" "$ROUNDS" "$OUT/ours.json" > "$OUT/ours.log" 2>&1 <<'EOF'
import json, sys
from harness.bench import BenchConfig, bench_single, shapes_for
from metainfer.targets import detect, get_gpu
engine, ck, names, rounds, out = sys.argv[1:]
config = BenchConfig(names.split(","), int(rounds), 0, shapes_for("full"), "cuda", detect())
res = bench_single(engine, ck, config)
json.dump({"peer": "ours", "engine": engine, "gpu_profile": config.gpu.name, "workloads": res}, open(out, "w"), indent=1)
EOF
  echo "ours rc $?"; tail -3 "$OUT/ours.log"; RES="$OUT/ours.json"
elif [ "$MODE" = vllm ]; then
  [ -d /tmp/site/vllm ] || { echo "vLLM is not installed in /tmp/site: run harness/peers/vllm/README.md's calls 1-3 first"; exit 1; }
  timeout 560 python3 harness/peers/vllm/run_vllm.py --checkpoint "$CK" --out "$OUT/vllm.json" --workloads "$WORKLOADS" \
    --reps "$ROUNDS" --reps-long "$ROUNDS" --gpu-memory-utilization 0.8 > "$OUT/vllm.log" 2>&1
  echo "vllm rc $?"; grep -v '^USDT' "$OUT/vllm.log" | tail -3; RES="$OUT/vllm.json"
else
  echo "usage: workloads_new.sh ours|vllm"; exit 2
fi

python3 - "$RES" "$CK" <<'EOF'
import json, sys
from harness.bench import model_facts
from harness.workload_roofline import roofline_figure
from harness.workloads import FULL_SHAPES, WORKLOADS
from metainfer.targets import detect, get_gpu
res = json.load(open(sys.argv[1]))
text, quant = model_facts(sys.argv[2])
gpu = detect() or get_gpu("h200")
print(f"{res.get('peer')}: {sys.argv[1]}")
print(f"{'workload':<12} {'P/N/S':>14} {'median':>11} {'unit':<13} {'spread':>7} {'roofline':>10} {'fraction':>8}")
for name, r in res["workloads"].items():
    w = WORKLOADS[name]
    s, med = w.at(FULL_SHAPES), r.get("median")
    shape, roof = f"{s.prompt}/{s.output}/{s.streams}", roofline_figure(w, text, quant, gpu, FULL_SHAPES)
    if med is None:
        print(f"{name:<12} {shape:>14}  not measured")
        continue
    spread = (max(r["samples"]) - min(r["samples"])) / med
    frac = med / roof if w.higher_is_better else roof / med
    print(f"{name:<12} {shape:>14} {med:>11.4g} {w.unit:<13} {spread:>7.1%} {roof:>10.4g} {frac:>8.1%}")
EOF
