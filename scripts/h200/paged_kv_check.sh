#!/usr/bin/env bash
# One device call (~5 min): is paged KV (tunable kv_block_size) ready to be the GPU default?
# 1. the paged-KV kernel tests and the attention/prefill/engine GPU tests, compiled on CUDA;
# 2. scripts/h200/paged_kv_check.py: the tiny target rendered for h200, static vs paged (block 16, 64,
#    256) logits and greedy tokens, CUDA graphs on and off, the pool sized from free memory.
# Flip the GPU default in templates/engine/qwen3_5_moe/engine/tunables.json.j2 only if both are green
# ("PAGED KV CHECK OK"); then time decode/prefill at full size (the paged reads are gathers) before keeping it.
set -uo pipefail
source scripts/h200/env.sh
T0=$(date +%s)
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_paged_kv.py tests/test_kernels_attention.py \
  tests/test_kernels_rope.py tests/test_ops_prefill_attention.py tests/test_engine_gpu.py > "$OUT/paged_tests.log" 2>&1
echo "gpu tests rc $? ($(( $(date +%s) - T0 )) s)"; grep -E "passed|failed|Error" "$OUT/paged_tests.log" | tail -15
timeout $(( 570 - ($(date +%s) - T0) )) python3 scripts/h200/paged_kv_check.py --out "$OUT" > "$OUT/paged_kv_check.log" 2>&1
echo "paged check rc $? ($(( $(date +%s) - T0 )) s)"; tail -12 "$OUT/paged_kv_check.log"
