#!/usr/bin/env bash
# One device call (~9 min): GPU tests of the new prefill and MoE ops and the engine, then the per-op
# prefill microbenchmarks and the MoE microbenchmark. Logs and JSON under $OUT.
set -uo pipefail
source scripts/h200/env.sh
T0=$(date +%s)
timeout 250 python3 -m pytest -q -x -p no:cacheprovider tests/test_ops_prefill_gpu.py tests/test_ops_moe_gpu.py tests/test_engine_gpu.py \
  > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc $? ($(( $(date +%s) - T0 )) s)"; grep -E "passed|failed|Error|error" "$OUT/gpu_tests.log" | tail -15
timeout 150 python3 scripts/h200/prefill_bench.py --steps ops --out "$OUT" > "$OUT/prefill_ops.log" 2>&1; echo "prefill ops rc $? ($(( $(date +%s) - T0 )) s)"; tail -25 "$OUT/prefill_ops.log"
timeout $(( 570 - ($(date +%s) - T0) )) python3 scripts/h200/moe_bench.py > "$OUT/moe_bench.log" 2>&1; echo "moe bench rc $? ($(( $(date +%s) - T0 )) s)"; tail -20 "$OUT/moe_bench.log"
