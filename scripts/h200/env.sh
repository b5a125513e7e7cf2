# Sourced at the start of every device command: the carried wheels, the package on PYTHONPATH,
# a `metainfer` command, the tool versions. The device image has torch/triton/transformers but
# no registry (see /work/.library/device/KINDS.md); GitPython travels as wheels in .whl/.
set -uo pipefail
export PYTHONUNBUFFERED=1
# installed once per machine: a second script sourcing this while the first runs must not rewrite /tmp/site under it
if ls .whl/*.whl >/dev/null 2>&1 && [ "$(ls .whl/*.whl | md5sum)" != "$(cat /tmp/site/.wheels 2>/dev/null)" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  ls .whl/*.whl | md5sum > /tmp/site/.wheels
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p /tmp/bin
printf '#!/bin/sh\nexec python3 -m metainfer.cli "$@"\n' > /tmp/bin/metainfer && chmod +x /tmp/bin/metainfer
export PATH="/tmp/bin:$PATH"
export OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)'
# wait_bg PIDFILE...: wait while any job named by a pid file runs, until LIMIT seconds after START (both set by the
# calling script); returns 1 when it stopped at the limit. The start/wait scripts (judge_full, mutants_full,
# upgrade_full, survivors_probe, build_session) leave their jobs running in their own session and collect with this.
wait_bg() {
  local f alive
  while :; do
    alive=0
    for f in "$@"; do kill -0 "$(cat "$f" 2>/dev/null || echo 0)" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    [ $(( $(date +%s) - START )) -ge "$LIMIT" ] && { echo "call limit: still running; call 'wait' again"; return 1; }
    sleep 10
  done
}
