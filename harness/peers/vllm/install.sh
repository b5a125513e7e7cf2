#!/usr/bin/env bash
# Install the staged vLLM bundle into /tmp/site on the H200 machine (after the last stage_part.sh).
#
#   bash harness/peers/vllm/install.sh && export PYTHONPATH=/tmp/site
#
# Verifies every part against the manifest, joins them, checks the whole sha256, unpacks,
# pip-installs the wheels (--no-index --no-deps --target), copies the slimmed vllm tree into the
# same folder and smoke-imports vllm. Idempotent: a second run with the same bundle only re-imports.
# Environment: VLLM_BUNDLE_STAGE (default /tmp/vllm_bundle), VLLM_SITE (default /tmp/site).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STAGE="${VLLM_BUNDLE_STAGE:-/tmp/vllm_bundle}"
SITE="${VLLM_SITE:-/tmp/site}"
SHA="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sha256"])' "$STAGE/manifest.json")"

if [[ "$(cat "$SITE/.vllm_bundle_sha256" 2>/dev/null)" != "$SHA" ]]; then
  t0=$SECONDS
  python3 "$HERE/bundle.py" join --dir "$STAGE" --out "$STAGE/bundle.tar.xz"
  rm -rf "$STAGE/x" && mkdir -p "$STAGE/x" "$SITE"
  if command -v xz >/dev/null; then
    xz -dc -T0 "$STAGE/bundle.tar.xz" | tar -x -C "$STAGE/x"
  else
    python3 -c 'import sys,tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$STAGE/bundle.tar.xz" "$STAGE/x"
  fi
  rm -f "$STAGE/bundle.tar.xz"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$STAGE"/x/wheels/*.whl
  cp -a "$STAGE/x/site/." "$SITE/"
  rm -rf "$STAGE/x"
  echo "$SHA" > "$SITE/.vllm_bundle_sha256"
  echo "installed the vLLM bundle into $SITE in $((SECONDS - t0)) s"
fi
PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" python3 -c 'import vllm, vllm._custom_ops; from vllm import LLM, SamplingParams; print("vllm", vllm.__version__, "from", vllm.__file__)'
echo "use: export PYTHONPATH=$SITE"
