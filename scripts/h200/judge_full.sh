#!/usr/bin/env bash
# One device session's judge work, started in the background by the first call and collected by later ones:
# the full-size mutation suite (scripts/h200/mutants_full.sh), optionally after the tiny engine's GPU parity figures
# (scripts/h200/parity_local.sh: the CUDA scales of harness/tolerances.py), one after the other: parity_local is the tiny model
# (a few GB), the suite the full-size bf16 reference (~70 GB) and the engine (~22 GB); nothing here is timed.
#
#   bash scripts/h200/judge_full.sh start > $OUT/call1.log 2>&1   # never piped: the jobs outlive the call
#   bash scripts/h200/judge_full.sh wait  > $OUT/call2.log 2>&1   # collect (up to CALL_LIMIT_S) while they run
#
# PARITY_LOCAL=1 runs parity_local first (about 7 min alone; measured on 2026-12-02, docs/results/h200-2026-12-02-c):
# by default only the suite runs. Leaves under $OUT: mutants.{txt,json,log} (and parity_local.{log,jsonl}, anchor_local.*).
set -uo pipefail
START=$(date +%s)
LIMIT=${CALL_LIMIT_S:-560}
MODE=${1:?usage: judge_full.sh start|wait}
source scripts/h200/env.sh
PL=/tmp/pl_out; mkdir -p "$PL"
export METAINFER_LOG=INFO
if [ "$MODE" = start ]; then
  # one after the other on the GPU: two processes sharing it are time-sliced, and the launch-bound HF reference slowed
  # >10x beside another job there (2026-12-02, docs/results/h200-2026-12-02-c); the full-size checkpoint (host work
  # only) is written while parity_local runs
  CK=${CK:-/tmp/ck-qwen3.6-35b-a3b-nvfp4}
  setsid nohup bash -c "([ -f $CK/model.safetensors.index.json ] || metainfer checkpoint --model qwen3.6-35b-a3b \
      --quant nvfp4 --out $CK --seed ${SEED:-1234} --force > $PL/checkpoint.log 2>&1) &
    [ ${PARITY_LOCAL:-0} = 1 ] && OUT=$PL bash scripts/h200/parity_local.sh > $PL/parity_local.log 2>&1; wait
    CK=$CK CALL_LIMIT_S=1 bash scripts/h200/mutants_full.sh start > $PL/mutants_start.log 2>&1" < /dev/null > /dev/null 2>&1 &
  echo $! > /tmp/parity_local.pid
fi
collect() { cp "$PL"/* "$OUT"/ 2>/dev/null; for f in mutants.txt mutants.json mutants.log; do [ -f /tmp/mutants/$f ] && cp /tmp/mutants/$f "$OUT/$f"; done; }
wait_bg /tmp/parity_local.pid /tmp/mutants.pid || true
collect
echo "== parity_local"; tail -8 "$PL/parity_local.log" 2>/dev/null
echo "== mutants"; tail -30 /tmp/mutants/mutants.txt 2>/dev/null; grep "harness.parity" /tmp/mutants/mutants.log | tail -30
