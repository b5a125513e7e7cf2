#!/usr/bin/env bash
# The MoE op of this tree against another copy of the engine (BASE, e.g. main's while this tree is a branch), in one
# device call: this tree's GPU MoE tests first (a kernel that is wrong on the GPU is not timed), then moe_bench.py at
# the same T for both, same random experts and routing (results under $OUT: moe_gpu_tests.log, moe_<name>.log).
#
#   git archive main templates/engine/qwen3_5_moe/engine | tar -x -C .cmp      # here, before the call
#   BASE=.cmp/templates/engine/qwen3_5_moe/engine bash scripts/h200/moe_ab.sh   # device call; carry .cmp
#
# TOKENS (default 1 16 32 64 128 2048 8192) and SWEEP=1 (this tree only: its launch sweep at TOKENS) as moe_bench.py.
set -uo pipefail
source scripts/h200/env.sh
TOKENS=${TOKENS:-1 16 32 64 128 2048 8192}
timeout 200 python3 -m pytest -q -x tests/test_ops_moe_gpu.py 2>&1 | tee "$OUT/moe_gpu_tests.log" | tail -5
grep -q " passed" "$OUT/moe_gpu_tests.log" && ! grep -q "failed\|error" "$OUT/moe_gpu_tests.log" || { echo "GPU tests did not pass: not timed"; exit 1; }
for run in "this:" "base:${BASE:-}"; do
  name=${run%%:*}; dir=${run#*:}
  [ "$name" = base ] && [ -z "$dir" ] && continue
  MOE_ENGINE_DIR=$dir timeout 240 python3 scripts/h200/moe_bench.py --tokens $TOKENS --no-old \
    ${SWEEP:+$([ "$name" = this ] && echo --sweep --sweep-budget-s 120)} 2>&1 | tee "$OUT/moe_$name.log" | tail -12
  [ -f "$OUT/moe_bench.json" ] && mv "$OUT/moe_bench.json" "$OUT/moe_bench_$name.json"
done
