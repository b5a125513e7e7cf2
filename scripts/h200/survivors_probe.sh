#!/usr/bin/env bash
# The two mutants that survived full-size parity on the H200 (docs/results/h200-2026-12-03-b), probed in one
# device session, in the background like scripts/h200/judge_full.sh:
#   1. the full-width shallow twin (scripts/h200/shallow_twin.py: one layer period of the real shapes, 4.4 B
#      parameters, so the reference runs in float32): the unmutated engine on the whole GPU set, then
#      gdn_state_bf16, rope_slow_pairs_dropped and attn_scale (a known kill, as the control) on the mutants'
#      short set. Does an fp32 reference at the real shapes see the state cut that the bf16 one cannot?
#      Then the twin on 2,049 and one LONG prompt for gdn_state_bf16 and rope_slow_pairs_dropped: does the twin
#      judge both survivors, and at what cost (a twin would make the gate's parity far cheaper than full size)?
#   2. the full-size engine on a set with one long prompt (LONG, default 12000-16000 tokens, drawn from the
#      seed) and 2,049: the unmutated engine, then rope_slow_pairs_dropped. At theta 1e7 the dropped pairs
#      turn 0.25-5.2 rad at 16k positions against at most 1.3 rad at 4k. Also: what a prompt that long costs
#      the judge (the phase timings in probe_full.log).
#
#   bash scripts/h200/survivors_probe.sh start > $OUT/call1.log 2>&1   # never piped: the jobs outlive the call
#   bash scripts/h200/survivors_probe.sh wait  > $OUT/call2.log 2>&1   # collect (up to CALL_LIMIT_S)
#
# Leaves under $OUT: probe_twin.{txt,json,log}, probe_twin_long.{txt,json,log} and probe_full.{txt,json,log}. STEPS (32) sets the decode steps
# of step 2. The full-size checkpoint is reused from judge_full.sh's place when it is there.
set -uo pipefail
START=$(date +%s)
LIMIT=${CALL_LIMIT_S:-560}
MODE=${1:?usage: survivors_probe.sh start|wait}
source scripts/h200/env.sh
RES=/tmp/probe; mkdir -p "$RES"
export METAINFER_ISOLATION=process METAINFER_TRUSTED_TRITON_CACHE=/tmp/mi-triton-shared METAINFER_LOG=INFO
CK=${CK:-/tmp/ck-qwen3.6-35b-a3b-nvfp4}
LONG=${LONG:-12000-16000}
FULL=${FULL:-1}  # 0: the twin's runs only (no full-size checkpoint, no step 2)
if [ "$MODE" = start ]; then
  TWIN=$(python3 scripts/h200/shallow_twin.py --model qwen3.6-35b-a3b --periods 1 --out /tmp/twin | cut -d' ' -f1)
  echo "twin: $TWIN"
  setsid nohup bash -c "
    metainfer checkpoint --model $TWIN --quant nvfp4 --out /tmp/ck-twin --seed 1234 --force > $RES/checkpoint_twin.log 2>&1
    ([ $FULL = 0 ] || [ -f $CK/model.safetensors.index.json ] || metainfer checkpoint --model qwen3.6-35b-a3b --quant nvfp4 --out $CK \
        --seed 1234 --force > $RES/checkpoint_full.log 2>&1) &
    metainfer mutants --model $TWIN --quant nvfp4 --gpu h200 --device cuda --checkpoint /tmp/ck-twin \
        --mutant-lengths 65,2049,3000-4000 --only gdn_state_bf16 --only rope_slow_pairs_dropped --only attn_scale \
        --json $RES/probe_twin.json > $RES/probe_twin.txt 2> $RES/probe_twin.log
    metainfer mutants --model $TWIN --quant nvfp4 --gpu h200 --device cuda --checkpoint /tmp/ck-twin \
        --lengths 2049,$LONG --steps ${STEPS:-32} --only rope_slow_pairs_dropped --only gdn_state_bf16 \
        --json $RES/probe_twin_long.json > $RES/probe_twin_long.txt 2> $RES/probe_twin_long.log
    wait
    [ $FULL = 0 ] || metainfer mutants --model qwen3.6-35b-a3b --quant nvfp4 --gpu h200 --device cuda --checkpoint $CK \
        --lengths 2049,$LONG --steps ${STEPS:-32} --only rope_slow_pairs_dropped \
        --json $RES/probe_full.json > $RES/probe_full.txt 2> $RES/probe_full.log" < /dev/null > /dev/null 2>&1 &
  echo $! > /tmp/probe.pid
fi
wait_bg /tmp/probe.pid || true
for f in probe_twin.txt probe_twin.json probe_twin.log probe_twin_long.txt probe_twin_long.json probe_twin_long.log probe_full.txt probe_full.json probe_full.log; do
  [ -f "$RES/$f" ] && cp "$RES/$f" "$OUT/$f"
done
echo "== twin"; cat "$RES/probe_twin.txt" 2>/dev/null; tail -3 "$RES/checkpoint_twin.log" 2>/dev/null
echo "== twin long"; cat "$RES/probe_twin_long.txt" 2>/dev/null; grep "harness.parity" "$RES/probe_twin_long.log" 2>/dev/null | tail -8
echo "== full"; cat "$RES/probe_full.txt" 2>/dev/null; grep "harness.parity" "$RES/probe_full.log" 2>/dev/null | tail -12
