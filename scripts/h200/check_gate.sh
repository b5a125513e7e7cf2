#!/usr/bin/env bash
# A short device call after changing the judge (about 2 min): the kernel tests touched since the
# last run, then the whole gate (static, parity, A/B bench) on the tiny NVFP4 engine rendered for
# the h200 against itself, so a new guard that raises a false alarm on CUDA shows before a real build.
set -uo pipefail
source scripts/h200/env.sh
timeout 150 python3 -m pytest -q tests/test_kernels_attention.py tests/test_kernels_route.py tests/test_kernels_rope.py 2>&1 | tail -4
metainfer checkpoint --model qwen3.6-35b-a3b-tiny --quant nvfp4 --out /tmp/tck --seed 0 > /dev/null
metainfer render --model qwen3.6-35b-a3b-tiny --quant nvfp4 --gpu h200 --out /tmp/tg --force > /dev/null
E=/tmp/tg/qwen3.6-35b-a3b-tiny-nvfp4-h200
timeout 300 python3 -m harness.gate --engine $E --baseline $E --checkpoint /tmp/tck --gpu h200 \
  --stages static,parity,bench --parity-lengths 1,17,65 --rounds 3 --json "$OUT/gate.json" > "$OUT/gate.log" 2>&1
echo "gate rc $?"; tail -5 "$OUT/gate.log"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('ok', r['ok'], [(s['name'], s['ok'], (s['error'] or '')[:200]) for s in r['stages']], r['bench'] and r['bench']['objective'])" "$OUT/gate.json"
