#!/usr/bin/env bash
# A short device call before a long one (about 3 min): every kernel test compiled on the H200
# (odd shapes and the real ones), the tiny engine's GPU tests (parity with HF, CUDA-graph decode
# equals eager), and the kernel timings at the real shapes (kernels.bench --graph, T = 1, 8, 32)
# of the h200 engine rendered from this tree. Results under $OUT: gpu_tests.log, kbench.txt, *.json.
set -uo pipefail
source scripts/h200/env.sh
timeout 330 python3 -m pytest -q tests/test_kernels_*.py tests/test_engine_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
python3 scripts/h200/full_run.py --steps render,kbench --gen /tmp/gen --out "$OUT"
cat "$OUT/kbench.txt" 2>/dev/null
