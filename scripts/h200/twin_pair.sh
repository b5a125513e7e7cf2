#!/usr/bin/env bash
# The gate's twin stage on the H200 for the unmutated full-size engine and some mutants, all at once, in the
# background (twin_stage.sh runs one gate per call; these gates run side by side on the one GPU, each with its
# own judge, reference and engine workers). What it is for: the token-mixer figures of the twin (honest and
# mutated) that set the CUDA threshold of the mixer check (harness/tolerances.py, docs/PARITY.md).
#
#   RUNS=honest,rope_slow_pairs_dropped,attn_out_scaled bash scripts/h200/twin_pair.sh start   # call 1
#   bash scripts/h200/twin_pair.sh wait                                                          # call 2, 3, ...
#
# RUNS: "honest" or names of metainfer/mutants/catalogue.py. Each call leaves under $OUT twin_<name>.json and
# twin_<name>.log (once written) and twin.txt (one summary line per finished gate, with its mixer figures).
set -uo pipefail
START=$(date +%s)
LIMIT=${CALL_LIMIT_S:-560}
MODE=${1:?usage: twin_pair.sh start|wait}
source scripts/h200/env.sh
export METAINFER_LOG=INFO
CK=${CK:-/tmp/ck-qwen3.6-35b-a3b-nvfp4}
E=/tmp/gen/qwen3.6-35b-a3b-nvfp4-h200
RES=/tmp/twins; mkdir -p "$RES"

collect() {
  cp "$RES"/twin_*.json "$RES"/twin_*.log "$RES"/twin.txt "$OUT"/ 2>/dev/null
  python3 scripts/h200/twin_summary.py "$RES"/twin_*.json 2>/dev/null | tee "$OUT/twin.txt"
}
trap collect EXIT

if [ "$MODE" = start ]; then
  [ -f "$E/engine/rendered_for.json" ] || python3 scripts/h200/full_run.py --steps render --gen "$(dirname "$E")" --out "$RES" > "$RES/render.log" 2>&1 || { tail -5 "$RES/render.log"; exit 1; }
  [ -f "$CK/model.safetensors.index.json" ] || metainfer checkpoint --model qwen3.6-35b-a3b --quant nvfp4 --out "$CK" \
    --seed 1234 --force > "$RES/ck.log" 2>&1 || { tail -5 "$RES/ck.log"; exit 1; }
  echo "checkpoint and render ready at $(( $(date +%s) - START )) s"
  : > "$RES/pids"
  for name in $(echo "${RUNS:-honest,rope_slow_pairs_dropped}" | tr , ' '); do
    eng=$E
    if [ "$name" != honest ]; then
      eng=/tmp/mut/$name/$(basename "$E")
      python3 -c "import sys; from pathlib import Path; from metainfer.mutants.catalogue import by_name; from metainfer.mutants.runner import apply_mutant; src = Path(sys.argv[1]); apply_mutant(by_name(sys.argv[2]), src, Path(sys.argv[3]))" "$E" "$name" "$eng" || exit 1
    fi
    twin=$(python3 -c "import sys; from pathlib import Path; from metainfer.twin import make_twin; print(make_twin(Path(sys.argv[1]), 1)[1])" "$eng") || exit 1
    OMP_NUM_THREADS=4 setsid nohup python3 -m harness.gate --engine "$eng" --twin-engine "$twin" --checkpoint "$CK" --gpu h200 \
      --stages twin --seed 7 --json "$RES/twin_$name.json" > "$RES/twin_$name.out" 2> "$RES/twin_$name.log" < /dev/null &
    echo $! > "$RES/pid_$name"
  done
fi

wait_bg "$RES"/pid_* || true
