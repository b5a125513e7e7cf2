#!/usr/bin/env bash
# One device call (~6-8 min): the run-level parity figures (layer-local update and logits, consistency;
# docs/PARITY.md "Layer-local parity") of the template engine on the H200, tiny NVFP4 target, fp32 reference,
# three prompt nonces, and HF-bf16's own figures on the GPU (harness.anchor_local). Sets tolerances.CUDA_LOCAL_SCALE
# and CUDA_CONSISTENCY_SCALE: the engine's worst figure over its CPU threshold, per kind, is what the GPU needs. Table on stdout,
# JSON lines under $OUT.
set -uo pipefail
source scripts/h200/env.sh
T0=$(date +%s)
W=/tmp/parity_local; rm -rf "$W"; mkdir -p "$W"
metainfer checkpoint --model qwen3.6-35b-a3b-tiny --quant nvfp4 --seed 1234 --out "$W/ck" > /dev/null 2>&1 || exit 1
metainfer render --model qwen3.6-35b-a3b-tiny --quant nvfp4 --gpu h200 --out "$W/gen" > /dev/null || exit 1
timeout 420 python3 - "$W" "$OUT" <<'EOF'
import json, sys
from pathlib import Path
from harness.parity import run_parity
from harness.reference_cache import ReferenceCache
from harness.tolerances import CUDA_CONSISTENCY_SCALE, CUDA_LOCAL_SCALE, get_tolerance

w, out = Path(sys.argv[1]), Path(sys.argv[2])
engine = next((w / "gen").iterdir())
cpu = get_tolerance("bfloat16", "float32")
worst = {"local": 0.0, "consistency": 0.0}
for nonce in (1, 2, 3):
    with ReferenceCache(w / "ck", device="cuda", dtype="float32", nonce=nonce) as ref:
        res = run_parity(engine, w / "ck", seed=1, device="cuda", reference=ref)
    d = res.to_json()
    local = [x / (t / CUDA_LOCAL_SCALE) for x, t in zip(res.local_update_errors or [], res.local_update_tolerances or [])]
    worst["local"] = max([worst["local"], *local, res.local_logits_err / cpu.local_logits])
    worst["consistency"] = max([worst["consistency"], *(x / cpu.consistency for x in res.consistency.values())])
    print(f"nonce {nonce}: ok {res.ok}  local " + " ".join(f"{x:.4f}" for x in res.local_update_errors or [])
          + f"  logits {res.local_logits_err:.4f}  consistency {res.consistency}"
          + f"  max prefill {res.max_rel_err:.3f} decode {res.max_decode_rel_err:.3f}  failures {res.update_failures[:2]}", flush=True)
    with open(out / "parity_local.jsonl", "a") as f:
        f.write(json.dumps({"nonce": nonce, **d}) + "\n")
print(f"worst figure / CPU threshold: layer-local {worst['local']:.2f} (CUDA_LOCAL_SCALE must exceed this; {CUDA_LOCAL_SCALE} now), "
      f"consistency {worst['consistency']:.2f} (CUDA_CONSISTENCY_SCALE; {CUDA_CONSISTENCY_SCALE} now)")
EOF
echo "parity rc $? ($(( $(date +%s) - T0 )) s)"
timeout $(( 560 - ($(date +%s) - T0) )) python3 -m harness.anchor_local --checkpoint "$W/ck" --device cuda --seeds 1,2 \
  > "$OUT/anchor_local.jsonl" 2> "$OUT/anchor_local.log"; echo "anchor rc $? ($(( $(date +%s) - T0 )) s)"; tail -1 "$OUT/anchor_local.jsonl"
