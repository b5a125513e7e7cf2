#!/usr/bin/env bash
# The gate's profile stage on the H200 (about 60-120 s on the tiny engine): torch.profiler over one
# prefill and one decode step of the candidate, kernels grouped by op, ms per step and roofline fraction.
# Tiny NVFP4 engine rendered for the h200 by default; the full-size engine (generated/) when a full
# checkpoint exists at $CK. STAGES=profile (default) runs the profile alone; STAGES=static,parity,bench,profile
# the whole gate. BATCH sets the decode step's sequences (default 1). Writes $OUT/gate.json, $OUT/gate.log.
# Prints the per-op table of both phases and whether CUDA-graph replays showed their kernels.
set -uo pipefail
source scripts/h200/env.sh
STAGES=${STAGES:-profile}
BATCH=${BATCH:-1}
CK=${CK:-/tmp/ck-qwen3.6-35b-a3b-nvfp4}
if [ -f "$CK/model.safetensors.index.json" ]; then
  E=generated/qwen3.6-35b-a3b-nvfp4-h200; LIMIT=480  # a device call has 600 s
else
  CK=/tmp/tck
  metainfer checkpoint --model qwen3.6-35b-a3b-tiny --quant nvfp4 --out $CK --seed 0 --force > /dev/null || exit 1
  metainfer render --model qwen3.6-35b-a3b-tiny --quant nvfp4 --gpu h200 --out /tmp/tg --force > /dev/null || exit 1
  E=/tmp/tg/qwen3.6-35b-a3b-tiny-nvfp4-h200; LIMIT=240
fi
echo "engine $E checkpoint $CK stages $STAGES batch $BATCH"
BASE=""; case "$STAGES" in *bench*) BASE="--baseline $E --rounds 3";; esac
timeout $((LIMIT + 60)) python3 -m harness.gate --engine $E $BASE --checkpoint $CK --gpu h200 --stages "$STAGES" \
  --parity-lengths 1,17,65 --profile-batch "$BATCH" --profile-timeout $LIMIT --json "$OUT/gate.json" > "$OUT/gate.log" 2>&1
echo "gate rc $?"; grep -v '^USDT' "$OUT/gate.log" | tail -6
python3 - "$OUT/gate.json" <<'EOF'
import json, sys
g = json.load(open(sys.argv[1]))
print("stages", [(s["name"], s["verdict"], round(s["seconds"], 1)) for s in g["stages"]])
p = g.get("profile") or {}
if not p.get("ok"):
    sys.exit(f"profile: {p.get('verdict')} {p.get('error')}")
print(f"time: {p['time']}; {p['seconds']} s")
fmt = lambda x: "-" if x is None else f"{x:.3g}"
for name, ph in p["phases"].items():
    print(f"\n{name}: tokens {ph['tokens']} batch {ph['batch']} context {ph['context']}  kernels {ph['total_ms']:.3f} ms "
          f"(wall {ph['wall_ms']:.3f} ms, profiled), {ph['kernel_calls']} launches, roofline {fmt(ph['roofline_ms'])} ms, "
          f"fraction {fmt(ph['roofline_fraction'])}")
    print(f"  {'op':<14} {'ms/step':>9} {'calls':>7} {'names':>5} {'share':>6}  roofline")
    for o in ph["ops"]:
        rf = "-" if o["roofline_fraction"] is None else f"{fmt(o['roofline_fraction'])} ({o['roofline_basis']})"
        print(f"  {o['op']:<14} {o['ms']:>9.3f} {o['calls']:>7} {o['kernels']:>5} {o['ms'] / ph['total_ms']:>6.1%}  {rf}")
    if ph.get("matmul"):
        m = ph["matmul"]
        print(f"  matmul ({', '.join(m['ops'])}): {m['ms']:.3f} ms vs weight bytes at full bandwidth {m['roofline_ms']:.3f} ms: "
              f"fraction {fmt(m['roofline_fraction'])}")
    if not ph["ops"]:
        print("  no kernels recorded (a CUDA-graph replay the profiler did not see into?)")
    print("  top kernels:", "; ".join(f"{k['name'][:50]} [{k['op']}] {k['ms']:.3f}" for k in ph["top_kernels"][:6]))
EOF
