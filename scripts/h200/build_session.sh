#!/usr/bin/env bash
# The main job on the H200: `metainfer build` at full size, in back-to-back device calls.
#
#   bash scripts/h200/build_session.sh start   # call 1: GPU tests, checkpoint, kernel timings,
#                                              # decode profile, vLLM token cross-check, then the
#                                              # build loop started in its own session
#   bash scripts/h200/build_session.sh wait    # call 2 (and more): wait for the build; collect
#
# The build outlives a call only while the machine stays warm (about 30 s idle), so call again
# at once. Each call leaves under $OUT: results.tgz (every step's JSON and logs, the run record,
# the build branch as a git bundle) and build.log. STAGE_PART=N also stages vLLM bundle part N
# (carry .vllm_bundle/partNN and manifest.json). BUILD_ARGS overrides the build's options.
set -uo pipefail
START=$(date +%s)
LIMIT=${CALL_LIMIT_S:-560}  # stop waiting this many seconds into the call (device calls end at 600)
MODE=${1:?usage: build_session.sh start|wait}
source scripts/h200/env.sh
RES=/tmp/res; mkdir -p "$RES"
BRANCH=metainfer/qwen3.6-35b-a3b-nvfp4-h200

collect() {
  tail -c 200000 /tmp/build.log > "$OUT/build.log" 2>/dev/null
  if git rev-parse --verify -q "$BRANCH" >/dev/null; then
    git bundle create "$RES/build.bundle" "$BRANCH" 2>/dev/null
    git log --format='%h %s%n%(trailers)' "$BRANCH" > "$RES/branch_log.txt"
  fi
  [ -d runs ] && tar czf "$RES/runs.tgz" --exclude=.gitkeep runs
  tar czf "$OUT/results.tgz" -C "$RES" .
}
trap collect EXIT

if [ -n "${STAGE_PART:-}" ]; then bash harness/peers/vllm/stage_part.sh "$STAGE_PART"; fi

if [ "$MODE" = start ]; then
  [ -n "${SKIP_TESTS:-}" ] || timeout 300 python3 -m pytest -q -x tests/test_kernels_nvfp4.py tests/test_kernels_route.py \
    tests/test_kernels_gdn.py tests/test_kernels_norm.py tests/test_engine_gpu.py > "$RES/gpu_tests.log" 2>&1
  tail -3 "$RES/gpu_tests.log"
  python3 scripts/h200/full_run.py --steps ${START_STEPS:-checkpoint,render,crosscheck,profile} --out "$RES"
  git init -q 2>/dev/null
  git add -A && git -c user.name=metainfer -c user.email=dev@metainfer.local commit -qm "device copy of $(cat .device_commit 2>/dev/null || echo unknown)"
  # setsid: the build keeps running after this call returns (until the machine goes back)
  setsid nohup metainfer build --model qwen3.6-35b-a3b --quant nvfp4 --gpu h200 --agent offline \
    --checkpoint /tmp/ckpt ${BUILD_ARGS:---iterations 4 --rounds 3 --time-limit 9} > /tmp/build.log 2>&1 < /dev/null &
  echo $! > /tmp/build.pid
fi

# wait for the build (or the call's limit), showing progress
wait_bg /tmp/build.pid || true
grep -E "iteration|accepted|rejected|baseline|Error|error" /tmp/build.log | tail -20
