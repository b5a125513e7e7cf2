#!/usr/bin/env bash
# The bench's replay check on a GPU (docs/BENCHMARKS.md step 8), honest and cheating, in one call (about 8 min):
# the whole gate (quick parity set, then the A/B bench and its replay) on the tiny NVFP4 engine rendered for $GPU,
# first against itself, then for each cheat of $CHEATS (tests/cheats/<name>.py applied to a copy) against the
# honest engine. What it answers: does an honest engine's replay stay within its bound and allowance
# (`REPLAY_FLIP_TOKENS`), and how many of a timed call's tokens does a cut armed in generate() flip at GPU shapes.
#
#   GPU=h100 bash scripts/h200/replay_gpu.sh          # on an nvidia-h100-x1 (the gate refuses --gpu h200 there)
#   CHEATS="generate_fp8_at_bench_batch sticky_bench_fp8_acts" ROUNDS=2 GATE_S=270 bash scripts/h200/replay_gpu.sh
#
# Leaves under $OUT: <name>.json (the gate's JSON), <name>.log, and prints one summary line per gate.
set -uo pipefail
source scripts/h200/env.sh
GPU=${GPU:-h200}
CHEATS=${CHEATS-generate_fp8_at_bench_batch}  # CHEATS="" runs the honest gate alone
ROUNDS=${ROUNDS:-2}
metainfer checkpoint --model qwen3.6-35b-a3b-tiny --quant nvfp4 --out /tmp/tck --seed 0 --force > /dev/null || exit 1
metainfer render --model qwen3.6-35b-a3b-tiny --quant nvfp4 --gpu "$GPU" --out /tmp/tg --force > /dev/null || exit 1
E=/tmp/tg/qwen3.6-35b-a3b-tiny-nvfp4-$GPU

gate() {  # gate NAME CANDIDATE_DIR
  timeout "${GATE_S:-270}" python3 -m harness.gate --engine "$2" --baseline "$E" --checkpoint /tmp/tck --gpu "$GPU" \
    --stages static,parity,bench --parity-lengths 1,17,65 --rounds "$ROUNDS" --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1
  echo "$1: gate rc $?"
  python3 - "$OUT/$1.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as err:
    sys.exit(f"  no gate JSON: {err}")
for s in r["stages"]:
    print(f"  {s['name']:7s} ok={s['ok']} {s.get('seconds')} s {(s.get('error') or '')[:600]}")
b = r.get("bench") or {}
print("  replay:", b.get("replay_check"), "\n  output check:", {k: v for k, v in (b.get("output_check") or {}).items()
                                                              if not isinstance(v, (list, dict))})
EOF
}

gate honest "$E"
for c in $CHEATS; do
  d=/tmp/cheat_$c/$(basename "$E")
  rm -rf "/tmp/cheat_$c" && mkdir -p "/tmp/cheat_$c" && cp -r "$E" "$d"
  python3 -c "import sys; from pathlib import Path; import importlib; importlib.import_module('tests.cheats.' + sys.argv[1]).apply(Path(sys.argv[2]))" "$c" "$d" || continue
  gate "$c" "$d"
done
