#!/usr/bin/env bash
# Device call 1 (about 3 min): the GPU tests (kernels compiled at real shapes, the tiny engine
# on CUDA: parity with HF, CUDA-graph decode vs eager). Results under $OUT.
source scripts/h200/env.sh
python3 -m pytest -q -m gpu tests/test_kernels_attention.py tests/test_kernels_norm.py tests/test_kernels_nvfp4.py \
  tests/test_kernels_gdn.py tests/test_engine_gpu.py -x 2>&1 | tee "$OUT/gpu_tests.log"
