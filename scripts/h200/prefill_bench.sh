#!/usr/bin/env bash
# Prefill on the H200 (issue 11), one device call (~6-9 min; split it with STEPS if a call runs out):
#   bash scripts/h200/prefill_bench.sh                 # GPU tests of the prefill ops, then ops,checkpoint,ttft
#   STEPS=ops bash scripts/h200/prefill_bench.sh       # only the per-op microbenchmarks (no checkpoint)
#   SKIP_TESTS=1 STEPS=checkpoint,ttft bash scripts/h200/prefill_bench.sh
# Leaves under $OUT: prefill_tests.log, prefill_<step>.json, prefill_bench.log (the printed table).
source scripts/h200/env.sh
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 300 python3 -m pytest -q -rs tests/test_ops_prefill_gpu.py tests/test_ops_prefill_gdn.py \
    tests/test_ops_prefill_attention.py tests/test_ops_prefill_conv1d.py -s 2>&1 | tail -40 | tee "$OUT/prefill_tests.log"
fi
python3 scripts/h200/prefill_bench.py --steps "${STEPS:-ops,checkpoint,ttft}" --out "$OUT" 2>&1 | tee "$OUT/prefill_bench.log"
