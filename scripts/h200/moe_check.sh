#!/usr/bin/env bash
# The MoE kernels of issue 12 on the H200, one device call each (results under $OUT):
#   bash scripts/h200/moe_check.sh            # GPU tests of the new op (+ the tiny engine's, which now runs it)
#                                             # and the microbenchmark at 1, 32, 64, 2048, 8192 tokens (~6 min)
#   SWEEP=small bash scripts/h200/moe_check.sh  # launch-config sweep at 1, 32, 64 tokens (bench only)
#   SWEEP=large bash scripts/h200/moe_check.sh  # launch-config sweep at 2048, 8192 tokens (bench only)
#   SWEEP=odd bash scripts/h200/moe_check.sh    # the interpreter's odd-shape tests, compiled (many small compiles)
# Files: moe_gpu_tests.log, moe_bench.json (table in the log). The engine runs the new op from
# moe_ops_min_tokens (16) tokens on and kernels.moe_nvfp4 below; if the GPU tests fail, the old path at
# every T stays one tunable away: "moe_ops": 0 in templates/engine/qwen3_5_moe/engine/tunables.json.j2.
set -uo pipefail
source scripts/h200/env.sh
case "${SWEEP:-}" in
  small) timeout 560 python3 scripts/h200/moe_bench.py --tokens 1 32 64 --sweep --no-old 2>&1 | tee "$OUT/moe_bench.log" | tail -40 ;;
  large) timeout 560 python3 scripts/h200/moe_bench.py --tokens 2048 8192 --sweep --no-old 2>&1 | tee "$OUT/moe_bench.log" | tail -40 ;;
  odd) timeout 560 python3 -m pytest -q tests/test_ops_moe.py 2>&1 | tee "$OUT/moe_odd_tests.log" | tail -25 ;;
  *)
    timeout 330 python3 -m pytest -q tests/test_ops_moe_gpu.py tests/test_engine_gpu.py 2>&1 \
      | tee "$OUT/moe_gpu_tests.log" | tail -25
    timeout 240 python3 scripts/h200/moe_bench.py 2>&1 | tee "$OUT/moe_bench.log" | tail -12 ;;
esac
