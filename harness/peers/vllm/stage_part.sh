#!/usr/bin/env bash
# Stage one carried part of the vLLM bundle on the H200 machine (run in the repo root copy there).
#
#   bash harness/peers/vllm/stage_part.sh N      # N = 0, 1, ... (part00, part01, ...)
#
# Copies .vllm_bundle/partNN and .vllm_bundle/manifest.json (both carried by this device call)
# to /tmp/vllm_bundle/ (VLLM_BUNDLE_STAGE), checks the part's sha256 against the manifest, and
# prints which parts are staged so far. /tmp survives only while the machine stays warm
# (about 30 s idle): send the parts in back-to-back calls.
set -euo pipefail
[[ $# -eq 1 && "$1" =~ ^[0-9]+$ ]] || { echo "usage: $0 N   (the part index, 0-based)" >&2; exit 2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 "$HERE/bundle.py" stage "$((10#$1))" --src .vllm_bundle --dest "${VLLM_BUNDLE_STAGE:-/tmp/vllm_bundle}"
df -h "${VLLM_BUNDLE_STAGE:-/tmp/vllm_bundle}" | tail -1
