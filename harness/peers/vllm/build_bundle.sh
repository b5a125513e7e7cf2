#!/usr/bin/env bash
# Build the vLLM 0.25.1 bundle for the H200 machine (Python 3.12, torch 2.11+cu130, no registry).
# Runs HERE (pip reaches PyPI). Idempotent: each step leaves a marker and is skipped when done.
#
#   harness/peers/vllm/build_bundle.sh            # -> .vllm_bundle/part00.. + manifest.json
#
# Steps (../shared/peers/vllm-0.25.1.md says why each is needed):
#   1. pip download vllm==0.25.1 (cp38-abi3 manylinux x86_64) and every wheel in the deps list,
#      for CPython 3.12 / manylinux x86_64, --no-deps (the list is the resolved closure).
#   2. unpack the vllm wheel and slim it for Hopper: drop the FA2 build, vllm-rs,
#      fmha_sm100 (Blackwell only) and deep_gemm's cp313/cp314 extensions.
#   3. tar + xz: site/vllm, site/vllm-0.25.1.dist-info, wheels/*.whl (sorted, fixed mtime/owner).
#   4. split into parts of at most VLLM_BUNDLE_PART_BYTES (default 59,000,000) and write
#      manifest.json with each part's sha256 (harness/peers/vllm/bundle.py).
#
# Environment: VLLM_BUNDLE_CACHE (work folder, default ~/.cache/metainfer/vllm-0.25.1; outside the
# repo so nothing downloaded can travel or be committed), VLLM_BUNDLE_OUT (default <repo>/.vllm_bundle),
# VLLM_BUNDLE_DEPS (default <repo>/../shared/peers/vllm-0.25.1-deps.txt), XZ_THREADS (default 0 = all).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VERSION=0.25.1
CACHE="${VLLM_BUNDLE_CACHE:-$HOME/.cache/metainfer/vllm-$VERSION}"
OUT="${VLLM_BUNDLE_OUT:-$REPO/.vllm_bundle}"
DEPS="${VLLM_BUNDLE_DEPS:-$REPO/../shared/peers/vllm-$VERSION-deps.txt}"
PART_BYTES="${VLLM_BUNDLE_PART_BYTES:-59000000}"
TARBALL="$CACHE/vllm-$VERSION-bundle.tar.xz"

[[ -f "$DEPS" ]] || { echo "error: deps list $DEPS not found; set VLLM_BUNDLE_DEPS to vllm-$VERSION-deps.txt" >&2; exit 2; }
mkdir -p "$CACHE" "$OUT"

# pip matches manylinux_2_N exactly: offer every N the H200 machine's glibc can run.
PLATFORMS=()
for n in $(seq 5 39); do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
pip_download() {  # $1 = dest, rest = requirement args
  local dest="$1"; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$dest" "$@"
}

# 1. downloads
if [[ ! -f "$CACHE/vllm_wheel/.done" ]]; then
  echo "[1/4] downloading vllm==$VERSION"
  pip_download "$CACHE/vllm_wheel" "vllm==$VERSION"
  touch "$CACHE/vllm_wheel/.done"
fi
if [[ ! -f "$CACHE/wheels/.done" ]] || ! cmp -s "$DEPS" "$CACHE/wheels/.done"; then
  echo "[1/4] downloading $(grep -c '==' "$DEPS") dependency wheels"
  pip_download "$CACHE/wheels" -r "$DEPS"
  cp "$DEPS" "$CACHE/wheels/.done"
fi
n_req=$(grep -c '==' "$DEPS"); n_whl=$(ls "$CACHE/wheels"/*.whl | wc -l)
[[ "$n_whl" -eq "$n_req" ]] || { echo "error: $n_whl wheels in $CACHE/wheels for $n_req requirements (one version of each): remove the folder and rerun" >&2; exit 1; }

# 2. unpack + slim
STAGE="$CACHE/stage"
if [[ ! -f "$STAGE/.done" ]]; then
  echo "[2/4] unpacking and slimming the vllm wheel"
  rm -rf "$STAGE"; mkdir -p "$STAGE/site"
  python3 -m zipfile -e "$CACHE"/vllm_wheel/vllm-$VERSION-*.whl "$STAGE/site"
  rm -rf "$STAGE/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" \
         "$STAGE/site/vllm/vllm-rs" \
         "$STAGE/site/vllm/third_party/fmha_sm100" \
         "$STAGE/site/vllm/third_party/deep_gemm/"_C.cpython-313-*.so \
         "$STAGE/site/vllm/third_party/deep_gemm/"_C.cpython-314-*.so
  # zipfile -e drops the executable bit; nothing in site/ is run directly, so none is restored.
  mkdir -p "$STAGE/wheels"
  cp "$CACHE"/wheels/*.whl "$STAGE/wheels/"
  touch "$STAGE/.done"
fi

# 3. pack
if [[ ! -f "$TARBALL.done" ]]; then
  echo "[3/4] packing $(du -sh "$STAGE" | cut -f1) with xz (a few minutes)"
  tar -C "$STAGE" --sort=name --mtime='2026-11-30 00:00Z' --owner=0 --group=0 --numeric-owner \
      -cf - site wheels | xz -T"${XZ_THREADS:-0}" -6 > "$TARBALL.tmp"
  mv "$TARBALL.tmp" "$TARBALL"
  touch "$TARBALL.done"
fi

# 4. split + manifest
echo "[4/4] splitting into parts of at most $PART_BYTES bytes"
python3 "$HERE/bundle.py" split "$TARBALL" --out "$OUT" --part-bytes "$PART_BYTES" \
  --note "vllm==$VERSION slimmed for Hopper + $n_whl wheels from $(basename "$DEPS")"
python3 "$HERE/bundle.py" verify --dir "$OUT"
ls -l "$OUT"
