#!/usr/bin/env bash
# The full-size upgrade on the H200: an engine built for qwen3.5-35b-a3b (NVFP4, synthetic checkpoint)
# is upgraded to qwen3.6-35b-a3b (its own synthetic checkpoint): facts diff, render on the new branch,
# replay of the old branch's accepted iterations, each re-gated at full size, and the upgrade report.
#
#   bash scripts/h200/upgrade_full.sh start   # call 1: starts, in its own session, the qwen3.5 checkpoint,
#                                             # metainfer build for qwen3.5, the qwen3.6 checkpoint and
#                                             # metainfer upgrade to qwen3.6
#   bash scripts/h200/upgrade_full.sh wait    # call 2 (and more, at once: the machine stays warm ~30 s):
#                                             # wait, then collect
#
# Each call leaves under $OUT: upgrade.md / upgrade.json / upgrade.html (once written), upgrade.log
# (the build's and the upgrade's progress lines) and results.tgz (run records of both, both branches as
# a git bundle, the upgrade's gate JSONs). BUILD_ARGS / UPGRADE_ARGS override the defaults below; the
# old build needs accepted iterations for the replay to carry anything (the offline agent on the H200
# found none in 9 min on 2026-11-30: give it time, or BUILD_ARGS with --agent scripted --script ...).
# Expected time (2026-11-30 figures): checkpoints about 95 s each, the build 6 min plus its last gate,
# the upgrade's baseline and each carried iteration a full-size gate (2-3 min each): about 20 min in all.
set -uo pipefail
START=$(date +%s)
LIMIT=${CALL_LIMIT_S:-560}
MODE=${1:?usage: upgrade_full.sh start|wait}
source scripts/h200/env.sh
RES=/tmp/upg; mkdir -p "$RES"
OLD=qwen3.5-35b-a3b-nvfp4-h200
NEW=qwen3.6-35b-a3b-nvfp4-h200

collect() {
  tail -c 200000 /tmp/upgrade.log > "$OUT/upgrade.log" 2>/dev/null
  run=$(ls -td runs/*-"$NEW" 2>/dev/null | head -1)
  if [ -n "$run" ]; then
    for f in upgrade.md upgrade.json upgrade.html; do [ -f "$run/$f" ] && cp "$run/$f" "$OUT/$f"; done
  fi
  branches=$(git for-each-ref --format='%(refname)' "refs/heads/metainfer/" 2>/dev/null)
  [ -n "$branches" ] && git bundle create "$RES/branches.bundle" $branches 2>/dev/null
  [ -d runs ] && tar czf "$RES/runs.tgz" --exclude=.gitkeep --exclude='*.bundle' runs
  tar czf "$OUT/results.tgz" -C "$RES" .
}
trap collect EXIT

if [ "$MODE" = start ]; then
  git init -q 2>/dev/null
  git add -A && git -c user.name=metainfer -c user.email=dev@metainfer.local commit -qm "device copy of $(cat .device_commit 2>/dev/null || echo unknown)"
  git config user.name metainfer; git config user.email dev@metainfer.local
  # one chain in its own session (setsid), so it outlives this call while the machine stays warm; the
  # qwen3.5 checkpoint is removed before the qwen3.6 one is written (each is about 25 GB, the disk 64 GB)
  setsid nohup bash -c "set -x
    metainfer checkpoint --model qwen3.5-35b-a3b --quant nvfp4 --out /tmp/ck-old --seed 0 --force
    metainfer build --model qwen3.5-35b-a3b --quant nvfp4 --gpu h200 --checkpoint /tmp/ck-old \
      ${BUILD_ARGS:---agent offline --iterations 3 --rounds 3 --time-limit 6}
    rm -rf /tmp/ck-old
    metainfer checkpoint --model qwen3.6-35b-a3b --quant nvfp4 --out /tmp/ck-new --seed 0 --force
    metainfer upgrade --target $OLD --to qwen3.6-35b-a3b --checkpoint /tmp/ck-new \
      ${UPGRADE_ARGS:---rounds 3 --repair-attempts 1}" > /tmp/upgrade.log 2>&1 < /dev/null &
  echo $! > /tmp/upgrade.pid
fi

wait_bg /tmp/upgrade.pid || true
grep -E "iter|kept|repaired|dropped|baseline|upgraded|finished|Error|error" /tmp/upgrade.log | tail -25
