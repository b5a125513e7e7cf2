#!/usr/bin/env bash
# The mutation suite on the full-size engine (qwen3.6-35b-a3b, NVFP4, rendered for the h200) against its
# synthetic checkpoint: the unmutated engine must pass parity and every mutant (metainfer/mutants/) must be
# rejected. GPU prompt lengths and decode steps come from harness/prompts.py (23 prompts up to 2,049 tokens
# plus one drawn from the seed in [3000, 4000], 32 decode steps); the reference runs in bf16 (fp32 does not
# fit beside the engine), so the bf16-vs-bf16 tolerances of docs/PARITY.md apply.
#
#   bash scripts/h200/mutants_full.sh start   # call 1: checkpoint (if missing), then the suite in the background
#   bash scripts/h200/mutants_full.sh wait    # call 2, 3, ...: wait (up to CALL_LIMIT_S) and collect
#
# Leaves under $OUT: mutants.txt (the table and score, for docs/results/), mutants.json, mutants.log.
# On a device budget (each full-size engine load costs tens of seconds) the default runs the unmutated
# engine on the full GPU set and every mutant on a short set (65, 2049 and one drawn in [3000, 4000], 32
# steps), in the order below; MUTANT_ARGS replaces that selection (MUTANT_ARGS="" runs all on the full set).
# Never pipe this script's output: the suite runs on in the background and would hold the pipe open.
# The suite's engines are our own mutants, not candidates, so its workers share one Triton cache (each full-size
# load would otherwise recompile every kernel) and run as plain processes (a namespace worker mounts it read-only).
# The unmutated engine's row times the GPU parity set itself (the gate's parity stage at full size).
set -uo pipefail
START=$(date +%s)
LIMIT=${CALL_LIMIT_S:-560}
MODE=${1:?usage: mutants_full.sh start|wait}
source scripts/h200/env.sh
CK=${CK:-/tmp/ck-qwen3.6-35b-a3b-nvfp4}
SEED=${SEED:-1234}
export METAINFER_ISOLATION=process METAINFER_TRUSTED_TRITON_CACHE=/tmp/mi-triton-shared
RES=/tmp/mutants; mkdir -p "$RES"
# every mutant of the catalogue (metainfer/mutants/catalogue.py, so a new one is never left out), in this order: the
# small-cut ones first (a few-per-cent output scale, a decay formula: the likeliest to hide under bf16 noise at full
# size), then the rest of those never judged at full size, then the six judged on 2026-12-03 (session 9,
# docs/results/h200-2026-12-03-b: 4 killed, gdn_state_bf16 and rope_slow_pairs_dropped survived), so a call that
# ends at its limit has added rows the score lacks (each row is printed as it finishes)
FIRST="attn_out_scaled gdn_out_scaled gdn_decay_exp"
LAST="gdn_state_bf16 rope_slow_pairs_dropped attn_scale qk_norm_swapped attn_window q_norm_skipped"
ALL=$(python3 -c "from metainfer.mutants.catalogue import catalogue; print(' '.join(m.name for m in catalogue(1)))") || exit 1
ONLY=""
for m in $FIRST $(for n in $ALL; do case " $FIRST $LAST " in *" $n "*) ;; *) echo "$n";; esac; done) $LAST; do
  ONLY="$ONLY --only $m"
done
# MUTANT_LENGTHS=65,2049 drops the drawn prompt from the mutants' set (about 25 s of checks per mutant)
ARGS=${MUTANT_ARGS-"--mutant-lengths ${MUTANT_LENGTHS:-65,2049,3000-4000} $ONLY"}
# BASE_LENGTHS=65,2049,3000-4000 runs the unmutated engine on the mutants' short set too (about 2 min instead of 13:
# the control the short-set rows need, without the whole GPU set's figures)
[ -n "${BASE_LENGTHS:-}" ] && ARGS="--lengths $BASE_LENGTHS $ARGS"

collect() {
  for f in mutants.txt mutants.json mutants.log; do [ -f "$RES/$f" ] && cp "$RES/$f" "$OUT/$f"; done
}
trap collect EXIT

if [ "$MODE" = start ]; then
  [ -f "$CK/model.safetensors.index.json" ] || metainfer checkpoint --model qwen3.6-35b-a3b --quant nvfp4 \
    --out "$CK" --seed "$SEED" --force > "$RES/checkpoint.log" 2>&1 || { tail -5 "$RES/checkpoint.log"; exit 1; }
  # setsid: the suite keeps running after this call returns (until the machine goes back)
  setsid nohup bash -c "metainfer mutants --model qwen3.6-35b-a3b --quant nvfp4 --gpu h200 --device cuda \
      --checkpoint $CK --json $RES/mutants.json $ARGS > $RES/mutants.txt 2> $RES/mutants.log" < /dev/null &
  echo $! > /tmp/mutants.pid
fi

wait_bg /tmp/mutants.pid || true
tail -40 "$RES/mutants.txt"
